"""The co-evolution loop's stages, run in order (scripts/loop.py): collect -> world model -> BC ->
imagined RL -> real evaluation -> grow the dataset -> fine-tune the world model -> imagined RL again,
then the report. Every stage goes through `LoopState.stage`, so a re-run reuses finished stages and the
library calls underneath resume an unfinished one. The configuration and bookkeeping are in
`imagination.loop.config`.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from imagination.eval.calibrate import CalibrateConfig, calibrate_success, missing_outcome
from imagination.eval.closed_loop import paired_separation
from imagination.eval.evaluate import evaluate, finished_results
from imagination.eval.grasp_gate import GraspGateConfig
from imagination.eval.jobs import EvalConfig
from imagination.eval.real_rollouts import evaluate_and_record
from imagination.eval.suites import merge_results, suite_config, table_markdown
from imagination.eval.task_bias import task_bias_from_rollouts
from imagination.imagine import open_proprio
from imagination.loop.adopt import adoption
from imagination.loop.arms import real_data_control
from imagination.loop.config import LoopConfig, LoopState, finetune_config, guard
from imagination.loop.grasp_inputs import GraspInputPaths, build_grasp_inputs
from imagination.loop.report import write_report
from imagination.rl.training import ImagineRLConfig, train_rl
from infra.atomic import atomic_write_json, atomic_write_text
from infra.cli import save_config
from infra.provenance import provenance
from policies.base import Policy
from policies.bc import BCConfig, train_bc_on_data
from robot_data.collection import collect_dataset
from robot_data.dataset import EpisodeDataset, select_meta
from robot_data.sim_labels import label_dataset
from world_models.fidelity import EvalWorldModelConfig, evaluate_world_model
from world_models.model import WorldModel
from world_models.training import train_world_model


def _train_rl(cfg: ImagineRLConfig) -> dict:
    """train_rl's result without its per-iteration history (loop.json keeps the summary only)."""
    if cfg.imagination.reward == "grasp":  # its start episodes need simulator labels: the new ones are replayed
        label_dataset(cfg.start_data, progress=False)
    return {k: v for k, v in train_rl(cfg).items() if k != "history"}


def _rate(results_path: str) -> float:
    return float(json.loads(Path(results_path).read_text())["overall"]["success_rate"])


def _eval_world_model(state: LoopState, name: str, model_path: str, episodes: list[int], steps: int) -> str:
    out = Path(model_path).parent / "eval"
    cfg = EvalWorldModelConfig(checkpoint=model_path, episodes=episodes, max_steps=steps, out_dir=str(out))
    state.stage(f"eval_{name}", lambda: {k: v for k, v in evaluate_world_model(cfg).items()
                                         if k in ("psnr", "ssim", "static_psnr", "static_ssim", "success_f1")})
    return str(out / "eval.json")


def _data_proprio(run: Path, data: str, wm_path: str, given: str) -> str:
    """The proprio model that every stage on the dataset as it is now reads: `given` (rl.proprio) when set, else
    one fitted on every episode of `data` with the world model's chunk length (imagination.imagine.open_proprio)
    and kept as run/proprio/proprio_<episodes>.pt. Why one: calibration, the imagined evaluations and RL each
    fitted their own on the same episodes; the dataset only changes when a round's
    evaluation is recorded into it, and then the episode count names the new fit."""
    if given:
        return given
    path = run / "proprio" / f"proprio_{len(EpisodeDataset(data, verify=False))}.pt"
    if not path.is_file():
        open_proprio(WorldModel.load(wm_path), fit_data=data, cache=path)
    return str(path)


def _calibrate(cfg: LoopConfig, state: LoopState, name: str, model_path: str, data: str,
               proprio: str = "") -> dict | None:
    """Set the model's success threshold on the data's replayed real episodes (in place; see
    imagination.eval.calibrate). Needs both outcomes in the data: skipped, and said, otherwise."""
    if not cfg.calibrate:
        return None
    missing = missing_outcome(data)
    if missing:
        print(f"[loop] calibrate {name}: skipped, {missing}; the success threshold stays 0.5")
        return {"skipped": missing}
    cal_cfg = CalibrateConfig(checkpoint=model_path, data_dir=data, proprio=proprio,
                              num_threads=cfg.world_model.num_threads)
    keep = ("threshold", "balanced_accuracy", "balanced_accuracy_at_default", "positives", "negatives")
    return state.stage(f"calibrate_{name}",
                       lambda: {k: v for k, v in calibrate_success(cal_cfg).items() if k in keep})


def _grasp_inputs(cfg: LoopConfig, state: LoopState, policy: str, wm_path: str) -> dict[str, str]:
    """Reward "grasp": the start policy's own rollouts, near-miss grasps and proprio model, on the collected
    tasks and init states (imagination/loop/grasp_inputs.py), under run/grasp_inputs/."""
    run, c = Path(cfg.out_dir) / "grasp_inputs", cfg.collect
    where = GraspInputPaths(own_rollouts=str(run / "own_rollouts"), near_miss_labels=str(run / "near_miss_labels"),
                            proprio=str(run / "proprio.pt"))
    jobs = replace(cfg.eval, env=c.suite, tasks=list(c.tasks), episodes_per_task=c.episodes_per_task,
                   init_state_offset=c.init_state_offset)
    return state.stage("grasp_inputs", lambda: build_grasp_inputs(where, str(Path(cfg.out_dir) / "data"), policy,
                                                                  wm_path, jobs, cfg.grasp_inputs))


def _with_grasp_inputs(rl_cfg: ImagineRLConfig, inputs: dict[str, str]) -> ImagineRLConfig:
    """The round's RL config reading the grasp inputs: the classifier is fit on the start data (the policy's
    recorded episodes of earlier rounds included) and the own rollouts, with the near misses."""
    im = replace(rl_cfg.imagination, grasp_train_data=[rl_cfg.start_data, inputs["own_rollouts"]],
                 grasp_label_dirs=[inputs["near_miss_labels"]])
    return replace(rl_cfg, imagination=im, proprio=inputs["proprio"])


def _with_task_bias(state: LoopState, name: str, rl_cfg: ImagineRLConfig, rollouts: str) -> ImagineRLConfig:
    """The round's RL config judging with per-task logit offsets (imagination/eval/task_bias.py), fit on its start
    policy's recorded real episodes in `rollouts` re-run in imagination through the round's own judge, world model
    and proprio model. Why: the judge ranks a task's grasps well but its level is off by task; with the offsets its
    per-task rates are no further from the real ones than a real re-run's (docs/notebook/loop.md, "The gate
    against reality"), the verdict the reward gate holds a judge to."""
    im = rl_cfg.imagination
    gate = GraspGateConfig(world_model=rl_cfg.world_model, proprio=rl_cfg.proprio, train_data=list(im.grasp_train_data),
                           label_dirs=list(im.grasp_label_dirs), until=im.grasp_until, max_steps=im.max_steps,
                           grasp_point=im.grasp_point)
    fit = state.stage(f"{name}_task_bias", lambda: task_bias_from_rollouts(rollouts, rl_cfg.policy, gate))
    per_task = ", ".join(f"task {k}: {fit['bias'][int(k)]:+.2f} ({v['real_successes']}/{v['jobs']} real, imagined "
                         f"{v['imagined_before']:.2f} -> {v['imagined_after']:.2f})" for k, v in fit["tasks"].items())
    print(f"[loop] {name}: the judge's per-task offsets: {per_task}")
    return replace(rl_cfg, imagination=replace(im, grasp_point=replace(im.grasp_point, task_bias=list(fit["bias"]))))


def _over_suites(cfg: EvalConfig, suites: list[str], run: Callable[[EvalConfig], dict]) -> dict:
    """run(cfg), or with several suites run on each (imagination.eval.suites.suite_config: out_dir/<suite>/) and
    merged into out_dir/results.json, with the per-suite table in suites.md."""
    if not suites:
        return run(cfg)
    results = {}
    for s in suites:
        one = suite_config(cfg, s)
        # a suite finished before a stop is kept (with recording, its episodes are in the dataset already)
        results[s] = finished_results(one) or run(one)
    merged = merge_results(results)
    out = Path(cfg.out_dir)
    atomic_write_json(out / "results.json", merged, indent=1)
    atomic_write_text(out / "suites.md", table_markdown(merged["suites"], cfg.checkpoint))
    return merged


def _evaluate_phase(cfg: LoopConfig, state: LoopState, name: str, label: str, policy_path: str, wm_path: str,
                    record_round: int | None, rl_dir: str | None, proprio: str = "", imagined: bool = True) -> dict:
    """Real evaluation (recorded into the dataset when record_round is set) and imagined evaluation with `proprio`
    (unless `imagined` is False), on each collected suite when the loop collects several."""
    run, data = Path(cfg.out_dir), str(Path(cfg.out_dir) / "data")
    real_path = run / name / "eval_real" / "results.json"
    real_cfg = replace(cfg.eval, checkpoint=policy_path, out_dir=str(real_path.parent))
    suites = list(cfg.collect.suites)

    def real() -> dict:
        if record_round is None:
            r = _over_suites(real_cfg, suites, evaluate)
        else:
            extra = {"round": record_round, "policy": policy_path, "phase": name}
            r = _over_suites(real_cfg, suites, lambda c: evaluate_and_record(c, Policy.load(policy_path), data, extra))
        return {"success_rate": r["overall"]["success_rate"], "recorded": r.get("recorded")}

    real_result = state.stage(f"{name}_eval_real", real)
    imagined_path = None
    if cfg.imagined_eval and imagined:
        im_cfg = replace(cfg.eval, checkpoint=policy_path, env="imagination", world_model=wm_path, start_data=data,
                         proprio=proprio, out_dir=str(run / name / "eval_imagined"))
        state.stage(f"{name}_eval_imagined",
                    lambda: {"success_rate": _over_suites(im_cfg, suites, evaluate)["overall"]["success_rate"]})
        imagined_path = str(run / name / "eval_imagined" / "results.json")
        sep = paired_separation(json.loads(real_path.read_text()), json.loads(Path(imagined_path).read_text()))
        if sep is not None:  # the figure saying whether RL on this model can help (docs/loop.md, "Reading the report")
            figure = ("not measurable (no task has both real outcomes)" if math.isnan(sep.auc_within_task)
                      else f"AUC within task {sep.auc_within_task:.2f} (0.5 = imagination does not tell real "
                           "successes from failures)")
            print(f"[loop] {name}: reward signal on the real jobs: {figure}")
    phase = {"name": name, "label": label, "policy": policy_path, "real": str(real_path),
             "imagined": imagined_path, "rl": rl_dir, "world_model": wm_path}
    state.upsert("phases", phase)
    return real_result


def _control_arm(cfg: LoopConfig, state: LoopState, rl_cfg: ImagineRLConfig, bc_cfg: BCConfig, wm_path: str) -> None:
    """The real-data control (imagination/loop/arms.py): BC fine-tuned on every successful real episode round 1's
    RL consumed, with no world model; evaluated in real LIBERO on the same jobs (not recorded, not imagined)."""
    out = str(Path(cfg.out_dir) / "control")
    if not state.done("control"):
        recorded = select_meta(EpisodeDataset(rl_cfg.start_data, verify=False).meta, source="policy")
        if recorded:  # a run resumed from before this arm existed: its data holds round 1's recorded evaluation
            print(f"[loop] real-data control: skipped: {rl_cfg.start_data} already holds {len(recorded)} recorded "
                  "policy episodes, which round 1's RL did not read; run into a fresh out_dir to measure it")
            return
    control = state.stage("control", partial(real_data_control, rl_cfg, bc_cfg, out))
    _evaluate_phase(cfg, state, "control", "real-data control", control["policy_path"], wm_path, None, None,
                    imagined=False)


def _bias_rollouts(kept: str, own_rollouts: str, data: str) -> str:
    """Where the kept policy's recorded real episodes are, which its round's judge offsets are fit on: BC's are its
    own rollouts (BC's evaluation is not recorded), a round's are its evaluation, recorded into the data. Why by the
    kept policy and not the round number: a round that was not adopted leaves the next one starting from BC."""
    return own_rollouts if kept == "bc" else data


def _real_episodes(run: Path, phase: str) -> list[dict]:
    """The episode records of a phase's real evaluation (merged over suites when the loop collects several)."""
    return json.loads((run / phase / "eval_real" / "results.json").read_text())["episodes"]


def run_loop(cfg: LoopConfig) -> dict:
    """Run (or resume) the whole loop under cfg.out_dir; returns loop.json's content."""
    cfg.validate()
    run = Path(cfg.out_dir)
    state = LoopState(cfg)
    # what this (re)start runs with; a resumed run records the versions it finished under
    seeds = {"collect": cfg.collect.seed, "world_model": cfg.world_model.seed, "bc": cfg.bc.seed, "rl": cfg.rl.seed,
             "eval": cfg.eval.seed}
    jobs = {"env": list(cfg.collect.suites) or cfg.eval.env, "tasks": list(cfg.eval.tasks),
            "episodes_per_task": cfg.eval.episodes_per_task, "init_state_offset": cfg.eval.init_state_offset}
    state.data["provenance"] = provenance(seeds, jobs)
    state.save()
    save_config(cfg, run / "loop_config.yaml")
    data = str(run / "data")

    collect_cfg = replace(cfg.collect, out_dir=data)

    def collect() -> dict:
        collect_dataset(collect_cfg)
        return {"episodes": len(EpisodeDataset(data, verify=False))}

    n_start = state.stage("collect", collect)["episodes"]

    wm_cfg = replace(cfg.world_model, out_dir=str(run / "world_model"),
                     clips=replace(cfg.world_model.clips, data_dir=data))
    wm = state.stage("world_model", lambda: train_world_model(wm_cfg))
    wm_path, held_out = wm["model_path"], wm["held_out_episodes"]
    proprio = _data_proprio(run, data, wm_path, cfg.rl.proprio)
    state.upsert("world_models", {"name": "wm0", "path": wm_path, "train_dir": str(run / "world_model"),
                                  "eval": _eval_world_model(state, "wm0", wm_path, held_out, cfg.wm_eval_steps),
                                  "calibration": _calibrate(cfg, state, "wm0", wm_path, data, proprio)})

    bc_cfg = replace(cfg.bc, data_dir=data, out_dir=str(run / "bc"))
    bc = state.stage("bc", lambda: train_bc_on_data(bc_cfg))
    state.data["bc_dir"] = str(run / "bc")
    _evaluate_phase(cfg, state, "bc", "BC", bc["policy_path"], wm_path, None, None, proprio)

    kept, policy = "bc", bc["policy_path"]  # the policy the loop keeps (imagination/loop/adopt.py) and its file
    grasp = _grasp_inputs(cfg, state, policy, wm_path) if cfg.rl.imagination.reward == "grasp" else None
    for r in range(1, cfg.rounds + 2):
        name = f"round{r}"
        label = "after imagined RL" if r == 1 else f"after loop round {r - 1}"
        sources = ["expert", "perturbed"] + (["policy"] if r > 1 else [])  # later rounds also start from own failures
        rl_cfg = replace(cfg.rl, policy=policy, world_model=wm_path, start_data=data, out_dir=str(run / name / "rl"),
                         sources=sources, seed=cfg.rl.seed + r, proprio=proprio)
        if grasp is not None:
            rl_cfg = _with_grasp_inputs(rl_cfg, grasp)
            if cfg.grasp_task_bias:
                rl_cfg = _with_task_bias(state, name, rl_cfg, _bias_rollouts(kept, grasp["own_rollouts"], data))
        rl = state.stage(f"{name}_rl", partial(_train_rl, rl_cfg))
        candidate = rl["policy_path"]
        if r == 1 and cfg.control_arm:  # before round 1's evaluation is recorded into the data it reads
            _control_arm(cfg, state, rl_cfg, bc_cfg, wm_path)
        last = r == cfg.rounds + 1
        real = _evaluate_phase(cfg, state, name, label, candidate, wm_path, None if last else r, rl_cfg.out_dir,
                               rl_cfg.proprio)
        decision = adoption(r, name, kept, _real_episodes(run, kept), _real_episodes(run, name), cfg.adopt_margin)
        state.upsert("adoption", decision, match="round")
        print(f"[loop] {name}: {'adopted' if decision['adopted'] else 'not adopted'}: {decision['reason']}")
        if decision["adopted"]:
            kept, policy = name, candidate
        if last:
            break
        imagined = (_rate(str(run / name / "eval_imagined" / "results.json")) if cfg.imagined_eval
                    else real["success_rate"])
        g = guard(r, name, imagined, real["success_rate"], cfg.guard_margin, cfg.guard_failure_weight)
        state.upsert("guard", g, match="round")
        if g["fired"]:
            print(f"[loop] exploitation guard: imagined success {imagined:.2f} exceeds real {real['success_rate']:.2f} "
                  f"by more than {cfg.guard_margin:.2f}; failures weighted x{g['failure_weight']} in the fine-tune")
        ft_dir = run / name / "world_model"
        ft_cfg = finetune_config(cfg, data, str(ft_dir), wm_path, g["failure_weight"])
        wm_path = state.stage(f"{name}_world_model", partial(train_world_model, ft_cfg))["model_path"]
        proprio = _data_proprio(run, data, wm_path, cfg.rl.proprio)  # the data grew by this round's episodes
        # the same held-out episodes as the first model (a fine-tune never trains on them)
        state.upsert("world_models", {"name": f"wm{r}", "path": wm_path, "train_dir": str(ft_dir),
                                      "eval": _eval_world_model(state, f"wm{r}", wm_path, held_out, cfg.wm_eval_steps),
                                      "calibration": _calibrate(cfg, state, f"wm{r}", wm_path, data, proprio)})

    ds = EpisodeDataset(data, verify=False)
    added = select_meta(ds.meta, source="policy")
    state.data["data"] = {"episodes_before": n_start, "episodes_after": len(ds), "policy_episodes_added": len(added),
                          "failures_added": sum(not m.success for m in added),
                          "near_successes_added": sum(bool(m.extra.get("near_success")) for m in added)}
    state.save()
    md, html = write_report(run)
    print(f"report: {md}\n        {html}")
    return state.data


__all__ = ["run_loop"]
