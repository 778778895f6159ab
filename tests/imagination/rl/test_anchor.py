"""The RL anchor (imagination/rl/anchor.py): which frames it reads and what it fits."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from imagination.rl.anchor import AnchorConfig, make_anchor
from policies.vla import VLAConfig, VLAPolicy
from robot_data.dataset import DatasetConfig, EpisodeWriter
from tests.episodes import grasping_episode

SIZE, T, CLOSE = 16, 12, 6  # grasping_episode closes the gripper at step 6


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("anchor") / "data"
    rng = np.random.default_rng(0)
    with EpisodeWriter(root, DatasetConfig(views=("agentview",), image_size=(SIZE, SIZE), fps=10)) as w:
        for k, (task, source) in enumerate([(0, "expert"), (0, "perturbed"), (1, "expert"), (1, "expert")]):
            ep = grasping_episode(rng, T, SIZE, task, True, "expert", k, {})
            w.append(ep if source == "expert" else replace(ep, source=source, perturbation="early_release"))
    return str(root)


@pytest.fixture
def seen(monkeypatch) -> list[torch.Tensor]:
    """The frame indices of every batch the anchor draws (policies.bc_batch.ChunkData.batch, spied on)."""
    import policies.bc as bc

    drawn: list[torch.Tensor] = []
    real_batch = bc.ChunkData.batch

    def spy(self, idx, shift, generator):
        drawn.append(idx.clone())
        return real_batch(self, idx, shift, generator)

    monkeypatch.setattr(bc.ChunkData, "batch", spy)
    return drawn


def _policy() -> VLAPolicy:
    torch.manual_seed(0)
    return VLAPolicy(VLAConfig(views=["agentview"], image_size=SIZE, chunk_len=4, conv_channels=[8, 16],
                               image_features=16, language_features=8, state_features=8, hidden=32))


def test_start_policy_anchor_is_zero_at_the_start_and_pulls_a_moved_policy_back(data):
    policy = _policy()
    anchor = make_anchor(AnchorConfig(coef=3.0, target="start_policy"), policy, data, [], 16, 0)
    assert float(anchor().detach()) < 1e-10  # the starting policy fits its own chunks exactly
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    moved = float(np.mean([float(anchor().detach()) for _ in range(4)]))
    assert moved > 1e-4
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    for _ in range(40):
        opt.zero_grad()
        anchor().backward()
        opt.step()
    assert float(np.mean([float(anchor().detach()) for _ in range(4)])) < 0.5 * moved


def test_after_grasp_and_before_grasp_read_only_their_side_of_the_first_close(data, seen):
    policy = _policy()
    make_anchor(AnchorConfig(coef=1.0, target="start_policy", phase="after_grasp"), policy, data, [], 64, 0)()
    frames = torch.cat(seen)
    assert ((frames % T) >= CLOSE).all() and frames.max() < 4 * T  # 4 episodes of T frames, in order
    seen.clear()
    make_anchor(AnchorConfig(coef=1.0, target="start_policy", phase="before_grasp"), policy, data, [], 64, 0)()
    assert ((torch.cat(seen) % T) < CLOSE).all()  # the approach only: placement starts leave the rest to RL
    seen.clear()
    make_anchor(AnchorConfig(coef=1.0, target="start_policy"), policy, data, [], 64, 0)()
    assert ((torch.cat(seen) % T) < CLOSE).any() and ((torch.cat(seen) % T) >= CLOSE).any()
    # "demos": one successful expert episode per task, episodes 0 and 2
    seen.clear()
    make_anchor(AnchorConfig(coef=1.0, target="demos"), policy, data, [], 64, 0)()
    assert torch.cat(seen).max() < 2 * T


def test_before_release_keeps_the_carry_and_stops_the_lead_before_the_release():
    from imagination.rl.anchor import kept_frames

    action = np.zeros((40, 7), np.float32)
    action[:, 6] = -1.0
    action[10:30, 6] = 1.0  # closes at 10, opens again at 30
    assert kept_frames(action, "before_release", release_lead=8) == (0, 22)  # approach, grasp and carry
    assert kept_frames(action, "before_release", release_lead=40) == (0, 0)
    assert kept_frames(action, "before_grasp") == (0, 10) and kept_frames(action, "after_grasp") == (10, 40)
    held = action.copy()
    held[30:, 6] = 1.0  # never lets go: no placement start comes from it, all of it is held
    assert kept_frames(held, "before_release") == (0, 40)
    never = np.full((40, 7), -1.0, np.float32)  # never closes
    assert kept_frames(never, "before_release") == kept_frames(never, "before_grasp") == (0, 40)


def test_bad_anchor_settings_name_themselves(data):
    with pytest.raises(ValueError, match="target must be one of"):
        make_anchor(AnchorConfig(coef=1.0, target="teacher"), _policy(), data, [], 8, 0)
    with pytest.raises(ValueError, match="bc_coef: .* no episode of tasks"):
        make_anchor(AnchorConfig(coef=1.0, target="start_policy"), _policy(), data, [7], 8, 0)


def test_bc_tasks_widen_the_anchor_beyond_the_tasks_rl_imagines(data, seen):
    """ImagineRLConfig.bc_tasks: the anchor holds those tasks' frames too ([] = the RL's tasks)."""
    from imagination.rl.training import ImagineRLConfig, bc_anchor

    cfg = ImagineRLConfig(start_data=data, tasks=[0], bc_coef=1.0, bc_target="start_policy")
    cfg.rl.minibatch_size = 64
    bc_anchor(cfg, _policy())()
    assert torch.cat(seen).max() < 2 * T  # task 0's two episodes only
    seen.clear()
    bc_anchor(replace(cfg, bc_tasks=[0, 1]), _policy())()
    assert torch.cat(seen).max() >= 2 * T  # task 1's episodes are held as well


def test_bad_bc_tasks_are_refused_with_the_field_named():
    from imagination.rl.training import ImagineRLConfig, train_rl

    with pytest.raises(ValueError, match="bc_tasks: expected a list of task ids"):
        train_rl(ImagineRLConfig(bc_tasks=[-1]))
