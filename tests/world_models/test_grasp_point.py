"""The grasp-point features and classifier on episodes built to a known rule: a grasp closer than 2 cm
(in the plane) to the object's start succeeds."""
import numpy as np
import pytest

from world_models.grasp_point import (
    GraspPointClassifier,
    GraspPointConfig,
    grasp_features,
    place_features,
    release_after,
    release_features_at,
)


def _episode(rng, offset_xy, close_at=30, T=60):
    obj = np.array([0.1, -0.2, 0.9])
    state = np.zeros((T, 8))
    state[:, :3] = obj + np.linspace(np.array([0.0, 0.0, 0.3]), np.r_[offset_xy, 0.05], T)[:, :3]
    state[:, 3:6] = rng.normal(0, 0.01, (T, 3))
    action = np.zeros((T, 7))
    action[:, 6] = -1.0
    action[close_at:, 6] = 1.0
    return state, action, obj, obj + np.array([0.2, 0.0, 0.0])


def test_features_are_read_at_the_first_close_step():
    rng = np.random.default_rng(0)
    state, action, obj, target = _episode(rng, [0.01, -0.02], close_at=25)
    f = grasp_features(state, action, obj, target)
    np.testing.assert_allclose(f[:3], state[25, :3] - obj)
    assert f.shape == (8,) and f[3] == pytest.approx(25 / 220)
    assert f[4] == pytest.approx(np.linalg.norm(state[25, :2] - obj[:2]))
    np.testing.assert_allclose(f[5:], [0.2, 0.0, 0.0])
    state[:, 3:6] += 1.0  # the orientation is not read (the demonstrations hardly vary it)
    np.testing.assert_allclose(grasp_features(state, action, obj, target), f)
    action[:, 6] = -1.0  # never closed: read at the last step
    assert grasp_features(state, action, obj, target)[3] == pytest.approx(59 / 220)
    with pytest.raises(ValueError, match="state, action"):
        grasp_features(state[:10], action, obj, target)


def test_classifier_learns_the_grasp_boundary_and_refuses_one_outcome():
    rng = np.random.default_rng(1)

    def batch(n):
        offsets = rng.uniform(-0.04, 0.04, (n, 2))
        feats = np.array([grasp_features(*_episode(rng, o, close_at=int(rng.integers(20, 40)))) for o in offsets])
        # the rule is on the offset at the close step, which the features see only through the trajectory
        return feats, rng.integers(0, 3, n), np.hypot(feats[:, 0], feats[:, 1]) < 0.02

    f, t, y = batch(200)
    clf = GraspPointClassifier().fit(f, t, y)
    f2, t2, y2 = batch(100)
    p = clf.predict(f2, t2)
    assert p.shape == (100,) and ((p >= 0.5) == y2).mean() > 0.9
    with pytest.raises(ValueError, match="both outcomes"):
        GraspPointClassifier().fit(f, t, np.ones(len(f), bool))
    with pytest.raises(ValueError, match="task_ids"):
        clf.predict(f2, np.full(100, 12))


def test_ensemble_is_pessimistic_where_labelled_grasps_are_few():
    rng = np.random.default_rng(2)
    offsets = rng.uniform(-0.03, 0.03, (120, 2))
    f = np.array([grasp_features(*_episode(rng, o)) for o in offsets])
    t, y = np.zeros(len(f), int), np.hypot(f[:, 0], f[:, 1]) < 0.02
    one = GraspPointClassifier().fit(f, t, y)
    ens = GraspPointClassifier(GraspPointConfig(ensemble=8, pessimism=1.0)).fit(f, t, y)
    assert len(ens.members) == 8 and not one.members
    near = np.array([grasp_features(*_episode(rng, [0.005, 0.0]))])  # inside the labelled cloud
    far = np.array([grasp_features(*_episode(rng, [0.0, 0.0], close_at=55))])  # a close step never labelled
    mean = np.mean([m.predict_proba(ens._inputs(far, np.zeros(1, int)))[:, 1] for m in ens.members])
    assert ens.predict(far, np.zeros(1, int))[0] < mean - 1e-3  # the members disagree off the data: penalized
    assert ens.predict(near, np.zeros(1, int))[0] > 0.5 and one.predict(near, np.zeros(1, int))[0] > 0.5
    # the same seed, the same members
    again = GraspPointClassifier(GraspPointConfig(ensemble=8, pessimism=1.0)).fit(f, t, y)
    np.testing.assert_allclose(again.predict(far, np.zeros(1, int)), ens.predict(far, np.zeros(1, int)))
    with pytest.raises(ValueError, match="ensemble"):
        GraspPointClassifier(GraspPointConfig(ensemble=0))


def test_place_features_carry_the_object_with_the_gripper_to_the_release():
    rng = np.random.default_rng(1)
    state, action, obj, target = _episode(rng, [0.0, 0.0], close_at=20)
    action[45:, 6] = -1.0  # opens again at step 45
    assert release_after(action, 20) == 45 and release_after(action[:45], 20) == -1
    f = place_features(state, action, obj, target)
    assert f.shape == (14,)
    np.testing.assert_allclose(f[:8], grasp_features(state, action, obj, target))
    carried = obj + state[45, :3] - state[20, :3]  # the object rode with the gripper from the close
    np.testing.assert_allclose(f[8:11], carried - target)
    assert f[11] == pytest.approx(np.linalg.norm((carried - target)[:2]))
    assert f[12] == pytest.approx(45 / 220) and f[13] == pytest.approx(state[45, 2] - state[20, 2])
    np.testing.assert_allclose(f, release_features_at(state[20], 20, state[45], 45, obj, target))
    action[45:, 6] = 1.0  # held to the end: the release is read at the last step
    assert place_features(state, action, obj, target)[12] == pytest.approx(59 / 220)


def test_task_bias_moves_each_tasks_level_and_keeps_its_order():
    from scipy.special import logit

    rng = np.random.default_rng(3)
    offsets = rng.uniform(-0.04, 0.04, (200, 2))
    f = np.array([grasp_features(*_episode(rng, o, close_at=int(rng.integers(20, 40)))) for o in offsets])
    t, y = rng.integers(0, 2, len(f)), np.hypot(f[:, 0], f[:, 1]) < 0.02
    plain = GraspPointClassifier().fit(f, t, y)
    bias = [0.0] * 10
    bias[1] = -2.0  # task 1 judged more harshly, task 0 untouched
    moved = GraspPointClassifier(GraspPointConfig(task_bias=bias)).fit(f, t, y)
    p, q = plain.predict(f, t), moved.predict(f, t)
    np.testing.assert_allclose(q[t == 0], p[t == 0])
    np.testing.assert_allclose(logit(q[t == 1]), logit(np.clip(p[t == 1], 1e-6, 1 - 1e-6)) - 2.0, atol=1e-6)
    assert (np.argsort(q[t == 1], kind="stable") == np.argsort(p[t == 1], kind="stable")).all()
    ens = GraspPointClassifier(GraspPointConfig(ensemble=3, task_bias=bias)).fit(f, t, y)
    assert (ens.predict(f, t)[t == 1] < GraspPointClassifier(GraspPointConfig(ensemble=3)).fit(f, t, y)
            .predict(f, t)[t == 1] + 1e-9).all()
    with pytest.raises(ValueError, match="task_bias: expected 10 logit offsets"):
        GraspPointClassifier(GraspPointConfig(task_bias=[0.0, 1.0]))


@pytest.mark.parametrize("cfg", [GraspPointConfig(), GraspPointConfig(ensemble=4, pessimism=0.5, c=0.3)])
def test_a_saved_classifier_loads_predicting_exactly_as_fitted(cfg, tmp_path):
    """save/load keeps fitted numbers only (no pickled objects): the loaded pipelines and members predict the
    same probabilities, and the file's other entries come back."""
    from infra.checkpoint import CheckpointError

    rng = np.random.default_rng(3)
    x, tasks = rng.normal(size=(90, 6)), rng.integers(0, 10, 90)
    clf = GraspPointClassifier(cfg).fit(x, tasks, x[:, 0] + 0.5 * rng.normal(size=90) > 0)
    clf.save(tmp_path / "judge.pt", fitted_on={"episodes": 90})
    loaded, extra = GraspPointClassifier.load(tmp_path / "judge.pt")
    assert loaded.cfg == cfg and len(loaded.members) == len(clf.members) and extra == {"fitted_on": {"episodes": 90}}
    probe = rng.normal(size=(40, 6)) * 2
    np.testing.assert_array_equal(loaded.predict(probe, tasks[:40]), clf.predict(probe, tasks[:40]))
    (tmp_path / "bad.pt").write_bytes((tmp_path / "judge.pt").read_bytes()[:100])
    with pytest.raises(CheckpointError, match="bad.pt"):
        GraspPointClassifier.load(tmp_path / "bad.pt")
