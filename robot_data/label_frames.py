"""The successful episodes of a label collection (robot_data/label_collection.py) recorded again with cameras.

A label collection simulates scripted grasps without rendering, for a judge to train on; a quarter of its episodes
are the clean expert. The own-gain benchmark's real-data control (arm b) imitates every successful real episode the
recipe consumed, and a user without a world model would imitate these too, so they need frames. The expert acts on
simulator state, not pixels, and the seeded reset is reproducible: the same plan item (task, init state, kind, seed,
strength) recorded with cameras is the same trajectory, now with the images BC reads.

    from robot_data.label_frames import record_label_frames
    record_label_frames("outputs/.../near_miss_labels_s16", "outputs/.../near_miss_labels_s16_frames",
                        "libero_goal", like="outputs/.../data")
"""
from __future__ import annotations

from pathlib import Path

from robot_data.collection import record_plan
from robot_data.dataset import EpisodeDataset, is_dataset
from robot_data.label_collection import EXPERT, read_episode
from robot_data.recording import CollectConfig, PlanItem

FRAMES_SUFFIX = "_frames"  # <label folder>_frames: the folder's successful episodes with frames


def framed_copy(label_dir: str) -> str:
    """Where record_label_frames puts `label_dir`'s episodes with frames."""
    return str(Path(label_dir)) + FRAMES_SUFFIX


def success_plan(label_dir: str) -> tuple[float, list[PlanItem]]:
    """The folder's perturbation strength and the plan items of its successful episodes, in file order. Raises
    ValueError on a folder with no labelled episode or with several strengths."""
    files = sorted(Path(label_dir).glob("task*_ep*.npz"))
    if not files:
        raise ValueError(f"label_dir: {label_dir} holds no labelled episode (the task*_ep*.npz files of "
                         "scripts/collect_labels.py)")
    items, strengths = [], set()
    for path in files:
        _, info = read_episode(path)
        if info["kind"] != EXPERT:
            strengths.add(float(info["strength"]))
        if info["success"]:
            kind = "" if info["kind"] == EXPERT else str(info["kind"])
            items.append(PlanItem(int(info["task_id"]), int(info["index"]), int(info["init_state_id"]), kind,
                                  int(info["seed"])))
    if len(strengths) > 1:
        raise ValueError(f"label_dir: {label_dir} mixes perturbation strengths {sorted(strengths)}; record one "
                         "strength per folder")
    return (strengths.pop() if strengths else 1.0), items


def record_label_frames(label_dir: str, out_dir: str, suite: str, like: str, fast_render: bool = True,
                        num_workers: int = 2, post_success_steps: int = 8) -> str:
    """Record the successful episodes of `label_dir` (a label collection of `suite`) into the episode dataset
    `out_dir` with the cameras and image size of the dataset `like` (resuming: the episodes already there are
    skipped). Returns out_dir, or "" when no episode of the folder succeeded (nothing to imitate, no dataset made)."""
    strength, items = success_plan(label_dir)
    if not items:
        return ""
    layout = EpisodeDataset(like, verify=False).config  # its views and frame size (H, W)
    cfg = CollectConfig(out_dir=out_dir, suite=suite, views=list(layout.views), image_size=layout.image_size[0],
                        fast_render=fast_render, perturbation_strength=strength, num_workers=num_workers,
                        post_success_steps=post_success_steps)
    if is_dataset(out_dir):
        _check_same_plan(out_dir, suite, items)  # before recording more into a copy of another collection
    record_plan(cfg, items)
    return out_dir


def _check_same_plan(out_dir: str, suite: str, items: list[PlanItem]) -> None:
    """ValueError when the copy at out_dir holds an episode that is not one of `items` (the label folder's
    successes): a copy left from another collection into the same folder (another seed or plan) would have b
    imitate episodes the recipe never consumed. record_plan's own check cannot: these items carry no collection
    seed, so it compares init states only, and only where `items` plan an episode. This compares every episode's
    init state and seed, at every place."""
    planned = {(it.task_id, it.index, it.perturbation): (it.init_state_id, it.seed) for it in items}
    for m in EpisodeDataset(out_dir, verify=False).meta:
        if m.suite != suite:
            continue
        key = (m.task_id, int(m.extra.get("plan_index", -1)), m.perturbation)
        if planned.get(key) != (m.init_state_id, m.seed):
            raise ValueError(f"out_dir: {out_dir} holds task {m.task_id} episode {key[1]} (init state "
                             f"{m.init_state_id}, seed {m.seed}), which is not a success of the label folder now; "
                             "it was recorded from another collection: delete the copy to record it again")


__all__ = ["FRAMES_SUFFIX", "framed_copy", "record_label_frames", "success_plan"]
