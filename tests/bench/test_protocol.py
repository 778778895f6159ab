"""The rl_gain protocol's build: which stage configs it hands to collection, world model, calibration and
BC, and that a finished stage is reused. The stages themselves are replaced by recorders here (each is
tested in its own package); what is checked is the protocol's wiring of init states, views and BC start."""
import json
from pathlib import Path

import pytest

import bench.protocol as protocol
from envs.cli import load_config
from imagination.loop.config import LoopConfig


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    calls: dict[str, list] = {"collect": [], "world_model": [], "calibrate": [], "bc": []}

    def collect(cfg):
        calls["collect"].append(cfg)
        Path(cfg.out_dir, "meta").mkdir(parents=True)
        Path(cfg.out_dir, "meta", "info.json").write_text("{}")

    def world_model(cfg):
        calls["world_model"].append(cfg)
        Path(cfg.out_dir).mkdir(parents=True)
        Path(cfg.out_dir, "world_model.pt").write_bytes(b"w")

    def calibrate(cfg):
        calls["calibrate"].append(cfg)
        Path(cfg.checkpoint).with_name("calibration.json").write_text("{}")

    def bc(cfg):
        calls["bc"].append(cfg)
        Path(cfg.out_dir).mkdir(parents=True)
        Path(cfg.out_dir, "policy.pt").write_text("{}")
        Path(cfg.out_dir, "result.json").write_text(json.dumps({"steps": cfg.steps}))

    monkeypatch.setattr(protocol, "collect_dataset", collect)
    monkeypatch.setattr(protocol, "train_world_model", world_model)
    monkeypatch.setattr(protocol, "calibrate_success", calibrate)
    monkeypatch.setattr(protocol, "train_bc_on_data", bc)
    # the recorded collection writes no episodes: count them as all there once its info.json exists
    monkeypatch.setattr(protocol, "EpisodeDataset", lambda path, verify: range(50))
    return calls


def test_build_trains_on_init_states_0_to_9_and_bc_from_one_demo_and_fewer_steps(tmp_path, recorded):
    p = protocol.RLGainProtocol(root=str(tmp_path / "rl_gain"))
    loop = load_config(LoopConfig, "quick", [], group="loop")
    paths = protocol.build(p, loop)
    (collect,), (bc,) = recorded["collect"], recorded["bc"]
    assert collect.init_state_offset == 0 and collect.episodes_per_task == p.train_init_states == 10
    assert collect.tasks == [0, 1, 2, 3, 4] and collect.views == ["agentview"]
    assert bc.episodes_per_task == 1 and bc.steps == p.bc_steps == 750 and bc.data_dir == paths["data"]
    assert bc.policy.views == ["agentview"] and bc.steps != loop.bc.steps  # the protocol's start, not the preset's
    assert recorded["calibrate"][0].checkpoint == paths["world_model"]
    record = json.loads((tmp_path / "rl_gain" / "protocol.json").read_text())["provenance"]
    assert record["seed"] == p.seed and record["jobs"]["bench_init_states"] == [20, 49]
    # a second build finds every stage finished and runs none again
    protocol.build(p, loop)
    assert [len(v) for v in recorded.values()] == [1, 1, 1, 1]
    # a BC start trained under another protocol is refused, not scored as this one's
    with pytest.raises(ValueError, match="bc_steps"):
        protocol.build(protocol.RLGainProtocol(root=p.root, bc_steps=1000), loop)
