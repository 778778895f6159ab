"""The rl_gain protocol's build: which stage configs it hands to collection, world model, calibration and
BC, and that a finished stage is reused. The stages themselves are replaced by recorders here (each is
tested in its own package); what is checked is the protocol's wiring of init states, views and BC start."""
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

import bench.protocol as protocol
from imagination.loop.config import LoopConfig
from infra.cli import load_config


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
        Path(cfg.out_dir, "config.yaml").write_text(f"augment_noise: {cfg.augment_noise}\n"
                                                    f"task_weights: {list(cfg.task_weights)}\n")

    monkeypatch.setattr(protocol, "collect_dataset", collect)
    monkeypatch.setattr(protocol, "train_world_model", world_model)
    monkeypatch.setattr(protocol, "calibrate_success", calibrate)
    monkeypatch.setattr(protocol, "train_bc_on_data", bc)
    # the recorded collection writes no episodes: count them as all there, of both outcomes, once its info.json exists
    class Recorded:
        meta = [SimpleNamespace(success=k % 2 == 0) for k in range(50)]

        def __len__(self) -> int:
            return len(self.meta)

    monkeypatch.setattr(protocol, "EpisodeDataset", lambda path, verify: Recorded())
    monkeypatch.setattr(protocol, "missing_outcome", lambda data: "")  # Recorded holds both outcomes
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
    with pytest.raises(ValueError, match="bc_augment_noise"):
        protocol.build(protocol.RLGainProtocol(root=p.root, bc_augment_noise=16.0), loop)


def test_a_noise_trained_start_is_built_with_its_noise_and_reused(tmp_path, recorded):
    p = protocol.RLGainProtocol(root=str(tmp_path / "rl_gain"), bc_augment_noise=16.0)
    loop = load_config(LoopConfig, "quick", [], group="loop")
    protocol.build(p, loop)
    (bc,) = recorded["bc"]
    assert bc.augment_noise == 16.0 and loop.bc.augment_noise == 0.0
    protocol.build(p, loop)  # the same protocol finds its start finished
    assert len(recorded["bc"]) == 1
    with pytest.raises(ValueError, match="bc_augment_noise: .* was trained with 16.0, the protocol asks for 0.0"):
        protocol.build(replace(p, bc_augment_noise=0.0), loop)


def test_a_task_weighted_start_is_built_with_its_weights_and_another_is_refused(tmp_path, recorded):
    p = protocol.RLGainProtocol(root=str(tmp_path / "rl_gain"), bc_task_weights=(0.5, 1.0, 1.0, 1.0, 0.8))
    loop = load_config(LoopConfig, "quick", [], group="loop")
    protocol.build(p, loop)
    (bc,) = recorded["bc"]
    assert bc.task_weights == [0.5, 1.0, 1.0, 1.0, 0.8] and loop.bc.task_weights == []
    protocol.build(p, loop)  # the same protocol finds its start finished
    assert len(recorded["bc"]) == 1
    with pytest.raises(ValueError, match=r"bc_task_weights: .* was trained with \(0.5, 1.0, 1.0, 1.0, 0.8\), "
                                         r"the protocol asks for \(\)"):
        protocol.build(replace(p, bc_task_weights=()), loop)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_protocols_job_split_is_disjoint(version):
    """What the benchmark scores was never trained or chosen on: its init states lie outside the training and the
    choosing ones, and the gate's lie inside the choosing ones (every recipe choice is made there)."""
    from bench.protocol import PROTOCOLS

    jobs = PROTOCOLS[version].job_sets()
    assert jobs["bench"] and not jobs["bench"] & (jobs["train"] | jobs["choose"] | jobs["gate"])
    assert jobs["train"] | jobs["gate"] == jobs["choose"] and not jobs["train"] & jobs["gate"]
    assert max(jobs["bench"]) < 50  # LIBERO's official init states per task
    assert PROTOCOLS["v2"].tasks == (5, 6, 7, 8, 9) and not set(PROTOCOLS["v2"].tasks) & set(PROTOCOLS["v1"].tasks)


def test_a_smoke_run_shrinks_the_suites_setting_and_keeps_its_jobs_disjoint(tmp_path):
    assert protocol.suite_recipe("libero_spatial") == protocol.PROTOCOL_V2.recipe
    assert {protocol.suite_recipe(s) for s in ("libero_object", "libero_goal", "libero_10")} == {"goal"}
    with pytest.raises(ValueError, match="no setting is chosen"):
        protocol.suite_protocol("libero_object", str(tmp_path / "object"))
    unchosen = protocol.suite_protocol("libero_object", str(tmp_path / "object"), smoke=True)
    assert unchosen.tasks == (0,) and unchosen.recipe == "goal"
    smoke = protocol.smoke_protocol(protocol.PROTOCOL_V2_10)
    assert smoke.root == "outputs/bench/smoke/libero_10" and smoke.tasks == (2,) and smoke.recipe == "goal"
    jobs = smoke.job_sets()
    assert jobs == {"train": {0}, "gate": {1}, "choose": {0, 1}, "bench": {2}}
