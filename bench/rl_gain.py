"""Does imagined RL give a policy more real LIBERO success than a user gets without it? Protocol v2: the best BC
the demonstrations give, the same start fine-tuned on the same real episodes without a world model, and the
recipe over several seeds, all on the same benchmark jobs.

    python bench/rl_gain.py                      # protocol v2 end to end (bench/protocol.py PROTOCOL_V2): builds or
                                                 # reuses data, world model, BC and the recipe's inputs under
                                                 # outputs/bench/rl_gain_v2, runs every arm, scores them paired
    python bench/rl_gain.py --seeds 0            # one seed of the recipe (a milestone; PASS needs --min-seeds)
    python bench/rl_gain.py --rl-run gpu/rl_s0 gpu/rl_s1 gpu/rl_s2    # the recipe's seeds already run (on a GPU)
    python bench/rl_gain.py --gate task --rl-run gpu/rl_s0 gpu/rl_s1 gpu/rl_s2   # each seed acts only on the tasks
                                                 # its choose-job evaluation holds; the controls are gated alike
    python bench/rl_gain.py --acts holding --recipe carry --rl-run rl_s0 rl_s1 rl_s2   # every arm but the start acts
                                                 # once the gripper closes, the start before (a recipe of its own)
    python bench/rl_gain.py --protocol v1 --arms start recipe --seeds 0   # the recorded v1 benchmark (start -> RL)
    python bench/rl_gain.py --recipe grasp --out-dir outputs/bench/rl_gain_v2/run_grasp   # another configs/rl preset
    python bench/rl_gain.py --bc bc/policy.pt --world-model wm/world_model.pt --data data --arms start recipe
    python bench/rl_gain.py --suite libero_goal --recipe goal_window --rl-from control   # RL starts from arm b,
                                                 # the start fine-tuned on the same real episodes (its own recipe)
    python bench/rl_gain.py --suite libero_goal --recipe goal_window --refine-world-model 1500   # the world model
                                                 # fine-tuned on the start's own rollouts first (no new real data)
    python bench/rl_gain.py --suite libero_goal --recipe goal_window --world-model-preset rl_gain_gpu \
        --rl device=cuda imagination.device=cuda  # one GPU: a 16M-parameter world model on the same data and own
                                                 # rollouts, RL there; every real evaluation on the CPU
    python bench/rl_gain.py --suite libero_goal --recipe goal_window --recipe-world-model wm/world_model.pt
                                                 # the recipe imagines in a model trained by hand (another batch size,
                                                 # another machine); the protocol's data, start and judge as they are
    python bench/rl_gain.py --suite libero_goal --recipe goal_grasp --rl-from control --loop-rounds 1
                                                 # each seed recorded on the training init states, its judge refit,
                                                 # RL again on its own frames; b again on all that was recorded; a
                                                 # round is kept only if its recording shows it no worse than the
                                                 # seed's kept policy (--loop-adopt-margin)
    python bench/rl_gain.py --suite libero_object   # protocol v2 on another suite, in the setting that
                                                 # bench/choose_start.py --suite libero_object chose and recorded

The arms (imagination/loop/arms.py): a `start`, the protocol's BC; b `control`, the start fine-tuned on every
successful real episode the recipe consumed, no world model; c `anchor`, the recipe's supervised anchor alone (only
when the recipe has one; when its updates leave the start's weights exactly as they were, scored with the start's
episodes); d `recipe`, imagined RL from the start, once per seed; with --loop-rounds also `control_loopN`, the start
fine-tuned on every success the recipe's rounds consumed. The jobs (docs/loop.md, "Protocol v2: imagination's own
gain"): the protocol's tasks, init states 0-9 train (data, world model, BC, RL starts), 0-19 choose (the BC start
and every recipe choice), 20-49 score: 150 real episodes per arm, the same (task, init state, seed) jobs in every
arm.

Prints each arm's real success per task, each arm against the start with its paired 95% interval
(imagination/eval/stats.py), every arm's real-data budget (episodes, env steps), how many recipes have been
scored on the benchmark's jobs (bench/scored/<root>.json for the project's roots, committed with the
results; <root>/scored.json for any other), and
`BENCH rl_gain ... own_gain_points=.. own_gain_ci95=[..] ... PASS|FAIL`. The own gain is the recipe's seeds,
job-averaged, minus the best control arm. PASS needs an own gain >= --threshold points (+10) with its interval's
lower end above 0, at least --min-seeds seeds (3), 0 real env steps during RL, and a judge that reads no simulator
quantity at RL time; the exit status is 1 otherwise. On jobs that hold the init states the recipe trained on
(the choose jobs, init states 0-19), the own gain is also printed on those and on the held-out ones apart
(`heldout_own_gain_points`), and PASS needs the held-out part to pass too: a recipe that learns its training
layouts gains there only. Each step's results are kept in --out-dir and reused by a re-run (RL resumes).
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

os.environ.setdefault("MUJOCO_GL", "egl")

from omegaconf import DictConfig, OmegaConf

from bench.ledger import scored_recipes
from bench.protocol import (
    PROTOCOLS,
    SMOKE_LOOP,
    SMOKE_RL,
    build,
    ledger_path,
    smoke_protocol,
    start_bc_config,
    suite_protocol,
)
from bench.recipe_inputs import Unbuilt, build_recipe, recipe_config
from bench.rl_gain_args import check_args, parser
from bench.rl_gain_report import headroom_line, report
from bench.task_gate import decision_lines, gate_config, gate_seed, gate_start, merge_tasks
from envs.libero_env import LiberoEnv
from envs.libero_suites import DRAWN_LAYOUT_BASE, is_drawn_layout
from imagination.eval.evaluate import evaluate_or_reuse
from imagination.loop.arms import (
    Budget,
    anchor_control,
    dataset_budget,
    real_data_control,
    recipe_budget,
)
from imagination.loop.config import LoopConfig
from imagination.loop.refine import refine_world_model, retrain_world_model
from imagination.loop.rounds import check_round_recipe, consumed_config, round_jobs, run_rounds
from imagination.rl.training import ImagineRLConfig, train_rl
from infra.cli import load_config, save_config
from infra.errors import run_main
from policies.base import Policy
from policies.phase_switch import PhaseSwitchPolicy
from robot_data.label_collection import check_kinds


def run_rl(cfg: ImagineRLConfig) -> dict:
    """train_rl(cfg), with cfg saved first as <out_dir>/config.yaml as scripts/imagine_rl.py saves it: the run then
    records its recipe and overrides (a judge's offsets, a seed), and `--rl-run` can evaluate it again."""
    save_config(cfg, Path(cfg.out_dir) / "config.yaml")
    return train_rl(cfg)


def run_counted(cfgs: list[ImagineRLConfig]) -> tuple[list[dict], int]:
    """run_rl on each config in turn, and the LiberoEnv steps simulated in this process meanwhile: the real env
    steps taken during RL, which PASS needs at 0."""
    before = LiberoEnv.process_steps
    results = [run_rl(cfg) for cfg in cfgs]
    return results, LiberoEnv.process_steps - before


def finished_rl_run(run: Path, bc: str, start_name: str = "--bc") -> dict:
    """result.json of a finished imagine_rl.py out_dir, checked to have started from the policy `bc` (named
    `start_name` in the error); its policy_path is the policy the run kept, in `run`."""
    for name in ("result.json", "policy.pt", "config.yaml"):
        if not (run / name).is_file():
            raise SystemExit(f"--rl-run: {run / name} not found (expected a finished scripts/imagine_rl.py out_dir)")
    run_cfg = cast(DictConfig, OmegaConf.load(run / "config.yaml"))  # an ImagineRLConfig saved as a mapping
    started = str(run_cfg.get("policy", ""))
    # the run may have been made on another machine, under another path: the file name must match
    if Path(started).name != Path(bc).name:
        raise SystemExit(f"--rl-run: that run started from {started!r}, not from {start_name} {bc!r}")
    rl = json.loads((run / "result.json").read_text())
    # the policy the run kept: its held-out check's best iterate (best_policy.pt) when it had one, else the last;
    # by file name, as the run may have been made under another path
    kept = run / Path(rl.get("policy_path", "policy.pt")).name
    if not kept.is_file():
        raise SystemExit(f"--rl-run: {kept} not found (the policy {run / 'result.json'} names as the run's)")
    return dict(rl, policy_path=str(kept))


def switched(start: str, policy: str, path: Path) -> str:
    """The path of a PhaseSwitchPolicy that runs `start` while the gripper is open and `policy` once it closes,
    written to `path` unless it is there already, newer than both."""
    if not path.is_file() or path.stat().st_mtime < max(Path(f).stat().st_mtime for f in (start, policy)):
        path.parent.mkdir(parents=True, exist_ok=True)
        PhaseSwitchPolicy.from_policies(Policy.load(start), Policy.load(policy)).save(path)
    return str(path)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    args = p.parse_args(argv)
    loop = load_config(LoopConfig, args.preset, list(SMOKE_LOOP) if args.smoke else [], group="loop")
    check_args(p, args)
    base_proto = suite_protocol(args.suite, args.root, smoke=args.smoke) if args.suite else PROTOCOLS[args.protocol]
    changes: dict[str, Any] = {"recipe": args.recipe or base_proto.recipe, "root": args.root or base_proto.root}
    for name in ("bc_augment_noise", "bc_steps", "bc_task_weights", "tasks", "near_miss_kinds", "own_drawn_layouts"):
        value = getattr(args, name)
        if value is not None:
            changes[name] = tuple(value) if isinstance(value, list) else value
    proto = replace(base_proto, **changes)
    if args.near_miss_kinds:
        try:  # a plan the label collection would refuse, refused before anything is built
            check_kinds(proto.suite, list(args.near_miss_kinds), name="--near-miss-kinds")
        except ValueError as e:
            p.error(str(e))
    rl_overrides = [*SMOKE_RL, *args.rl] if args.smoke else list(args.rl)
    if args.smoke:
        proto = smoke_protocol(proto, args.root)
        args.seeds, args.min_seeds = args.seeds[:1], 1
    tasks = list(proto.tasks)
    if args.eval_tasks:
        if not set(args.eval_tasks) <= set(tasks):
            p.error(f"--eval-tasks: expected some of the protocol's tasks {tasks}, got {args.eval_tasks}")
        tasks = [t for t in tasks if t in args.eval_tasks]
    per_task = args.episodes_per_task or proto.bench_episodes_per_task
    offset = proto.bench_offset if args.init_state_offset is None else args.init_state_offset
    out = Path(args.out_dir or proto.path("run"))
    run = Path(args.run) if args.run else None
    seeds = list(range(len(args.rl_run))) if args.rl_run else list(args.seeds)
    rl_cfgs: list[ImagineRLConfig] = []
    if not (run or args.bc or args.world_model or args.data):  # the protocol end to end
        if "recipe" in args.arms and not args.rl_run:
            try:  # an override the protocol would replace by its own input is refused before anything is built
                dry = recipe_config(proto, Unbuilt(), str(out), rl_overrides)
            except ValueError as e:
                p.error(str(e))
            if args.near_miss_kinds and not (dry.imagination.reward == "grasp" and dry.imagination.grasp_label_dirs):
                p.error(f"--near-miss-kinds: the recipe {proto.recipe!r} reads no near-miss grasp (reward "
                        f"{dry.imagination.reward!r}, grasp_label_dirs {dry.imagination.grasp_label_dirs})")
            if args.own_drawn_layouts and not (dry.imagination.reward == "grasp" and dry.sources == ["policy"]):
                p.error(f"--own-drawn-layouts: the recipe {proto.recipe!r} does not start from the start's own "
                        f"rollouts with reward grasp (reward {dry.imagination.reward!r}, sources {dry.sources})")
            if args.loop_rounds:
                try:
                    check_round_recipe(dry)
                except ValueError as e:
                    p.error(str(e))
            if args.recipe_goal_reader and dry.imagination.reward != "goal":
                p.error(f"--recipe-goal-reader: the recipe {proto.recipe!r} pays reward {dry.imagination.reward!r}; "
                        "a goal reader is read by reward goal only")
        built = build(proto, loop)
        bc, wm, data = built["bc"], built["world_model"], built["data"]
        if not args.rl_run and "recipe" in args.arms:
            built.update(build_recipe(proto, built, loop, rl_overrides))
            if args.refine_world_model:  # the recipe (and its anchor control's adaptation) imagine in the refined one
                built["world_model"] = refine_world_model(
                    loop, built["world_model"], built["data"], built["own_rollouts"],
                    proto.path(f"world_model_refined{args.refine_world_model}"), args.refine_world_model, proto.views)
            elif args.world_model_preset:  # the same, in a world model of another preset trained afresh
                built["world_model"] = retrain_world_model(
                    args.world_model_preset, built["world_model"], built["data"], built["own_rollouts"],
                    proto.path(f"world_model_{Path(args.world_model_preset).stem}"))
            elif args.recipe_world_model:  # the same, in a model the user trained elsewhere
                built["world_model"] = args.recipe_world_model
            if args.recipe_goal_reader:  # the recipe's judge reads with it; the protocol's inputs stay its own
                built["goal_reader"] = args.recipe_goal_reader
            rl_cfgs = [recipe_config(proto, built, str(out / seed_dir("rl", s)), [*rl_overrides, f"seed={s}"])
                       for s in seeds]
    else:
        bc = args.bc or (str(run / "bc" / "policy.pt") if run else "")
        wm = args.world_model or (str(run / "world_model" / "world_model.pt") if run else "")
        data = args.data or (str(run / "data") if run else "")
    needed = (("--bc", bc),) if args.rl_run else (("--bc", bc), ("--world-model", wm), ("--data", data))
    for name, path in needed:
        if not path or not Path(path).exists():
            p.error(f"{name}: {path or '(not given)'} does not exist; give it, --run with a finished `make demo` run, "
                    "or no path at all to build the protocol's own")
    evalcfg = replace(loop.eval, env=proto.suite, tasks=tasks, episodes_per_task=per_task, num_envs=args.num_envs,
                      init_state_offset=offset, seed=proto.seed, fast_render=True, videos=0 if args.smoke else 2,
                      image_size=args.image_size)
    print(f"protocol {args.protocol}: {proto.describe()}; recipes scored on these jobs so far: "
          f"{len(scored_recipes(ledger_path(proto.root)))}")
    if offset != proto.bench_offset:  # e.g. a recipe choice on the choose jobs: say so before anything runs
        where = (f"drawn layouts {offset - DRAWN_LAYOUT_BASE}-{offset - DRAWN_LAYOUT_BASE + per_task - 1}"
                 if is_drawn_layout(offset) else f"init states {offset}-{offset + per_task - 1}")
        print(f"evaluating on {where} of tasks {tasks}, not the benchmark's jobs: nothing is recorded as scored")

    def score(policy: str, folder: str, label: str) -> dict:
        if args.acts == "holding" and policy != bc:  # every arm but the start: the start while the gripper is open
            policy = switched(bc, policy, out / f"{folder}_holding.pt")
            folder, label = f"{folder}_holding", f"{label}, acting once the gripper closes"
        return evaluate_or_reuse(replace(evalcfg, checkpoint=policy, out_dir=str(out / folder)), label)

    gated: dict[str, dict] = {}  # every arm the gate decided, by name: the controls are gated as the recipe is
    choose = gate_config(evalcfg, proto.bench_offset)
    kept: dict = {}  # the start's choose-job evaluation, made by the first gate

    def gate_arm(policy: str, name: str) -> dict:
        if not kept:
            kept.update(gate_start(bc, choose, out))
        gated[name] = gate_seed(bc, kept, policy, name, choose, out, args.gate_margin)
        return gated[name]

    def score_gated(gate: dict, name: str) -> dict:
        """The routed policy on its routed tasks; the start's own episodes on the others (bench/task_gate.py)."""
        routed = gate["routed_tasks"]
        print(f"{name}, gated: acts on tasks {routed or 'none'}; the start's own episodes elsewhere")
        if not routed:
            return merge_tasks(arms["start"], None, [])
        res = evaluate_or_reuse(replace(evalcfg, tasks=routed, checkpoint=gate["policy_path"],
                                        out_dir=str(out / f"eval_routed_{name}")), f"{name}, gated")
        return merge_tasks(arms["start"], res, routed)

    arms: dict[str, dict] = {"start": score(bc, "eval_bc", "start (BC)")}
    print(headroom_line(arms["start"]))
    rls: list[dict] = []
    gates: list[dict] = []
    real_steps = 0
    consumed_by: ImagineRLConfig | None = None  # the recipe from the start: what it consumes, arm b imitates
    first_cfg: ImagineRLConfig | None = None  # the first round's seed 0 (with --loop-rounds, rl_cfgs ends the last's)
    first_rl: dict = {}
    scored_paths: list[str] = []  # each seed's policy the recipe arm scores: its RL's, or the one its loop kept
    loop_kept: list[str] = []  # with --loop-rounds: the name of each seed's kept policy (start, rl, loop1, ...)
    consumed_loop: ImagineRLConfig | None = None  # with --loop-rounds: the recipe with every recording it made

    def control_arm(consumed: ImagineRLConfig | None = None, folder: str = "control") -> dict:
        """Arm b: the start fine-tuned on the successes `consumed` read (default: the recipe from the start)."""
        consumed = consumed or consumed_by
        assert consumed is not None
        start_bc = replace(start_bc_config(proto, loop), data_dir=data)
        return real_data_control(consumed, start_bc, str(out / folder))

    if "recipe" in args.arms:
        if args.rl_run:
            rl_cfgs = [load_config(ImagineRLConfig, str(Path(r) / "config.yaml"), group="rl") for r in args.rl_run]
        elif not rl_cfgs:
            rl_cfgs = [replace(load_config(ImagineRLConfig, proto.recipe, [*rl_overrides, f"seed={s}"], group="rl"),
                               policy=bc, world_model=wm, start_data=data, out_dir=str(out / seed_dir("rl", s)))
                       for s in seeds]
        consumed_by = replace(rl_cfgs[0], policy=bc)
        rl_start = control_arm()["policy_path"] if args.rl_from == "control" else bc
        rl_cfgs = [replace(c, policy=rl_start) for c in rl_cfgs]
        if args.rl_run:
            named = "the real-data control (--rl-from control)" if args.rl_from == "control" else "--bc"
            rls = [finished_rl_run(Path(r), rl_start, named) for r in args.rl_run]
            real_steps = sum(r["real_env_steps"] for r in rls)  # counted by LiberoEnv in the process that ran RL
        else:
            rls, real_steps = run_counted([shared_adaptation(c, out / "adapt") for c in rl_cfgs])
        first_cfg, first_rl = rl_cfgs[0], rls[0]  # the anchor control mirrors the first round's updates
        if args.loop_rounds:
            jobs = round_jobs(evalcfg, list(rl_cfgs[0].tasks or proto.tasks), proto.train_init_states)
            rounds = run_rounds(rl_cfgs, rls, args.loop_rounds, out, data, jobs, proto.own_rollout_seed, rl_start,
                                args.loop_adopt_margin, run_counted, lambda name, k: seed_dir(name, seeds[k]))
            rl_cfgs, rls, real_steps = rounds.cfgs, rounds.rls, real_steps + rounds.real_steps
            scored_paths, loop_kept = rounds.scored, rounds.kept
            consumed_loop = consumed_config(rl_cfgs[0], rounds.recorded)
            for k, decisions in enumerate(rounds.decisions):
                for d in decisions:
                    print(f"[loop] seed {seeds[k]}, {d['candidate']} against {d['kept_before']}: "
                          f"{'adopted' if d['adopted'] else 'not adopted'}: {d['reason']}")
        else:
            scored_paths = [x["policy_path"] for x in rls]
        if args.gate == "task":
            gates = [gate_arm(r["policy_path"], _run_name(args.rl_run, seeds, k)) for k, r in enumerate(rls)]
            arms["recipe"] = score_gated(gates[0], _run_name(args.rl_run, seeds, 0))
        else:
            arms["recipe"] = score(scored_paths[0], seed_dir("eval_rl", seeds[0]), f"recipe seed {seeds[0]}")
    recipe_cfg = rl_cfgs[0] if rl_cfgs else None  # the last round's: what the recipe consumed in all
    budgets = {"start": _known(dataset_budget, data, True, proto.bc_demos_per_task)}
    if "control" in args.arms:
        if consumed_by is None:
            p.error("--arms control: the real-data control trains on what the recipe consumed; run the recipe arm too")
        control = control_arm()
        arms["control"] = (score(control["policy_path"], "eval_control", "real-data control") if not gates else
                           score_gated(gate_arm(control["policy_path"], "control"), "control"))
        budgets["control"] = Budget(control["episodes"], control["env_steps"])
        if consumed_loop is not None:  # b again, on everything the rounds recorded too
            name = f"control_loop{args.loop_rounds}"
            after = control_arm(replace(consumed_loop, policy=bc), name)
            arms[name] = score(after["policy_path"], f"eval_{name}", "real-data control after the loop rounds")
            budgets[name] = Budget(after["episodes"], after["env_steps"])
    if "anchor" in args.arms and first_cfg is not None and first_cfg.bc_coef > 0:
        anchor = anchor_control(first_cfg, first_rl, str(out / "anchor"))
        if anchor.get("max_param_change") == 0.0 and not gates and "start" in arms:
            # the same weights play the same real episodes (evaluation is deterministic per job): replaying them
            # would cost a whole arm's evaluation to print the start's figures again
            print(f"anchor control: its {anchor['updates']} anchor updates left every weight of the start as it "
                  "was: its real episodes are the start's")
            arms["anchor"] = arms["start"]
        else:
            arms["anchor"] = (score(anchor["policy_path"], "eval_anchor", "anchor control") if not gates else
                              score_gated(gate_arm(anchor["policy_path"], "anchor"), "anchor"))
    for k in range(1, len(rls)):  # the other seeds after the controls: a first look needs one seed
        arms[f"recipe{k}"] = (score_gated(gates[k], _run_name(args.rl_run, seeds, k)) if gates else
                              score(scored_paths[k], seed_dir("eval_rl", seeds[k]), f"recipe seed {seeds[k]}"))
    if recipe_cfg is not None:
        budgets["recipe"] = _known(recipe_budget, consumed_loop or recipe_cfg)
        if "anchor" in arms:  # the recipe without its RL: the same world model, adaptation and anchor data
            budgets["anchor"] = _known(recipe_budget, first_cfg)  # the first round's: what it mirrors
    for name, g in gated.items():
        print("\n".join(decision_lines(name, g["decisions"])))
        budgets[f"gate of {name} (choose jobs)"] = Budget(len(g["candidate_episodes"]),
                                                          sum(r["steps"] for r in g["candidate_episodes"]))
    if kept:  # the start's own choose-job episodes, which every gate compares with
        budgets["gate of the start (choose jobs)"] = Budget(len(kept["episodes"]),
                                                            sum(r["steps"] for r in kept["episodes"]))
    return report(args, proto, arms, budgets, rls, first_cfg, real_steps, loop_kept)


def _run_name(rl_runs: list[str], seeds: list[int], k: int) -> str:
    """The k-th seed's name in gate folders: its --rl-run folder's name, or seed_dir("rl", seed) for runs made here."""
    return Path(rl_runs[k]).name if rl_runs else seed_dir("rl", seeds[k])


def _known(count: Callable[..., Budget], *inputs: Any) -> Budget | None:
    """A budget counted from its inputs, or None when they are not on this machine (a run made elsewhere)."""
    try:
        return count(*inputs)
    except FileNotFoundError:
        return None


def shared_adaptation(cfg: ImagineRLConfig, folder: Path) -> ImagineRLConfig:
    """cfg with its adaptation (when it adapts and names no folder of its own) made in `folder`: the recipe's seeds
    then share one adaptation (its seed is its own, not the RL run's) instead of each making the same one again."""
    if cfg.adapt.steps <= 0 or cfg.adapt.out_dir:
        return cfg
    return replace(cfg, adapt=replace(cfg.adapt, out_dir=str(folder)))


def seed_dir(name: str, seed: int) -> str:
    """The folder of one seed's run or evaluation, named by the seed's value so that a later `--seeds 2` finds
    (and resumes) the folder a `--seeds 0 1 2` run made: seed 0 keeps the single-seed name (rl, eval_rl)."""
    return name if seed == 0 else f"{name}{seed}"


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
