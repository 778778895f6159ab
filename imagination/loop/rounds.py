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

A round must also earn its place (imagination/loop/adopt.py): each seed's new policy is compared, job by job on the
recorded jobs, with the policy that seed keeps (at first the RL start, recorded on the same jobs), and replaces it
only when it is not shown worse by more than the margin. A round that is not adopted leaves the next one starting
from the kept policy and its recording, and the seed's scored policy is the one it kept after the last round, whose
policies are recorded once more to decide it. Why: on LIBERO-Object one loop round made the policy worse than its
start, and nothing stopped it (docs/suites.md).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from imagination.eval.jobs import EvalConfig
from imagination.loop.adopt import adoption
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


def consumed_config(cfg: ImagineRLConfig, recorded: list[str]) -> ImagineRLConfig:
    """cfg with the datasets `recorded` among its judge's data, after its own, each once: what a round's judge reads,
    and (with the recordings made only to decide a round) what the recipe consumed in all, which the real-data
    control imitates and the budget counts."""
    train = list(dict.fromkeys([*cfg.imagination.grasp_train_data, *recorded]))
    return replace(cfg, imagination=replace(cfg.imagination, grasp_train_data=train))


def round_config(cfg: ImagineRLConfig, policy: str, own: str, recorded: list[str], out_dir: str) -> ImagineRLConfig:
    """The next round of one seed: RL from `policy`, its imagined episodes started on its own recorded rollouts `own`
    (source "policy"), the judge fit on cfg's data and every dataset in `recorded` (each once, in order). No
    adaptation to imagined frames: `policy` was trained from the recipe's start, adapted already if it adapts."""
    # the anchor keeps the episodes it anchored on (bc_data, else the first round's start data), not the recording
    return replace(consumed_config(cfg, recorded), policy=policy, start_data=own, sources=["policy"], out_dir=out_dir,
                   bc_data=cfg.bc_data or cfg.start_data, adapt=replace(cfg.adapt, steps=0))


def recording_episodes(own: str) -> list[dict]:
    """The job records of a recording made by `record_round` (its eval/results.json beside the dataset `own`), keyed
    for pairing by task and init state only: each round draws its own env seed, so the seed is left out of the key."""
    path = Path(own).parent / "eval" / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the recording of {own} has no evaluation results")
    return [{**e, "seed": 0} for e in json.loads(path.read_text())["episodes"]]


@dataclass
class Kept:
    """The policy one seed's loop keeps: its name ("start", "rl" for the first RL run, "loop<r>" for round r's), its
    file, and its recording on the round jobs (a dataset, and the job records decisions pair on)."""

    name: str
    policy: str
    own: str
    episodes: list[dict] = field(default_factory=list)


@dataclass
class Rounds:
    """What `run_rounds` did: the last round's RL configs and results (one per seed), the name and file of the policy
    each seed keeps and is scored with, each seed's decisions (adopt.py records; none without adoption), every
    recording the rounds made (the recipe consumed each) and the real env steps taken during their RL."""

    cfgs: list[ImagineRLConfig]
    rls: list[dict]
    kept: list[str]
    scored: list[str]
    decisions: list[list[dict]]
    recorded: list[str]
    real_steps: int


def round_name(r: int) -> str:
    """The name of the policy loop round r (0: the first RL run) trained."""
    return "rl" if r == 0 else f"loop{r}"


def run_rounds(cfgs: list[ImagineRLConfig], rls: list[dict], rounds: int, out: Path, data: str, jobs: EvalConfig,
               seed: int, start: str, margin: float, run: Callable[[list[ImagineRLConfig]], tuple[list[dict], int]],
               seed_dir: Callable[[str, int], str]) -> Rounds:
    """`rounds` loop rounds after the first RL run (configs `cfgs`, results `rls`, one per seed) that started from
    the policy `start`. Round r records each seed's policy in out/loop<r> (env seed `seed` + r - 1), refits the judge
    on every recording so far and runs RL again (`run`: configs -> results and real env steps) in
    out/loop<r>/<seed_dir("rl", k)>. margin < 1: the start is recorded first (out/loop0) and every recorded policy
    is decided against the seed's kept one (`adoption`); the last round's policies are recorded in
    out/loop<rounds+1>, which a longer run would record too. Those two recordings only decide: the judge never reads
    them, so a run whose rounds are all adopted trains exactly as with margin 1. margin 1: every round is adopted,
    and nothing more is recorded."""
    if not 0 <= margin <= 1:
        raise ValueError(f"--loop-adopt-margin: expected a success-rate difference in [0, 1], got {margin}")
    decide = margin < 1
    recorded: list[str] = []  # what the judge reads: every round's recording of the policies RL trained
    only_decided: list[str] = []  # recordings made only to decide: the start's, the last round's
    kept: list[Kept] = []
    if decide:
        own0 = record_round(out / "loop0", [start], data, jobs, seed - 1)[0]
        only_decided.append(own0)
        kept = [Kept("start", start, own0, recording_episodes(own0)) for _ in cfgs]
    decisions: list[list[dict]] = [[] for _ in cfgs]
    steps = 0
    for r in range(1, rounds + (2 if decide else 1)):
        folder = out / f"loop{r}"
        own = record_round(folder, [x["policy_path"] for x in rls], data, jobs, seed + r - 1)
        if r > rounds:
            only_decided += own
        else:
            recorded += own
        if decide:
            for k, (x, o) in enumerate(zip(rls, own)):
                episodes = recording_episodes(o)
                d = adoption(r - 1, round_name(r - 1), kept[k].name, kept[k].episodes, episodes, margin)
                decisions[k].append(d)
                if d["adopted"]:
                    kept[k] = Kept(round_name(r - 1), x["policy_path"], o, episodes)
        if r > rounds:  # the last round's policies, recorded to decide them
            break
        starts = [(kp.policy, kp.own) for kp in kept] if decide else [(x["policy_path"], o) for x, o in zip(rls, own)]
        cfgs = [round_config(c, p, o, recorded, str(folder / seed_dir("rl", k)))
                for k, (c, (p, o)) in enumerate(zip(cfgs, starts))]
        rls, s = run(cfgs)
        steps += s
    if not decide:
        kept = [Kept(round_name(rounds), x["policy_path"], "") for x in rls]  # unrecorded: scored as it is
    return Rounds(cfgs, rls, [k.name for k in kept], [k.policy for k in kept], decisions, recorded + only_decided,
                  steps)


__all__ = ["Kept", "Rounds", "check_round_recipe", "consumed_config", "record_round", "recording_episodes",
           "round_config", "round_jobs", "round_name", "run_rounds"]
