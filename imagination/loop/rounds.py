"""Loop rounds for a grasp recipe (bench/rl_gain.py --loop-rounds N): the RL policies' own real rollouts fed back.

Imagined RL with the grasp judge changes the policy on frames recorded by its start: what it sees is where the
start's arm went, not where its own actions put it. In reality the changed policy sees its own frames and closes
elsewhere (docs/results.md, "Loop rounds"). A round closes that gap the way the loop does, with real episodes:

    each seed's policy        its real rollouts on the training init states of the tasks the recipe imagines,
                              recorded with frames and simulator labels (imagination/loop/grasp_inputs.py)
    the judge                 refit on every episode recorded so far, every seed's (their failures are where the
                              judge was too kind)
    RL again                  from that policy, its imagined episodes started on its own recorded rollouts

What a round records is real data the recipe consumed: it enters the recipe's config (the start data and the judge's
training data), so the real-data control built from that config (imagination/loop/arms.py) imitates every success
among it, and the recipe's budget counts it. No env step is taken during RL.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from imagination.eval.jobs import EvalConfig
from imagination.loop.grasp_inputs import own_rollouts
from imagination.rl.training import ImagineRLConfig


def check_round_recipe(cfg: ImagineRLConfig, name: str = "--loop-rounds") -> None:
    """ValueError naming `name` unless cfg is a recipe a round can feed: the grasp judge, fit on recorded datasets."""
    if cfg.imagination.reward != "grasp":
        raise ValueError(f"{name}: a round refits the grasp judge on the policies' recorded rollouts; the recipe pays "
                         f"reward {cfg.imagination.reward!r} (expected 'grasp')")


def round_jobs(evalcfg: EvalConfig, tasks: list[int], train_init_states: int) -> EvalConfig:
    """The jobs a round records: init states 0..train_init_states-1 (the training init states, never the gate's or
    the benchmark's) of `tasks`, fast rendering, no videos."""
    return replace(evalcfg, tasks=list(tasks), episodes_per_task=train_init_states, init_state_offset=0, videos=0)


def record_round(folder: Path, policies: list[str], data: str, jobs: EvalConfig, seed: int) -> list[str]:
    """Each policy's real rollouts on `jobs` with simulator labels, in folder/rollouts, rollouts1, ... (made once,
    reused after). data gives the dataset layout (views, image size). Returns the recorded datasets, one per policy."""
    return [own_rollouts(str(folder / ("rollouts" if k == 0 else f"rollouts{k}")), policy, data, jobs, seed)
            for k, policy in enumerate(policies)]


def round_config(cfg: ImagineRLConfig, policy: str, own: str, recorded: list[str], out_dir: str) -> ImagineRLConfig:
    """The next round of one seed: RL from `policy`, its imagined episodes started on its own recorded rollouts `own`
    (source "policy"), the judge fit on cfg's data and every dataset in `recorded` (each once, in order). No
    adaptation to imagined frames: `policy` was trained from the recipe's start, adapted already if it adapts."""
    train = list(dict.fromkeys([*cfg.imagination.grasp_train_data, *recorded]))
    # the anchor keeps the episodes it anchored on (bc_data, else the first round's start data), not the recording
    return replace(cfg, policy=policy, start_data=own, sources=["policy"], out_dir=out_dir,
                   bc_data=cfg.bc_data or cfg.start_data, imagination=replace(cfg.imagination, grasp_train_data=train),
                   adapt=replace(cfg.adapt, steps=0))


__all__ = ["check_round_recipe", "record_round", "round_config", "round_jobs"]
