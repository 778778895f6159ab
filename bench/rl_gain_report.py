"""What bench/rl_gain.py prints once every arm is scored: each arm's real success per task, each arm against the
start with its paired interval, the real-data budgets, imagination's own gain and the BENCH line; and what makes a
recipe the same recipe in the ledger of scored recipes (bench/ledger.py)."""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path

from bench.ledger import record_scored, scored_recipes
from bench.protocol import RLGainProtocol, ledger_path
from envs.libero_suites import DRAWN_LAYOUT_BASE, is_drawn_layout
from imagination.eval.stats import PairedDifference, SeedAverage, paired_difference, seed_average
from imagination.loop.arms import Budget, own_gain
from imagination.rewards.base import reads_simulator
from imagination.rl.training import ImagineRLConfig

HEADROOM = (0.15, 0.65)  # per-task BC success that leaves RL something to gain and something to learn from


def headroom_line(before: dict) -> str:
    """Whether the BC start leaves room on every task (HEADROOM), with the tasks outside it."""
    out = {t: r["success_rate"] for t, r in before["per_task"].items()
           if not HEADROOM[0] <= r["success_rate"] <= HEADROOM[1]}
    lo, hi = (round(100 * x) for x in HEADROOM)
    if not out:
        return f"BC headroom: every task within {lo}-{hi}% real success"
    return (f"BC headroom: tasks outside {lo}-{hi}%: " + ", ".join(f"task {t} {100 * v:.0f}%" for t, v in out.items())
            + " (a task at its ceiling gives GRPO all-success groups; at the floor, no success to reinforce)")


def _halves(history: list[dict], key: str) -> str:
    """'a -> b': mean of `key` over the first and the second half of the RL iterations that drew it."""
    vals = [row[key] for row in history if key in row]
    if len(vals) < 2:
        return "n/a"
    h = len(vals) // 2
    return f"{sum(vals[:h]) / h:.2f} -> {sum(vals[h:]) / (len(vals) - h):.2f}"


def per_task_lines(before: dict, after: dict, history: list[dict]) -> list[str]:
    """Real success per task before -> after (two evaluate() results), imagined success per task during
    RL, and how the real failures happened (envs.outcome; results written before it have no such line)."""
    lines = []
    for t in sorted(before["per_task"], key=int):
        pb, pa = before["per_task"][t], after["per_task"][t]
        lines.append(f"task {t}: BC {pb['successes']}/{pb['episodes']}  ->  RL {pa['successes']}/{pa['episodes']}   "
                     f"imagined during RL {_halves(history, f'imagined_success_task{t}')}   {pb['instruction']}")
    for label, r in (("BC", before), ("RL", after)):
        if "failures" in r["overall"]:
            lines.append(f"{label} failures: " + (", ".join(f"{k} {n}" for k, n in r["overall"]["failures"].items())
                                                  or "none"))
    return lines


def arm_lines(arms: dict[str, dict]) -> list[str]:
    """Real success per task of each arm (evaluate() results on the same jobs), one line per task."""
    first = next(iter(arms.values()))
    lines = []
    for t in sorted(first["per_task"], key=int):
        cells = "  ".join(f"{name} {r['per_task'][t]['successes']}/{r['per_task'][t]['episodes']}"
                          for name, r in arms.items())
        lines.append(f"task {t}: {cells}   {first['per_task'][t]['instruction']}")
    return lines


def kept_line(heldout: dict | None) -> str:
    """Which iteration the held-out check kept (result.json "heldout"), said plainly when it kept none of RL's: the
    recipe's policy is then its start (adapted, when the recipe adapts it), and any gain is not RL's."""
    if not heldout or "best_iteration" not in heldout:
        return ""
    best = int(heldout["best_iteration"])
    if best == 0:
        return "; the held-out check kept iteration 0: this seed's policy is the recipe's start, no RL update"
    return f"; the held-out check kept iteration {best}"


def split_by_training_layouts(controls: dict[str, list[dict]], seeds: list[list[dict]],
                              train_init_states: int, drawn: int = 0) -> dict[str, tuple[str, SeedAverage]]:
    """Imagination's own gain on the jobs whose init state the recipe trained on (its data, world model, judge and
    imagined starts come from init states 0..train_init_states-1, and drawn layouts 0..drawn-1 when its own rollouts
    hold some) and on the others, apart: {"trained": ..., "held out": ...}, each (best control there, the paired
    comparison); empty unless the jobs hold both kinds.
    Why: the choose jobs (init states 0-19) hold the training layouts; a recipe that learns those layouts gains
    there and not on the benchmark's held-out ones, so a choice is read on the held-out part."""
    every = [r for records in (*controls.values(), *seeds) for r in records]
    if not every or any("init_state_id" not in r for r in every):  # results written before the field existed
        return {}

    def part(records: list[dict], trained: bool) -> list[dict]:
        return [r for r in records if _trained_on(int(r["init_state_id"]), train_init_states, drawn) == trained]

    parts: dict[str, tuple[str, SeedAverage]] = {}
    for name, trained in (("trained", True), ("held out", False)):
        if not all(part(s, trained) for s in seeds):
            return {}
        parts[name] = own_gain({k: part(v, trained) for k, v in controls.items()}, [part(s, trained) for s in seeds])
    return parts


def _trained_on(init_state_id: int, train_init_states: int, drawn: int) -> bool:
    if is_drawn_layout(init_state_id):
        return init_state_id - DRAWN_LAYOUT_BASE < drawn
    return init_state_id < train_init_states


def split_lines(parts: dict[str, tuple[str, SeedAverage]], train_init_states: int, drawn: int = 0) -> list[str]:
    """One line per part of split_by_training_layouts."""
    lines = []
    also = f" and drawn layouts 0-{drawn - 1}" if drawn else ""
    for name, (best, avg) in parts.items():
        d = avg.difference
        lo, hi = d.ci95_points
        where = (f"init states 0-{train_init_states - 1}{also}, which the recipe trained on" if name == "trained"
                 else "held-out layouts")
        lines.append(f"own gain on {where}: {d.gain_points:+.1f} points [{lo:+.1f}, {hi:+.1f}] against {best} "
                     f"({d.n} jobs)")
    return lines


def report(args: argparse.Namespace, proto: RLGainProtocol, arms: dict[str, dict], budgets: dict[str, Budget | None],
           rls: list[dict], recipe_cfg: ImagineRLConfig | None, real_steps: int, loop_kept: list[str]) -> int:
    """Print every arm's figures, the own gain and the BENCH line; record the recipe in the protocol's ledger when
    its own benchmark jobs were scored. loop_kept: with --loop-rounds, the policy each seed kept (its name). Returns
    the exit status (0 PASS, 1 FAIL)."""
    start = arms["start"]
    seeds = [r for name, r in arms.items() if name.startswith("recipe")]
    print("\n".join(arm_lines(arms)))
    for name, r in arms.items():
        if name != "start":
            d = paired_difference(start["episodes"], r["episodes"])
            lo, hi = d.ci95_points
            print(f"{name} - start: {d.gain_points:+.1f} points [{lo:+.1f}, {hi:+.1f}] ({d.improved} jobs gained, "
                  f"{d.worsened} lost of {d.n})")
    for name, b in budgets.items():
        print(f"real data of {name}: {b or 'its inputs are not on this machine'}"
              + (f"; real env steps during RL: {real_steps}" if name == "recipe" else ""))
    for rl in rls:
        print(f"imagined success during RL: {rl['first'].get('imagined_success_rate', 0):.2f} -> "
              f"{rl['last'].get('imagined_success_rate', 0):.2f} over {rl['iterations']} iterations "
              f"({rl['seconds']:.0f} s)" + kept_line(rl.get("heldout")))
    if len(seeds) == 1:
        print("\n".join(per_task_lines(start, seeds[0], rls[0]["history"] if rls else [])))
    minutes = (sum(r["timing"]["seconds"] for r in arms.values()) + sum(r["seconds"] for r in rls)) / 60
    controls = {name: r["episodes"] for name, r in arms.items() if not name.startswith("recipe")}
    if not seeds:
        print(f"no recipe arm: real success {', '.join(f'{k} {_rate(r):.3f}' for k, r in arms.items())}")
        return 1
    gain = seed_average(start["episodes"], [r["episodes"] for r in seeds]).difference
    best, own = own_gain(controls, [r["episodes"] for r in seeds])
    d = own.difference
    lo, hi = d.ci95_points
    sim = reads_simulator(recipe_cfg.imagination) if recipe_cfg is not None else True
    scored = len(scored_recipes(ledger_path(proto.root)))
    if args.init_state_offset in (None, proto.bench_offset) and not args.bc and recipe_cfg is not None:
        # the protocol's own benchmark jobs: the recipe is its config, whatever its seed, folder and device
        # a gated recipe is another recipe: the gate decides which policy acts on each task
        gate = {"gate": f"task, margin {args.gate_margin:g}"} if args.gate == "task" else {}
        if args.acts == "holding":  # so is a recipe whose policies act only once the gripper closes
            gate["acts"] = "holding"
        if args.loop_rounds:  # and one fed back its own real rollouts (and one that decides its rounds, another)
            gate["loop_rounds"] = args.loop_rounds
            if args.loop_adopt_margin < 1:
                gate["loop_adopt_margin"] = args.loop_adopt_margin
        if args.rl_from == "control":  # and one whose RL starts from arm b (wherever b's folder is)
            gate["rl_from"] = "control"
            recipe_cfg = replace(recipe_cfg, policy=proto.path("bc_file"))
        scored = record_scored(ledger_path(proto.root), {"protocol": args.protocol,
                                                         "recipe": recipe_identity(recipe_cfg), **gate},
                               canonical=canonical_entry)
    print(f"imagination's own gain: recipe ({len(seeds)} seeds, job-averaged) - {best} (the best control) = "
          f"{d.gain_points:+.1f} points [{lo:+.1f}, {hi:+.1f}] ({d.improved} jobs gained, {d.worsened} lost); "
          f"recipes scored on these jobs: {scored}")
    drawn = drawn_layouts(recipe_cfg)
    parts = split_by_training_layouts(controls, [r["episodes"] for r in seeds], proto.train_init_states, drawn)
    print("\n".join(split_lines(parts, proto.train_init_states, drawn)))
    held = parts["held out"][1].difference if parts else None
    split_fields = (f"heldout_own_gain_points={held.gain_points:+.1f} "
                    f"heldout_own_gain_ci95=[{held.ci95_points[0]:+.1f},{held.ci95_points[1]:+.1f}] " if held else "")
    # on jobs that hold the training layouts, the held-out part must show the gain too (split_by_training_layouts)
    ok = (_shows(d, args.threshold) and (held is None or _shows(held, args.threshold))
          and len(seeds) >= args.min_seeds and real_steps == 0 and not sim)
    g_lo, g_hi = gain.ci95_points
    tasks = " ".join(f"task{t}={r['successes']}/{r['episodes']}->"
                     f"{'/'.join(str(s['per_task'][t]['successes']) for s in seeds)}"
                     for t, r in sorted(start["per_task"].items(), key=lambda kv: int(kv[0])))
    loop_fields = (f"loop_adopt_margin={args.loop_adopt_margin:g} loop_kept={'-'.join(loop_kept)} "
                   if args.loop_rounds else "")
    arms_rates = " ".join(f"{name}={_rate(r):.3f}" for name, r in arms.items() if not name.startswith("recipe"))
    print(f"BENCH rl_gain episodes={gain.n} before={gain.before:.3f} after={gain.after:.3f} "
          f"gain_points={gain.gain_points:+.1f} gain_ci95=[{g_lo:+.1f},{g_hi:+.1f}] {tasks} protocol={args.protocol} "
          f"seeds={len(seeds)} "
          f"{arms_rates} best_control={best} own_gain_points={d.gain_points:+.1f} own_gain_ci95=[{lo:+.1f},{hi:+.1f}] "
          f"{split_fields}judge_reads_simulator={'yes' if sim else 'no'} real_env_steps_during_rl={real_steps} "
          f"gate={args.gate} "
          f"acts={args.acts} rl_from={args.rl_from} refine_world_model={args.refine_world_model} "
          f"loop_rounds={args.loop_rounds} {loop_fields}"
          f"world_model_preset={args.world_model_preset or 'none'} "
          f"recipe_world_model={args.recipe_world_model or 'none'} "
          f"recipe_goal_reader={args.recipe_goal_reader or 'none'} "
          f"near_miss_kinds={'-'.join(args.near_miss_kinds) if args.near_miss_kinds else 'default'} "
          f"own_drawn_layouts={drawn} "
          f"minutes={minutes:.0f} recipes_scored={scored} "
          f"threshold_points={args.threshold:+.0f} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def drawn_layouts(recipe_cfg: ImagineRLConfig | None) -> int:
    """Drawn layouts per task the recipe's start data holds the start's own rollouts on (imagination/loop/
    grasp_inputs.py own_rollouts records the count beside the dataset); 0 without a recipe or a record."""
    record = Path(recipe_cfg.start_data).parent / "result.json" if recipe_cfg is not None else None
    if record is None or not record.is_file():
        return 0
    return int(json.loads(record.read_text()).get("drawn_layouts", 0))


def _shows(d: PairedDifference, threshold: float) -> bool:
    """A gain of at least `threshold` points with its interval's lower end above 0 (the own gain's PASS rule)."""
    return d.gain_points >= threshold and d.ci95_points[0] > 0


def recipe_identity(cfg: ImagineRLConfig) -> dict:
    """What makes a recipe: its config without the seed, the folders it wrote to and the device it ran on (a recipe
    run again with more seeds, or on a GPU, is the same recipe scored again, not another)."""
    ident = json.loads(json.dumps(asdict(cfg)))  # plain JSON types: the ledger compares entries as JSON
    for key in ("seed", "out_dir", "device", "num_threads", "policy_modules"):
        ident.pop(key, None)
    ident["imagination"].pop("device", None)
    for key in ("out_dir", "num_threads"):  # where the adaptation was written and the threads it ran with
        ident["adapt"].pop(key, None)
    return ident


def canonical_entry(entry: dict) -> dict:
    """A ledger entry with its recipe read back through today's ImagineRLConfig: fields added since it was written
    take their defaults (an entry the config can no longer read stays as it is, a recipe of its own)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ImagineRLConfig), entry["recipe"]))
    except (OmegaConfBaseException, TypeError, ValueError):
        return entry
    assert isinstance(cfg, ImagineRLConfig)
    return {**entry, "recipe": recipe_identity(cfg)}


def _rate(result: dict) -> float:
    return sum(bool(r["success"]) for r in result["episodes"]) / len(result["episodes"])
