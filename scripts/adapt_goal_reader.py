"""Adapt a goal reader to the world model's frames before imagined RL judges by it (imagination/reader_adapt.py).

    R=outputs/bench/rl_gain_v2
    python scripts/adapt_goal_reader.py reader=$R/goal_reader/reader.pt world_model=$R/world_model/world_model.pt \
        proprio=$R/own_rollouts/proprio.pt "data_dirs=[$R/data,$R/own_rollouts/data]" out_dir=$R/goal_reader_imagined

Each goal-labelled episode of data_dirs (scripts/label_goals.py) is imagined open loop under its recorded actions from
`leads` steps before its recorded release (an episode that never lets go: `end_leads` steps before its end); every
imagined frame is paired with the labels the recording had at the same step, and the reader is fine-tuned on those
pairs beside the real frames. Writes out_dir/reader.pt and out_dir/adapt.json (how it reads the imagined and the
real frames before and after). Then `bench/goal_judge.py --reader out_dir/reader.pt --compare-reader READER` says
whether it reads real outcomes through imagination better on episodes it never saw, and
`scripts/imagine_rl.py imagination.goal_reader=out_dir/reader.pt` judges RL with it.
"""
from __future__ import annotations

from imagination.reader_adapt import ReaderAdaptConfig, adapt_goal_reader
from infra.cli import run_script


def main(cfg: ReaderAdaptConfig) -> dict:
    return adapt_goal_reader(cfg)


if __name__ == "__main__":
    run_script(main, ReaderAdaptConfig, __doc__, group="reader_adapt")
