"""Reward "goal": the env hands the judge every imagined frame, and the judge pays the goal reader's probability
where an episode ends (at the threshold, or graded at the horizon), reading no simulator quantity."""
import numpy as np
import pytest
import torch

from imagination.env import ImaginationConfig, ImaginationVectorEnv
from imagination.episodes import StartEpisode
from imagination.keyframes import Keyframe, KeyframeConfig
from imagination.rewards.base import reads_simulator
from imagination.rewards.goal import GoalJudge
from tests.imagination.conftest import H
from tests.imagination.conftest import start_episodes as _episodes
from world_models.goal_reader import GoalReader, GoalReaderConfig

READER = GoalReaderConfig(channels=[8, 8], keypoints=8)


def _reader(path, tasks=(0, 1, 2), size=H, view="agentview"):
    torch.manual_seed(0)
    reader = GoalReader(GoalReaderConfig(**{**READER.__dict__, "view": view}), "libero_spatial",
                        {t: ["(on akita_black_bowl_1 plate_1)"] for t in tasks}, size)
    reader.save(path)
    return str(path)


def _spatial(episodes):
    return [StartEpisode(e.frames, e.state, e.action, e.instruction, e.task_id, None, "libero_spatial")
            for e in episodes]


def test_verdicts_pay_where_the_episode_ends_and_nowhere_else():
    judge = GoalJudge(None, 3, 0, 1, max_steps=10, threshold=0.6, until="threshold")  # type: ignore[arg-type]
    p = np.array([[0.1, 0.7, 0.9, 0.2], [0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4]])
    prob, end = judge.verdicts(np.array([0, 0, 8]), p)
    np.testing.assert_allclose(prob[0], [0, 0.7, 0, 0])  # the first pass of the threshold
    assert not prob[1].any() and end[1] == -1  # goes on, unpaid
    np.testing.assert_allclose(prob[2], [0, 0.2, 0, 0])  # two actions left: graded at the last one
    assert end.tolist() == [-1, -1, 1]
    # "horizon" (the default): a pass mid-episode pays nothing; the last frame before the horizon is the verdict
    judge = GoalJudge(None, 2, 0, 1, max_steps=10, threshold=0.6)  # type: ignore[arg-type]
    prob, end = judge.verdicts(np.array([0, 8]), np.array([[0.1, 0.7, 0.9, 0.2], [0.1, 0.9, 0.3, 0.4]]))
    assert not prob[0].any() and end[0] == -1
    np.testing.assert_allclose(prob[1], [0, 0.9, 0, 0])  # past the threshold: a success
    assert end[1] == 1
    with pytest.raises(ValueError, match=r"goal_until: expected one of \['horizon', 'threshold'\], got 'grasp'"):
        GoalJudge(None, 1, 0, 1, until="grasp")  # type: ignore[arg-type]


def test_the_env_passes_frames_and_pays_the_goal_probability_at_the_horizon(models, tmp_path):
    wm, prop = models
    eps = _spatial(_episodes())
    cfg = ImaginationConfig(max_steps=8, reward="goal", goal_reader=_reader(tmp_path / "reader.pt"),
                            success_threshold=1.01, keyframes=KeyframeConfig(mode="start"))
    assert reads_simulator(cfg) is False and all(e.sim is None for e in eps)  # no labels needed
    venv = ImaginationVectorEnv(wm, prop, eps, 2, cfg)
    assert isinstance(venv.reward, GoalJudge)
    venv.reset(seed=0, options={"keyframes": [Keyframe(0, 0), Keyframe(2, 0)]})
    _, reward, terminated, truncated, _ = venv.step(np.zeros((2, 4, 7), np.float32))
    assert not reward.any() and not terminated.any() and not truncated.any()
    obs, reward, terminated, truncated, info = venv.step(np.zeros((2, 4, 7), np.float32))
    assert terminated.all() and not truncated.any() and not info["success"].any()
    # the reward is the reader's goal probability of the last imagined frame, the one the policy is shown
    expected = venv.reward.reader.goal_prob(obs["image"][:, 0], np.array([0, 2]))
    np.testing.assert_allclose(reward, expected, atol=0.02)  # the frame it read was not yet rounded to uint8
    assert ((reward > 0) & (reward < 1)).all()


def test_the_judge_refuses_what_its_reader_cannot_read(models, tmp_path):
    wm, prop = models
    eps = _spatial(_episodes())

    def env(path, starts=eps):
        return ImaginationVectorEnv(wm, prop, starts, 1, ImaginationConfig(reward="goal", goal_reader=path))

    with pytest.raises(ValueError, match=r"knows the goal predicates of libero_spatial tasks \[0, 1\], not of "
                                         r"tasks \[2\]"):
        env(_reader(tmp_path / "two.pt", tasks=(0, 1)))
    with pytest.raises(ValueError, match="reads view 'wrist', which the world model does not imagine"):
        env(_reader(tmp_path / "wrist.pt", view="wrist"))
    with pytest.raises(ValueError, match="reads 32 px frames, the world model's are 16 px"):
        env(_reader(tmp_path / "big.pt", size=32))
    with pytest.raises(ValueError, match=r"trained on libero_spatial, the start episodes are of \['libero_object'\]"):
        env(_reader(tmp_path / "r.pt"), [StartEpisode(e.frames, e.state, e.action, e.instruction, e.task_id, None,
                                                      "libero_object") for e in eps])
    with pytest.raises(FileNotFoundError, match="goal_reader: 'missing.pt' is not a file"):
        env("missing.pt")


def test_the_distance_score_pays_nearer_more_and_refuses_goals_without_a_distance(models, tmp_path):
    judge = GoalJudge(None, 1, 0, 1, score="distance", distance_scale=0.05)  # type: ignore[arg-type]

    class Reads:  # a reader that reads the distances given, the verdicts at 0.9
        def read(self, images, tasks):
            d = np.asarray(images, np.float64)[:, None]
            return np.full_like(d, 0.9), d

    judge.reader = Reads()  # type: ignore[assignment]
    np.testing.assert_allclose(judge.scores(np.array([0.0, 0.05, 0.5, -0.01]), np.zeros(4)),  # type: ignore[arg-type]
                               [1.0, np.exp(-1), np.exp(-10), 1.0])  # a negative read is at the target
    with pytest.raises(ValueError, match=r"goal_score: expected one of \['probability', 'distance', 'progress'\], "
                                         r"got 'near'"):
        GoalJudge(None, 1, 0, 1, score="near")  # type: ignore[arg-type]
    wm, prop = models
    torch.manual_seed(0)
    path = tmp_path / "open.pt"
    GoalReader(READER, "libero_spatial", {0: ["(on akita_black_bowl_1 plate_1)"], 1: ["(open drawer_1)"],
                                          2: ["(on akita_black_bowl_1 plate_1)"]}, H).save(path)
    with pytest.raises(ValueError, match=r"task 1's goal also has \['\(open drawer_1\)'\]"):
        ImaginationVectorEnv(wm, prop, _spatial(_episodes()), 1,
                             ImaginationConfig(reward="goal", goal_reader=str(path), goal_score="distance"))


def test_the_progress_score_pays_each_predicate_by_its_place_between_start_and_goal(models, tmp_path):
    """goal_score "progress": any kind of predicate (here a drawer's joint and a distance) is paid by where its read
    progress lies between the reader's anchors, multiplied over the goal; a reader without anchors is refused."""
    judge = GoalJudge(None, 1, 0, 1, score="progress")  # type: ignore[arg-type]
    reader = GoalReader(READER, "libero_goal", {0: ["(open drawer_1)", "(on bowl_1 plate_1)"]}, H)
    reader.progress_anchors = np.array([[[0.0, -0.16], [0.4, 0.04]]])

    class Reads:  # the reader's anchors, reading the progress given
        goal_fraction = reader.goal_fraction

        def read(self, images, tasks):
            return np.full((len(images), 2), 0.1), np.asarray(images, np.float64)

    judge.reader = Reads()  # type: ignore[assignment]
    got = judge.scores(np.array([[0.0, 0.4], [-0.08, 0.22], [-0.2, 0.0]]), np.zeros(3))  # type: ignore[arg-type]
    np.testing.assert_allclose(got, [0.0, 0.25, 1.0])
    wm, prop = models
    eps = [StartEpisode(e.frames, e.state, e.action, e.instruction, 0, None, "libero_goal") for e in _episodes()]
    torch.manual_seed(0)
    path = tmp_path / "plain.pt"
    reader.progress_anchors = None
    reader.save(path)
    with pytest.raises(ValueError, match="no progress anchors"):
        ImaginationVectorEnv(wm, prop, eps, 1, ImaginationConfig(reward="goal", goal_reader=str(path),
                                                                 goal_score="progress"))
    reader.progress_anchors = np.array([[[0.0, -0.16], [0.4, 0.04]]])
    reader.save(path)
    env = ImaginationVectorEnv(wm, prop, eps, 1, ImaginationConfig(reward="goal", goal_reader=str(path),
                                                                   goal_score="progress"))
    assert isinstance(env.reward, GoalJudge) and env.reward.score == "progress"
    loaded = env.reward.reader.progress_anchors  # loaded with the file
    assert loaded is not None and np.allclose(loaded, [[[0.0, -0.16], [0.4, 0.04]]])


def test_imagined_steps_end_each_episode_that_many_steps_after_its_keyframe(models, tmp_path):
    wm, prop = models
    cfg = ImaginationConfig(max_steps=40, imagined_steps=6, reward="goal", goal_reader=_reader(tmp_path / "r.pt"),
                            goal_score="distance", success_threshold=1.01, keyframes=KeyframeConfig(mode="start"))
    venv = ImaginationVectorEnv(wm, prop, _spatial(_episodes()), 2, cfg)
    venv.reset(seed=0, options={"keyframes": [Keyframe(0, 0), Keyframe(1, 3)]})
    _, reward, terminated, _, info = venv.step(np.zeros((2, 4, 7), np.float32))
    assert not terminated.any() and not reward.any()
    _, reward, terminated, truncated, info = venv.step(np.zeros((2, 4, 7), np.float32))
    assert terminated.all() and not truncated.any()
    assert info["t"].tolist() == [6, 9] and info["steps"].tolist() == [2, 2]  # 6 steps after each keyframe
    assert ((reward > 0) & (reward <= 1)).all()  # the distance score of the frame where each ended
    with pytest.raises(ValueError, match="imagined_steps: expected an integer >= 0"):
        ImaginationVectorEnv(wm, prop, _spatial(_episodes()), 1, ImaginationConfig(imagined_steps=-1))
