"""README's step-by-step pipeline, run: its `--config quick` commands, in README's order, as a user types them, each
with a few overrides that make it tiny (one task, two episodes, a couple of training steps), in a fresh folder.
Every step reads what the steps before it wrote at the paths the presets name; a preset that reads a path no
earlier command writes fails here (tests/docs/test_pipeline_paths.py checks the same statically)."""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# what makes each step tiny; nothing here names a path, so the chain between steps is README's own
TINY: dict[str, list[str]] = {
    "collect": ["tasks=[0]", "episodes_per_task=2", "perturbed_fraction=0.0", "num_workers=1", "preview_videos=0"],
    "train_world_model": ["steps=2", "batch_size=2", "sample_every=0", "checkpoint_every=2", "warmup_steps=1",
                          "num_threads=1"],
    "train_bc": ["steps=2", "batch_size=4", "checkpoint_every=2", "log_every=1"],
    "imagine_rl": ["iterations=1", "num_groups=1", "group_size=2", "rl.minibatch_size=2", "videos=0",
                   "num_threads=1"],
}


def _quick_commands() -> list[list[str]]:
    """README's pipeline commands that run a script on its quick preset, in order."""
    text = (REPO / "README.md").read_text()
    block = text.split("## Pipeline, step by step", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    cmds = [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.startswith("python scripts/")]
    return [c for c in cmds if c[2:4] == ["--config", "quick"] and Path(c[1]).stem in TINY]


def test_the_readme_quick_pipeline_is_the_chain_this_test_runs():
    steps = [Path(c[1]).stem for c in _quick_commands()]
    assert steps == ["collect", "train_world_model", "train_bc", "train_bc", "imagine_rl"], steps


def test_the_readme_quick_pipeline_runs_in_order_on_a_tiny_setting(tmp_path):
    pytest.importorskip("libero.libero", reason="the collection step runs real LIBERO (the [libero] extra)")
    for cmd in _quick_commands():
        script = Path(cmd[1]).stem
        args = [sys.executable, str(REPO / cmd[1]), *cmd[2:], *TINY[script]]
        out = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, \
            f"{shlex.join(cmd)} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    # what each preset names, written where the next step looked for it
    outputs = tmp_path / "outputs"
    assert (outputs / "data" / "libero_spatial_quick" / "meta" / "info.json").is_file()
    for path in ("world_model/quick/world_model.pt", "bc/quick/policy.pt", "bc/quick_agentview/policy.pt",
                 "rl/quick/policy.pt"):
        assert (outputs / path).is_file(), path
