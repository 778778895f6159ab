"""The whole pipeline and the co-evolution loop: collect -> world model -> BC -> imagined RL -> real
evaluation -> grow the dataset -> fine-tune the world model -> imagined RL again, then a report.

    python scripts/loop.py --config quick              # the demo: CPU, 3 LIBERO-Spatial tasks, 64 px
    python scripts/loop.py --config quick rounds=2 out_dir=outputs/loop/two_rounds
    python scripts/loop.py --config quick eval.episodes_per_task=20 rl.iterations=40

Everything lands in out_dir: data/ (the dataset, grown by the policy's real episodes), world_model/
(and round<r>/world_model/ fine-tunes, each with eval/), bc/, phase folders with rl/, eval_real/ and
eval_imagined/, loop.json (stages, timings, results) and report.md / report.html. Re-running the
same command reuses every finished stage and resumes the unfinished one. See imagination/loop/run.py.
"""
from __future__ import annotations

from imagination.loop.config import LoopConfig
from imagination.loop.run import run_loop
from infra.cli import run_script


def main(cfg: LoopConfig) -> dict:
    return run_loop(cfg)


if __name__ == "__main__":
    run_script(main, LoopConfig, __doc__, group="loop")
