r"""Train the object reader: where the goal's object and its target start, read from the first camera image
(world_models/object_reader.py), so that the grasp judge reads no simulator quantity at RL time.

    python scripts/render_layouts.py "tasks=[5,6,7,8,9]" per_task=200 out=outputs/layouts/s5-9.npz
    python scripts/render_layouts.py "tasks=[5,6,7,8,9]" "init_state_ids=[10,11,12,13,14,15,16,17,18,19]" \
        out=outputs/layouts/s5-9_i10-19.npz
    python scripts/train_object_reader.py "layouts=[outputs/layouts/s5-9.npz]" \
        "val_layouts=[outputs/layouts/s5-9_i10-19.npz]" out_dir=outputs/object_reader

Writes <out_dir>/reader.pt (`imagination.object_reader=` of imagined RL) and result.json: its median and
90th-percentile errors (cm) on the training images and on the held-out layouts. The fit's state is saved to
<out_dir>/checkpoint.pt every `checkpoint_every` steps: re-running the same command continues from it.
"""
from __future__ import annotations

import json

from infra.cli import run_script
from world_models.object_reader import TrainObjectReaderConfig, train_object_reader


def main(cfg: TrainObjectReaderConfig) -> dict:
    result = train_object_reader(cfg)
    for part in ("train", "val"):
        if part in result:
            e = result[part]
            print(f"object reader, {part}: object {e['object_cm_median']:.2f} cm median "
                  f"({e['object_cm_p90']:.2f} p90), "
                  f"target {e['target_cm_median']:.2f} cm ({e['target_cm_p90']:.2f}) over {int(e['n'])} images")
    print(f"reader: {cfg.out_dir}/reader.pt  ({result['images']} images, {result['train_seconds']:.0f} s)")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    run_script(main, TrainObjectReaderConfig, __doc__, group="object_reader")
