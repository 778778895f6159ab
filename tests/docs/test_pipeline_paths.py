"""README's step-by-step pipeline chains: the files the quick RL preset reads are the ones README's commands write
(a preset reading outputs/bc/quick_agentview/policy.pt, which no command wrote, once broke the pipeline)."""
import re
import shlex
from pathlib import Path

from imagination.rl.training import ImagineRLConfig
from infra.cli import load_config
from policies.bc import BCConfig
from robot_data.recording import CollectConfig
from world_models.training import TrainWorldModelConfig

REPO = Path(__file__).resolve().parents[2]


def _pipeline_commands() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    block = text.split("## Pipeline, step by step", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.startswith("python scripts/")]


def _writes(script: str, group: str, cls: type) -> list[str]:
    """The out_dir of every README command running `script` with --config quick (its overrides applied)."""
    outs = []
    for cmd in _pipeline_commands():
        if cmd[1] == f"scripts/{script}.py" and cmd[2:4] == ["--config", "quick"]:
            overrides = [a for a in cmd[4:] if re.match(r"^[\w.]+=", a) and "..." not in a]
            outs.append(str(load_config(cls, "quick", overrides, group=group).out_dir))
    return outs


def test_the_quick_rl_preset_reads_what_the_readme_commands_write():
    rl = load_config(ImagineRLConfig, "quick", group="rl")
    assert any(cmd[1:4] == ["scripts/imagine_rl.py", "--config", "quick"] and len(cmd) == 4
               for cmd in _pipeline_commands()), "README runs the quick RL preset as it is"
    assert str(Path(rl.policy).parent) in _writes("train_bc", "bc", BCConfig)
    assert str(Path(rl.world_model).parent) in _writes("train_world_model", "world_model", TrainWorldModelConfig)
    assert rl.start_data in _writes("collect", "collect", CollectConfig)
