"""Per-step simulator labels on real LIBERO: a recorded expert episode replayed and labelled (robot_data.sim_labels),
a tampered replay refused, and labelled episodes simulated without rendering (robot_data.label_collection).

One short rendered recording (16 px, one view) and camera-less replays: about a minute on 2 cores.
"""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
pytest.importorskip("libero.libero")

from envs.libero_env import LiberoEnv, LiberoEnvConfig  # noqa: E402
from envs.outcome import LIFT_M  # noqa: E402
from robot_data.collection import PlanItem, record_episode  # noqa: E402
from robot_data.dataset import DatasetConfig, EpisodeDataset, EpisodeWriter  # noqa: E402
from robot_data.label_collection import (  # noqa: E402
    LabelCollectConfig,
    collect_labels,
    load_labelled,
    make_plan,
    read_episode,
    validate,
)
from robot_data.sim_labels import label_dataset, label_path, read_sim_labels, replay_env, replay_episode  # noqa: E402
from world_models.object_state import StateRewardConfig, fit_state_reward, labelled_episodes  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.libero]

BOWL = "akita_black_bowl_1"
# A style variant: the replay must rebuild the recording's restyled scene (envs.style) as well.
ITEM = PlanItem(task_id=0, index=0, init_state_id=3, perturbation="", seed=11, style=1)


class TappedEnv(LiberoEnv):
    """The recording env, noting where the bowl is before every action it is given."""

    bowl_rows: list

    def step_single(self, action):
        self.bowl_rows.append(np.array(self.raw_obs[f"{BOWL}_pos"], np.float32))
        return super().step_single(action)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A one-episode dataset of the clean expert, with what the recording env saw."""
    root = tmp_path_factory.mktemp("sim_labels") / "data"
    env = TappedEnv(LiberoEnvConfig(task_id=0, views=("agentview",), image_size=16, chunk_len=1, fast_render=True,
                                    terminate_on_success=False))
    env.bowl_rows = []
    try:
        episode = record_episode(env, ITEM, post_success_steps=4)
        tracker = env.tracker.info()
    finally:
        env.close()
    with EpisodeWriter(root, DatasetConfig(views=("agentview",), image_size=(16, 16))) as writer:
        writer.append(episode)
    return root, episode, tracker, np.stack(env.bowl_rows)


def test_replayed_labels_follow_the_recorded_episode(recorded):
    root, episode, tracker, bowl_rows = recorded
    assert episode.episode_success and episode.extra["style"] == 1
    stats = label_dataset(root, progress=False)
    assert stats["labelled"] == 1 and stats["skipped"] == {}, stats
    assert stats["max_state_diff"] < 1e-4
    labels = read_sim_labels(root, 0)
    assert labels is not None
    T = len(episode)
    assert labels["object_pos"].shape == (T, 3) and labels["target_pos"].shape == (T, 3)
    assert labels["grasped"].shape == (T,)
    assert labels["info"]["objects"] == [BOWL, "plate_1"] and labels["info"]["length"] == T
    # row t: where the bowl was when the recording env was given action t (the row convention, replayed exactly)
    np.testing.assert_allclose(labels["object_pos"], bowl_rows, atol=1e-5)
    lift = labels["object_pos"][:, 2] - labels["object_pos"][0, 2]
    grasped = labels["grasped"]
    first = int(np.argmax(grasped))
    assert grasped.any() and not grasped[0] and lift[:first].max() < 0.01  # resting until the fingers hold it
    assert lift[grasped].max() > LIFT_M  # held, it rose with the hand
    assert not grasped[-1]  # released on the plate
    # the same figures the recording env's tracker reported (the labels stop one step before its last)
    assert lift.max() == pytest.approx(tracker["object_lift_m"], abs=0.005)
    final = np.linalg.norm(labels["object_pos"][-1, :2] - labels["target_pos"][-1, :2])
    assert final == pytest.approx(tracker["target_distance_m"], abs=0.005) and final < 0.03

    # resumable: a second call labels nothing; the state reward's reader finds the episode
    assert label_dataset(root, progress=False)["already"] == 1
    eps, kept = labelled_episodes(str(root))
    assert kept == [0]
    np.testing.assert_array_equal(eps[0].object_pos, labels["object_pos"])
    np.testing.assert_array_equal(eps[0].grasped, grasped)
    np.testing.assert_array_equal(eps[0].state, episode.state)


def test_a_tampered_episode_is_refused(recorded):
    root, episode, _, _ = recorded
    meta = EpisodeDataset(root, verify=False).meta[0]
    env = replay_env("libero_spatial", 0)
    try:
        tampered = episode.action.copy()
        tampered[10:20, 0] = np.clip(tampered[10:20, 0] + 0.5, -1, 1)  # 10 steps pushed 2.5 cm further in x
        r = replay_episode(env, meta, tampered, episode.state, episode.success)
        assert r.labels is None and r.reason.startswith("diverged") and r.max_state_diff > 1e-3
        # keep_prefix: the rows replayed faithfully keep their labels (what label_dataset writes)
        full = replay_episode(env, meta, episode.action, episode.state, episode.success).labels
        part = replay_episode(env, meta, tampered, episode.state, episode.success, keep_prefix=True)
        rows = int(part.reason.split("at row ")[1])
        assert full is not None and part.labels is not None
        assert 10 < rows < len(episode) and part.labels["grasped"].shape == (rows,)
        np.testing.assert_array_equal(part.labels["object_pos"], full["object_pos"][:rows])
        assert env.render() is None and env.raw_obs is not None  # no cameras, nothing rendered
        # another start than the recorded one is caught at row 0
        r = replay_episode(env, replace(meta, init_state_id=meta.init_state_id + 1), episode.action, episode.state,
                           episode.success)
        assert r.labels is None and "row 0" in r.reason
    finally:
        env.close()
    assert not label_path(root, 1).exists()


def test_label_collection_without_rendering(tmp_path):
    cfg = LabelCollectConfig(out_dir=str(tmp_path / "labels"), tasks=[0], episodes_per_task=2, init_state_offset=3,
                             kinds=["expert", "near_miss"], post_success_steps=2)
    stats = collect_labels(cfg, progress=False)
    assert stats["written"] == 2 and stats["episodes_per_s"] > 0
    episodes, infos = load_labelled(cfg.out_dir)
    assert [i["kind"] for i in infos] == ["expert", "near_miss"] and [i["init_state_id"] for i in infos] == [3, 4]
    assert "grasp_offset_m" in infos[1]["perturbation_info"]
    expert = episodes[0]
    assert infos[0]["outcome"] == "success" and expert.success.any()
    T = len(expert.state)
    assert expert.object_pos.shape == (T, 3) and expert.grasped.any()
    assert (expert.object_pos[expert.grasped, 2] - expert.object_pos[0, 2]).max() > LIFT_M
    arrays, _ = read_episode(tmp_path / "labels" / "task00_ep0000.npz")
    assert arrays["action"].shape == (T, 7) and arrays["state"].dtype == np.float32
    # the state reward trains on them
    model, log = fit_state_reward(episodes, StateRewardConfig(steps=3, hidden=16, layers=1, batch_size=32))
    assert len(log["object_loss"]) == 3 and np.isfinite(log["object_loss"]).all()
    # resumable; a config whose plan differs from the files is refused
    assert collect_labels(cfg, progress=False)["already"] == 2
    with pytest.raises(ValueError, match="another plan"):
        collect_labels(LabelCollectConfig(**{**cfg.__dict__, "seed": 1}), progress=False)


def test_label_plan_cycles_through_the_requested_init_states():
    cfg = LabelCollectConfig(tasks=[2], episodes_per_task=25, init_state_offset=0, init_states=10)
    plan = make_plan(cfg)
    assert [p.init_state_id for p in plan] == [j % 10 for j in range(25)]
    assert len({p.seed for p in plan}) == 25  # repeated init states get their own seeds
    every = make_plan(LabelCollectConfig(tasks=[2], episodes_per_task=60, init_state_offset=45))
    assert [p.init_state_id for p in every][:7] == [45, 46, 47, 48, 49, 0, 1]
    with pytest.raises(ValueError, match="init_states"):
        validate(LabelCollectConfig(init_states=-1))


def test_train_state_reward_adds_simulated_episodes(recorded, tmp_path):
    from imagination.eval.state_reward import TrainStateRewardConfig, train_state_reward

    root = recorded[0]
    label_dataset(root, progress=False)
    labels = LabelCollectConfig(out_dir=str(tmp_path / "labels"), tasks=[0], episodes_per_task=1, init_state_offset=5,
                                kinds=["expert"], post_success_steps=2)
    collect_labels(labels, progress=False)
    cfg = TrainStateRewardConfig(
        data_dir=str(root), label_dirs=[labels.out_dir], out=str(tmp_path / "sr.pt"), holdout_every=0,
        model=StateRewardConfig(steps=3, hidden=16, layers=1, batch_size=32))
    result = train_state_reward(cfg)
    assert result["train_episodes"] == 2  # the dataset's one episode and the simulated one
    # the grasp-point classifier reads the same two sources: features at the first close, real outcomes
    from world_models.grasp_point import dataset_features, label_dir_features

    feats, tasks, outcomes, kept = dataset_features(str(root))
    ds = EpisodeDataset(root, verify=False)
    ep = ds[0]
    assert kept == [0] and feats[0].shape == (8,) and outcomes == [bool(ds.meta[0].success)]
    assert feats[0][3] * 220 == pytest.approx(np.flatnonzero(ep.action[:, 6] > 0)[0])
    sim_feats, _, sim_outcomes = label_dir_features(labels.out_dir)
    assert len(sim_feats) == 1 and sim_outcomes == [True]  # the expert succeeds
    assert (tmp_path / "sr.pt").is_file() and result["held_out_auc"] is None
    with pytest.raises(SystemExit, match="label_dirs"):
        train_state_reward(replace(cfg, label_dirs=[str(tmp_path / "missing")]))
    # a second labelled recorded dataset (e.g. the policy's own rollouts) is added to training whole
    result = train_state_reward(replace(cfg, train_data_dirs=[str(root)]))
    assert result["train_episodes"] == 3
    with pytest.raises(SystemExit, match="train_data_dirs"):
        train_state_reward(replace(cfg, train_data_dirs=[labels.out_dir]))  # not a labelled recorded dataset
