r"""Render scene layouts of LIBERO tasks with their objects' positions (robot_data/layouts.py): what an image-only
object reader (scripts/train_object_reader.py) trains on.

    python scripts/render_layouts.py suite=libero_spatial "tasks=[5,6,7,8,9]" per_task=200 out=outputs/layouts/s5-9.npz
    # a held-out check on official init states (never train on the ones a benchmark scores)
    python scripts/render_layouts.py "tasks=[5,6,7,8,9]" "init_state_ids=[10,11,12,13,14,15,16,17,18,19]" \
        out=outputs/layouts/s5-9_i10-19.npz

Each layout is a fresh draw of the task's object placement (LIBERO's own reset), settled, rendered at the
datasets' size and views; ~1 s per layout on one core.
"""
from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # before the simulator is imported: headless rendering

from infra.cli import run_script  # noqa: E402
from robot_data.layouts import LayoutConfig, render_layouts  # noqa: E402


def main(cfg: LayoutConfig) -> dict:
    out = render_layouts(cfg)
    n, spread = len(out["task_id"]), out["object_pos"].std(0) * 100
    print(f"layouts: {n} of {cfg.suite} tasks {cfg.tasks} -> {cfg.out} (object start spread x/y/z "
          f"{spread[0]:.1f}/{spread[1]:.1f}/{spread[2]:.1f} cm)")
    return out


if __name__ == "__main__":
    run_script(main, LayoutConfig, __doc__, group="layouts")
