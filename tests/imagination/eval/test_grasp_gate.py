"""imagination/eval/grasp_gate.py on hand-made recorded episodes: a policy's gate episodes whose real outcome
follows the grasp point (success when it closes within 2 cm of the object), a classifier fit on label
episodes of the same rule, and a tiny world model and policy for the imagined stages."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from imagination.eval.grasp_gate import (
    STAGES,
    GraspGateConfig,
    grasp_gate_records,
    grasp_starts,
    placement_starts,
)
from imagination.eval.reward_gate import gate_figures
from robot_data.dataset import DatasetConfig, Episode, EpisodeWriter
from robot_data.sim_labels import label_path, write_labels
from tests.episodes import grasp_label_dir

H, K, T = 16, 4, 12
OBJ = np.array([0.1, 0.0, 0.9], np.float32)


def _gate(root, policy: str, n: int = 12, release: int = 0) -> None:
    """n recorded episodes of `policy` on tasks 0-2; the end effector holds still at an offset from the
    object and the gripper closes at step 6 (and opens at `release` when > 0); success when the offset is under
    2 cm."""
    rng = np.random.default_rng(1)
    with EpisodeWriter(root, DatasetConfig(views=("agentview",), image_size=(H, H))) as w:
        for k in range(n):
            offset = (0.005 if k % 2 == 0 else 0.035) * np.array([np.cos(k), np.sin(k)])  # in the plane
            state = np.zeros((T, 8), np.float32)
            state[:, :3] = OBJ + np.r_[offset, 0.02]
            action = np.zeros((T, 7), np.float32)
            action[6:, 6] = 1.0
            if release:
                action[release:, 6] = -1.0
            ok = k % 2 == 0
            success = np.zeros(T, bool)
            success[-1] = ok
            w.append(Episode(frames={"agentview": rng.integers(0, 255, (T, H, H, 3), dtype=np.uint8)}, state=state,
                             action=action, reward=success.astype(np.float32), success=success,
                             instruction=f"task {k % 3}", suite="libero_spatial", task_id=k % 3, source="policy",
                             perturbation="", init_state_id=10 + k // 3, extra={"policy": policy}))
    for k in range(n):
        label_path(root, k).parent.mkdir(parents=True, exist_ok=True)
        write_labels(label_path(root, k), {"object_pos": np.repeat(OBJ[None], T, 0),
                                           "target_pos": np.repeat(OBJ[None] + [0.2, 0, 0], T, 0),
                                           "grasped": np.zeros(T, bool)}, {})


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from policies.vla import VLAConfig, VLAPolicy
    from world_models.denoiser import DenoiserConfig
    from world_models.model import WorldModel, WorldModelConfig

    root = tmp_path_factory.mktemp("grasp_gate")
    policy_path = str(root / "policy.pt")
    torch.manual_seed(0)
    VLAPolicy(VLAConfig(views=["agentview"], image_size=H, chunk_len=K, conv_channels=[8, 8])).save(policy_path)
    d = DenoiserConfig(image_size=H, channels=3, context_frames=2, chunk_len=K, block_out_channels=[8, 16],
                       norm_num_groups=4)
    WorldModel(WorldModelConfig(views=["agentview"], denoiser=d)).save(root / "wm.pt")
    _gate(root / "gate", policy_path)
    cfg = GraspGateConfig(world_model=str(root / "wm.pt"), label_dirs=[grasp_label_dir(root / "labels")],
                          num_envs=6, max_steps=T)
    return root, policy_path, cfg


def test_recorded_stage_reads_the_grasp_point_of_each_episode(setup):
    root, policy, cfg = setup
    runs = grasp_gate_records(str(root / "gate"), policy, cfg, ["recorded"])
    assert list(runs) == ["recorded"]
    rows = runs["recorded"]
    assert len(rows) == 12 and {r["task_id"] for r in rows} == {0, 1, 2}
    assert [r["init_state_id"] for r in rows[:3]] == [10, 10, 10] and [r["episode"] for r in rows] == list(range(12))
    # the classifier learned the rule of the label episodes: it ranks every real success above every failure
    figs = gate_figures(rows, 0.5)
    assert figs["auc_within_task"] == 1.0 and figs["max_calibration_gap"] <= 0.34
    ok = [r["max_success_prob"] for r in rows if r["real_success"]]
    bad = [r["max_success_prob"] for r in rows if not r["real_success"]]
    assert min(ok) > 0.5 > max(bad)
    # a classifier fit once by the caller (reward_signal judges several policies) gives the same records
    from imagination.eval.grasp_gate import fit_gate_classifier
    assert grasp_gate_records(str(root / "gate"), policy, cfg, ["recorded"], fit_gate_classifier(cfg)) == runs


def test_imagined_stages_give_one_probability_per_episode(setup):
    root, policy, cfg = setup
    runs = grasp_gate_records(str(root / "gate"), policy, cfg)  # proprio "": fitted on the gate episodes
    assert list(runs) == list(STAGES)
    for name in ("predicted", "closed_loop"):
        probs = [r["max_success_prob"] for r in runs[name]]
        assert len(probs) == 12 and all(0.0 <= p <= 1.0 for p in probs)
        assert [r["real_success"] for r in runs[name]] == [r["real_success"] for r in runs["recorded"]]


def _untrained_proprio(root) -> str:
    """A saved proprio model of the world model's chunk length: the imagined stages load it instead of fitting one."""
    from world_models.proprio import ProprioConfig, ProprioModel

    torch.manual_seed(0)
    ProprioModel(ProprioConfig(chunk_len=K, hidden=16, layers=1)).save(root / "proprio.pt")
    return str(root / "proprio.pt")


def test_several_imagined_runs_combine_by_mean_or_by_agreement(setup):
    root, policy, cfg = setup
    cfg = replace(cfg, proprio=_untrained_proprio(root))  # four imagined runs: no fit each time
    one = [grasp_gate_records(str(root / "gate"), policy, replace(cfg, seed=s), ["closed_loop"])["closed_loop"]
           for s in (0, 1)]
    runs = np.array([[r["max_success_prob"] for r in rows] for rows in one])  # [2 seeds, 12 episodes]
    for combine, expected in (("mean", runs.mean(0)), ("min", runs.min(0))):
        got = grasp_gate_records(str(root / "gate"), policy, replace(cfg, samples=2, combine=combine), ["closed_loop"])
        assert np.allclose([r["max_success_prob"] for r in got["closed_loop"]], expected, atol=1e-6)
    with pytest.raises(ValueError, match="samples, combine"):
        grasp_gate_records(str(root / "gate"), policy, replace(cfg, samples=0), ["closed_loop"])


def test_bad_stage_and_a_policy_with_no_episodes_are_named(setup):
    root, policy, cfg = setup
    with pytest.raises(ValueError, match="stages: expected some of"):
        grasp_gate_records(str(root / "gate"), policy, cfg, ["dreamed"])
    with pytest.raises(ValueError, match="holds no labelled episode of other.pt"):
        grasp_gate_records(str(root / "gate"), "other.pt", cfg, ["recorded"])


def test_task_bias_fit_on_recorded_rollouts_is_what_the_judge_then_predicts(setup):
    """imagination/eval/task_bias.py's task_bias_from_rollouts (the loop's `round<r>_task_bias` stage): offsets
    fit on the closed-loop re-run of a policy's recorded episodes bring each task's mean P(success) to its smoothed
    real rate, and a judge configured with them predicts exactly that; offsets already in the config are ignored."""
    from imagination.eval.task_bias import task_bias_from_rollouts
    from world_models.grasp_point import GraspPointConfig

    root, policy, cfg = setup
    cfg = replace(cfg, proprio=_untrained_proprio(root))  # five imagined runs: no proprio fit each time
    fit = task_bias_from_rollouts(str(root / "gate"), policy, cfg)
    assert fit["jobs"] == 12 and len(fit["bias"]) == 10 and fit["bias"][3:] == [0.0] * 7
    assert sorted(fit["tasks"]) == [0, 1, 2]
    plain = grasp_gate_records(str(root / "gate"), policy, cfg, ["closed_loop"])["closed_loop"]
    for k, row in fit["tasks"].items():
        mine = [r for r in plain if r["task_id"] == k]
        assert row["jobs"] == len(mine) == 4 and row["real_successes"] == sum(r["real_success"] for r in mine)
        assert row["imagined_before"] == pytest.approx(np.mean([r["max_success_prob"] for r in mine]), abs=1e-4)
        if abs(fit["bias"][k]) < 8.0:  # inside the bound: the smoothed real rate exactly
            assert row["imagined_after"] == pytest.approx((row["real_successes"] + 0.5) / 5, abs=1e-3)
    judged = replace(cfg, grasp_point=GraspPointConfig(task_bias=fit["bias"]))
    after = grasp_gate_records(str(root / "gate"), policy, judged, ["closed_loop"])["closed_loop"]
    for k, row in fit["tasks"].items():
        got = np.mean([r["max_success_prob"] for r in after if r["task_id"] == k])
        assert got == pytest.approx(row["imagined_after"], abs=1e-3)
    # the fit starts from the plain judge whatever offsets the config carries
    assert task_bias_from_rollouts(str(root / "gate"), policy, judged) == fit


def test_placement_starts_begin_lead_steps_before_the_release_holding_the_grasp(setup):
    shut = np.zeros((20, 7))
    shut[:, 6] = -1.0
    shut[5:15, 6] = 1.0  # closes at 5, opens at 15
    never = shut.copy()
    never[5:, 6] = 1.0
    assert placement_starts([shut, shut, never, np.zeros((20, 7))], 6).tolist() == [9, 9, -1, -1]
    assert placement_starts([shut], 10).tolist() == [-1]  # the start would come before the close
    late = np.zeros((40, 7))
    late[:, 6] = -1.0
    late[3:30, 6] = 1.0  # closes at 3, opens at 30
    # rounded down to the policy's decision steps: 30 - 6 = 24 stays, 30 - 10 = 20 -> 16, and a start that rounding
    # brings to or before the close (30 - 24 = 6 -> 0) is none
    assert placement_starts([late, late, late], 6, align=8).tolist() == [24, 24, 24]
    assert placement_starts([late], 10, align=8).tolist() == [16]
    assert placement_starts([late], 24, align=8).tolist() == [-1]
    root, policy, cfg = setup
    _gate(root / "released", policy, n=6, release=10)
    cfg = replace(cfg, until="release", label_dirs=[], train_data=[str(root / "released")],
                  proprio=_untrained_proprio(root))
    stages = ["recorded", "predicted"]  # the closed loop imagines from the same keyframes
    runs = grasp_gate_records(str(root / "released"), policy, replace(cfg, lead=2), stages)
    assert all(len(runs[name]) == 6 for name in stages)
    assert runs["recorded"] == grasp_gate_records(str(root / "released"), policy, cfg, ["recorded"])["recorded"]
    assert all(0.0 <= r["max_success_prob"] <= 1.0 for name in stages for r in runs[name])
    with pytest.raises(ValueError, match="lead: no episode of .* releases more than 4 steps after its close"):
        grasp_gate_records(str(root / "released"), policy, replace(cfg, lead=4), ["recorded"])
    # grasp starts: lead steps before the first close (step 6), rounded to the decision steps; closing sooner, none
    assert grasp_starts([late, late, shut], 2, align=0).tolist() == [1, 1, 3]
    assert grasp_starts([late, shut, never, np.zeros((20, 7))], 2, align=2).tolist() == [0, 2, 2, -1]
    close = replace(cfg, until="close", lead=4)
    runs = grasp_gate_records(str(root / "released"), policy, close, stages)
    assert all(len(runs[name]) == 6 for name in stages)
    with pytest.raises(ValueError, match="lead: no episode of .* closes 7 steps or more in"):
        grasp_gate_records(str(root / "released"), policy, replace(close, lead=7), ["recorded"])
