"""The grasp judge without simulator inputs: does an object reader that reads the first camera image stand in
for the simulator's object positions?

    python bench/object_reader.py                   # protocol v2's tasks: render, train, measure (resumes)
    python bench/object_reader.py --protocol v1 --per-task 100
    python bench/object_reader.py --extra-layouts more.npz     # also trained on more layouts
    python bench/object_reader.py --reader gpu/reader          # a reader trained elsewhere (on a GPU)
    python bench/object_reader.py --suite libero_goal --recipe goal_grasp --per-task 300   # protocol v2 on
                                                    # LIBERO-Goal, the tasks its grasp recipe imagines (the bottle)

On the protocol's tasks (bench/protocol.py; with --recipe, the tasks that recipe imagines), under
<root>/object_reader/:
1. render `--per-task` fresh layouts per task (robot_data/layouts.py; never an official init state) and the
   official init states 10-19 (the protocol's choice jobs, held out) with their objects' positions;
2. train the object reader on the fresh layouts only (world_models/object_reader.py);
3. its error on the held-out init states: median and 90th percentile, object and target (cm);
4. the judge: the recipe's grasp classifier (fit on the recipe's training data, as imagined RL fits it) scores
   every labelled recorded episode of the protocol's training data and the start's own rollouts (init states
   0-9: layouts the reader never saw) twice, with the simulator's start positions and with the read ones: the
   share of episodes whose verdict (P >= 0.5) is the same, the mean |P_read - P_sim|, and the within-task AUC of
   each against the real outcome.
PASS when the reader's median object error is at most --max-object-cm and the verdicts agree on at least
--min-agreement of the episodes. Exit 1 on FAIL, 2 when the protocol's inputs are missing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")  # before the simulator is imported: headless rendering

import numpy as np  # noqa: E402

from bench.protocol import PROTOCOLS, SUITE_ROOTS, suite_protocol  # noqa: E402
from imagination.rl.training import ImagineRLConfig  # noqa: E402
from infra.cli import load_config  # noqa: E402
from infra.errors import run_main  # noqa: E402


def judged_episodes(roots: list[str], view: str, tasks: Sequence[int] = ()) -> dict[str, list]:
    """Per labelled recorded episode of the datasets (of `tasks`; () = all): first frame of `view`, task, outcome,
    robot states and actions, and the simulator's start positions."""
    from robot_data.dataset import EpisodeDataset
    from robot_data.sim_labels import read_sim_labels

    out: dict[str, list] = {k: [] for k in ("image", "task", "success", "state", "action", "object", "target")}
    for root in roots:
        ds = EpisodeDataset(root, verify=False)
        for m in ds.meta:
            if tasks and m.task_id not in tasks:
                continue
            sim = read_sim_labels(root, m.episode_index)
            if sim is None:
                continue
            ep = ds[m.episode_index]
            for key, value in zip(out, (ep.frames[view][0], m.task_id, m.success, ep.state, ep.action,
                                        sim["object_pos"][0], sim["target_pos"][0])):
                out[key].append(value)
    return out


def judge_agreement(reader, classifier, eps: dict[str, list]) -> dict[str, Any]:
    """The classifier's P(success) of each episode with simulator and with read start positions, compared."""
    from imagination.eval.reward_gate import within_task_auc_interval
    from world_models.grasp_point import grasp_features

    obj, target = reader.read(np.stack(eps["image"]), np.array(eps["task"]))
    task, success = np.array(eps["task"]), np.array(eps["success"], bool)
    p = {}
    for name, (o, t) in {"sim": (eps["object"], eps["target"]), "read": (obj, target)}.items():
        feats = np.stack([grasp_features(s, a, o[k], t[k])
                          for k, (s, a) in enumerate(zip(eps["state"], eps["action"]))])
        p[name] = classifier.predict(feats, task)
    auc = {k: within_task_auc_interval(v, success, task) for k, v in p.items()}
    return {"episodes": len(task), "verdict_agreement": float(((p["sim"] >= 0.5) == (p["read"] >= 0.5)).mean()),
            "mean_abs_prob_diff": float(np.abs(p["sim"] - p["read"]).mean()),
            "auc_sim": auc["sim"].point, "auc_sim_ci95": list(auc["sim"].ci95),
            "auc_read": auc["read"].point, "auc_read_ci95": list(auc["read"].ci95),
            "read_start_error_cm_median": float(np.median(np.linalg.norm(obj - np.stack(eps["object"]), axis=1)) * 100)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", choices=sorted(PROTOCOLS), default="v2")
    ap.add_argument("--suite", choices=sorted(SUITE_ROOTS), default="",
                    help="protocol v2 on this suite, in its recorded setting (bench/protocol.py suite_protocol)")
    ap.add_argument("--recipe", default="", help="a grasp recipe (configs/rl/) whose tasks the reader is trained "
                                                 "and measured on (default: every protocol task)")
    ap.add_argument("--per-task", type=int, default=200, help="fresh layouts rendered per task to train on")
    ap.add_argument("--steps", type=int, default=4000, help="the reader's training steps")
    ap.add_argument("--reader", default="", metavar="DIR",
                    help="a reader trained elsewhere (scripts/train_object_reader.py's out_dir, e.g. on a GPU with "
                         "reader.device=cuda, on the same held-out layouts): measure it instead of training")
    ap.add_argument("--extra-layouts", nargs="+", default=[], metavar="NPZ",
                    help="more layouts to train on (scripts/render_layouts.py; never the held-out init states)")
    ap.add_argument("--near-miss-kinds", nargs="+", default=None, metavar="KIND",
                    help="the judge check reads the near-miss grasps of this plan (bench/rl_gain.py's "
                         "--near-miss-kinds, its own folder), as the recipe run with it reads them")
    ap.add_argument("--max-object-cm", type=float, default=1.0, help="PASS: the reader's median object error")
    ap.add_argument("--min-agreement", type=float, default=0.9, help="PASS: share of equal judge verdicts")
    args = ap.parse_args(argv)

    from robot_data.layouts import LayoutConfig, render_layouts
    from world_models.grasp_point import fit_grasp_point
    from world_models.object_reader import (
        ObjectReader,
        ObjectReaderConfig,
        TrainObjectReaderConfig,
        train_object_reader,
    )

    if args.suite and args.protocol != "v2":
        ap.error(f"--suite: runs protocol v2 on a suite; --protocol {args.protocol} is LIBERO-Spatial's recorded one")
    p = suite_protocol(args.suite) if args.suite else PROTOCOLS[args.protocol]
    if args.near_miss_kinds:
        p = replace(p, near_miss_kinds=tuple(args.near_miss_kinds))
    tasks = list(p.tasks)
    if args.recipe:
        cfg = load_config(ImagineRLConfig, args.recipe, group="rl")
        if cfg.imagination.reward != "grasp":
            ap.error(f"--recipe: expected a recipe with reward grasp (the judge an object reader feeds), configs/rl/"
                     f"{args.recipe}.yaml has {cfg.imagination.reward!r}")
        tasks = list(cfg.tasks) or tasks
    named = "" if tasks == list(p.tasks) else "_t" + "-".join(map(str, tasks))  # a subset's files of its own
    data, own = p.path("data"), str(Path(p.path("own_rollouts")) / "data")
    near_miss = p.near_miss_path()
    gone = [x for x in (data, own, near_miss) if not Path(x).exists()]
    if gone:
        how = f"--suite {args.suite}" if args.suite else f"--protocol {args.protocol}"
        print(f"object_reader: missing {', '.join(gone)}; python bench/rl_gain.py {how}"
              + (f" --recipe {args.recipe}" if args.recipe else "")
              + (f" --near-miss-kinds {' '.join(args.near_miss_kinds)}" if args.near_miss_kinds else "")
              + " builds them", file=sys.stderr)
        return 2
    out = Path(p.root) / "object_reader"
    start = time.time()
    drawn, held = out / f"layouts_drawn_{args.per_task}{named}.npz", out / f"layouts_init10-19{named}.npz"
    from robot_data.dataset import EpisodeDataset

    size = EpisodeDataset(data, verify=False).config.image_size[0]  # render as the protocol recorded
    scene = LayoutConfig(suite=p.suite, tasks=tasks, views=list(p.views), image_size=int(size))
    if not held.is_file():
        ids = list(range(p.gate_offset, p.gate_offset + p.gate_init_states))
        render_layouts(replace(scene, out=str(held), init_state_ids=ids, seed=p.seed + 1))
    extra = "".join(f"+{Path(x).stem}" for x in args.extra_layouts)
    reader_dir = Path(args.reader) if args.reader else out / f"reader_{args.per_task}_{args.steps}{named}{extra}"
    if args.reader and not (reader_dir / "result.json").is_file():
        print(f"object_reader: --reader {args.reader} has no result.json (scripts/train_object_reader.py writes one)",
              file=sys.stderr)
        return 2
    if not (reader_dir / "result.json").is_file():  # the drawn layouts only train: a reader made already needs none
        if not drawn.is_file():
            render_layouts(replace(scene, out=str(drawn), per_task=args.per_task, seed=p.seed))
        train_object_reader(TrainObjectReaderConfig(out_dir=str(reader_dir), layouts=[str(drawn), *args.extra_layouts],
                                                    val_layouts=[str(held)],
                                                    reader=ObjectReaderConfig(view=p.views[0], steps=args.steps)))
    result = json.loads((reader_dir / "result.json").read_text())
    reader = ObjectReader.load(reader_dir / "reader.pt")
    classifier = fit_grasp_point([data, own], [near_miss])
    judge = judge_agreement(reader, classifier, judged_episodes([data, own], p.views[0], tasks))
    if "val" not in result:
        print(f"object_reader: {reader_dir}/result.json has no held-out errors: train it with val_layouts=[{held}]",
              file=sys.stderr)
        return 2
    val = result["val"]
    ok = val["object_cm_median"] <= args.max_object_cm and judge["verdict_agreement"] >= args.min_agreement
    (out / "bench.json").write_text(json.dumps({"reader": result, "judge": judge}, indent=2))
    print(f"held-out init states {p.gate_offset}-{p.gate_offset + p.gate_init_states - 1}: object "
          f"{val['object_cm_median']:.2f} cm median ({val['object_cm_p90']:.2f} p90), target "
          f"{val['target_cm_median']:.2f} cm ({val['target_cm_p90']:.2f}) over {int(val['n'])} layouts")
    print(f"judge on {judge['episodes']} recorded episodes: verdicts equal {judge['verdict_agreement']:.3f}, "
          f"mean |dP| {judge['mean_abs_prob_diff']:.3f}, within-task AUC sim {judge['auc_sim']:.3f} "
          f"[{judge['auc_sim_ci95'][0]:.2f}, {judge['auc_sim_ci95'][1]:.2f}] read {judge['auc_read']:.3f} "
          f"[{judge['auc_read_ci95'][0]:.2f}, {judge['auc_read_ci95'][1]:.2f}]")
    print(f"BENCH object_reader protocol={args.protocol} suite={p.suite} tasks={','.join(map(str, tasks))} "
          f"layouts={result['images']} "
          f"object_cm_median={val['object_cm_median']:.2f} object_cm_p90={val['object_cm_p90']:.2f} "
          f"target_cm_median={val['target_cm_median']:.2f} verdict_agreement={judge['verdict_agreement']:.3f} "
          f"auc_sim={judge['auc_sim']:.3f} auc_read={judge['auc_read']:.3f} "
          f"minutes={(time.time() - start) / 60:.0f} "
          f"threshold_cm={args.max_object_cm} threshold_agreement={args.min_agreement} {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_main(main))  # input errors as one line, exit 2 (infra/errors.py)
