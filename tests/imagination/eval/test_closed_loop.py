"""Closed-loop check: AUCs on hand-computed cases, a real evaluation's jobs re-run in imagination with
each job's highest success probability, reuse of a finished run, and the script's outputs."""
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from imagination.eval.closed_loop import (
    ClosedLoopConfig,
    branch_records,
    closed_loop_records,
    decisive_step,
    outcome_separation,
    paired_separation,
    real_jobs_config,
)
from imagination.eval.evaluate import evaluate
from imagination.eval.jobs import EvalConfig
from robot_data.dataset import DatasetConfig, Episode, EpisodeWriter
from tests.episodes import grasping_episode
from world_models.denoiser import DenoiserConfig
from world_models.model import WorldModel, WorldModelConfig
from world_models.proprio import ProprioConfig, ProprioModel

H, K = 16, 4


def test_separation_perfect_and_none():
    sep = outcome_separation(np.array([0.9, 0.8, 0.2, 0.1]), np.array([1, 1, 0, 0]), np.zeros(4))
    assert sep.auc == 1.0 and sep.auc_within_task == 1.0
    assert sep.threshold is not None and sep.threshold.balanced_accuracy == 1.0 and 0.2 < sep.threshold.threshold < 0.8
    assert (sep.successes, sep.failures) == (2, 2)
    flipped = outcome_separation(np.array([0.1, 0.2, 0.8, 0.9]), np.array([1, 1, 0, 0]), np.zeros(4))
    assert flipped.auc == 0.0
    one_outcome = outcome_separation(np.array([0.3, 0.7]), np.array([1, 1]), np.zeros(2))
    assert math.isnan(one_outcome.auc) and math.isnan(one_outcome.auc_within_task) and one_outcome.threshold is None


def test_within_task_auc_ignores_task_difficulty():
    # task 0 is easy and scores high, task 1 is hard and scores low; within a task the head says nothing
    probs = np.array([0.9, 0.9, 0.9, 0.1, 0.1, 0.1])
    labels = np.array([1, 1, 0, 1, 0, 0], bool)
    tasks = np.array([0, 0, 0, 1, 1, 1])
    sep = outcome_separation(probs, labels, tasks)
    assert sep.auc == pytest.approx(6 / 9)  # pooled: (2 x 2.5 + 1 x 1) / 9 pairs
    assert sep.auc_within_task == pytest.approx(0.5)  # 4 tied pairs
    with pytest.raises(ValueError, match="1-D arrays"):
        outcome_separation(probs, labels[:5], tasks)


def test_decisive_step_is_before_the_first_grasp():
    actions = -np.ones((12, 7))
    actions[5:9, 6] = 1.0  # closes at 5, opens again at 9
    assert decisive_step(actions, 3) == 2
    assert decisive_step(actions, 10) == 0  # never before the episode's start
    assert decisive_step(-np.ones((12, 7)), 3) == 6  # never closes: half-way


def test_paired_separation_matches_jobs_by_task_init_and_seed():
    def ep(task, init, seed, **kw):
        return {"task_id": task, "init_state_id": init, "seed": seed, **kw}

    real = {"episodes": [ep(0, 0, 1, success=True), ep(0, 1, 2, success=False), ep(1, 0, 3, success=False),
                         ep(1, 1, 4, success=True), ep(1, 2, 5, success=True)]}
    # listed in another order; the last real job has no imagined twin and is left out
    imagined = {"episodes": [ep(1, 1, 4, max_success_prob=0.2), ep(0, 1, 2, max_success_prob=0.4),
                             ep(0, 0, 1, max_success_prob=0.9), ep(1, 0, 3, max_success_prob=0.6)]}
    sep = paired_separation(real, imagined)
    assert sep is not None
    assert (sep.successes, sep.failures) == (2, 2)
    assert sep.auc_within_task == pytest.approx(0.5)  # task 0 right (1 pair), task 1 wrong (1 pair)
    assert sep.auc == pytest.approx(2 / 4)  # 0.9 beats 0.4, 0.6; 0.2 beats neither
    no_probs = {"episodes": [ep(0, 0, 1, success=True)]}
    assert paired_separation(real, no_probs) is None



@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("closed_loop")
    rng = np.random.default_rng(0)
    with EpisodeWriter(root / "data", DatasetConfig(views=("agentview",), image_size=(H, H))) as w:
        for task, init in [(0, 0), (0, 1), (1, 0), (1, 1)]:
            T = 12
            w.append(Episode(
                frames={"agentview": rng.integers(0, 255, (T, H, H, 3), dtype=np.uint8)},
                state=rng.normal(size=(T, 8)).astype(np.float32), action=rng.uniform(-1, 1, (T, 7)).astype(np.float32),
                reward=np.zeros(T, np.float32), success=np.zeros(T, bool), instruction=f"task {task}",
                suite="libero_spatial", task_id=task, source="expert", perturbation="", init_state_id=init))
    torch.manual_seed(0)
    d = DenoiserConfig(image_size=H, channels=3, context_frames=2, chunk_len=K, block_out_channels=[8, 16],
                       norm_num_groups=4)
    wm = WorldModel(WorldModelConfig(views=["agentview"], denoiser=d))
    with torch.no_grad():  # a head that always says logit 2: every frame's success probability is sigmoid(2)
        wm.head.out.weight.zero_()
        wm.head.out.bias.fill_(2.0)
    wm.save(root / "wm.pt")
    ProprioModel(ProprioConfig(chunk_len=K, hidden=16, layers=1)).save(root / "proprio.pt")
    from policies.vla import VLAConfig, VLAPolicy

    VLAPolicy(VLAConfig(views=["agentview"], image_size=H, chunk_len=K, conv_channels=[8, 8])).save(root / "policy.pt")
    # A "real" evaluation of the same jobs: evaluate's records with outcomes we choose, as if from LIBERO.
    real = evaluate(EvalConfig(checkpoint=str(root / "policy.pt"), env="imagination", tasks=[0, 1], episodes_per_task=2,
                               max_steps=8, videos=0, world_model=str(root / "wm.pt"), start_data=str(root / "data"),
                               proprio=str(root / "proprio.pt"), out_dir=str(root / "fake_real")), progress=False)
    real["env"] = real["config"]["env"] = "libero_spatial"
    for e, outcome in zip(real["episodes"], [True, False, False, False]):
        e["success"] = outcome
    (root / "real.json").write_text(json.dumps(real))
    return root


def _cl(root) -> ClosedLoopConfig:
    return ClosedLoopConfig(world_model=str(root / "wm.pt"), start_data=str(root / "data"),
                            proprio=str(root / "proprio.pt"), max_steps=8, num_envs=3)


@pytest.mark.libero
def test_jobs_rerun_in_imagination_with_their_real_outcome(setup):
    real = json.loads((setup / "real.json").read_text())
    out = setup / "cl"
    records = closed_loop_records(real, str(setup / "policy.pt"), _cl(setup), str(out), progress=False)
    assert [(r["task_id"], r["init_state_id"]) for r in records] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [r["real_success"] for r in records] == [True, False, False, False]
    # the head never ends an episode (threshold inf) and reports its constant probability
    assert all(r["imagined_steps"] == 8 for r in records)
    np.testing.assert_allclose([r["max_success_prob"] for r in records], 1 / (1 + math.exp(-2.0)), atol=1e-3)
    # a finished run with the same settings is reused, not re-run
    stamp = (out / "results.json").stat().st_mtime_ns
    closed_loop_records(real, str(setup / "policy.pt"), _cl(setup), str(out), progress=False)
    assert (out / "results.json").stat().st_mtime_ns == stamp


@pytest.mark.libero
def test_bad_real_results_are_refused(setup):
    real = json.loads((setup / "real.json").read_text())
    with pytest.raises(ValueError, match="results.json"):
        real_jobs_config({"episodes": []}, "p.pt", _cl(setup), "out")
    imagined = {**real, "config": {**real["config"], "env": "imagination"}}
    with pytest.raises(ValueError, match="LIBERO suite"):
        real_jobs_config(imagined, "p.pt", _cl(setup), "out")
    missing = {**real, "episodes": real["episodes"][1:]}
    with pytest.raises(ValueError, match="no real episode for task 0, init state 0"):
        closed_loop_records(missing, str(setup / "policy.pt"), _cl(setup), str(setup / "cl_missing"), progress=False)


@pytest.mark.libero
def test_imagined_jobs_render_at_the_real_evaluations_size(setup):
    # a 128 px world model judging a 64 px policy: the real episodes were rendered at 128 (the policy resizes
    # what it reads), and their imagined re-runs must hand it frames of the same size
    real = json.loads((setup / "real.json").read_text())
    assert real_jobs_config(real, "p.pt", _cl(setup), "out").image_size == real["config"].get("image_size", 0)
    big = {**real, "config": {**real["config"], "image_size": 128}}
    assert real_jobs_config(big, "p.pt", _cl(setup), "out").image_size == 128


@pytest.mark.libero
def test_script_writes_table_and_plot(setup, capsys):
    from imagination.eval.closed_loop_check import CheckConfig, check_closed_loop

    cfg = CheckConfig(**vars(_cl(setup)), policies=[str(setup / "policy.pt")] * 2,
                      real_results=[str(setup / "real.json")] * 2, names=["a", "b"], out_dir=str(setup / "check"))
    result = check_closed_loop(cfg)
    assert set(result["separation"]) == {"a", "b", "all"}
    assert result["separation"]["all"]["jobs"] == 8 and result["separation"]["all"]["successes"] == 2
    assert result["separation"]["all"]["auc"] == pytest.approx(0.5)  # one constant probability: all ties
    assert result["separation"]["a"]["imagined_successes"] == 4  # sigmoid(2) passes the default 0.5
    assert (setup / "check" / "closed_loop.png").stat().st_size > 0
    saved = json.loads((setup / "check" / "closed_loop.json").read_text())
    assert len(saved["jobs"]) == 8 and {j["policy"] for j in saved["jobs"]} == {"a", "b"}
    assert saved["provenance"]["jobs"] == [[j["task_id"], j["init_state_id"], j["seed"]] for j in saved["jobs"]]
    assert "AUC within task" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="one results.json per policy"):
        check_closed_loop(CheckConfig(**vars(_cl(setup)), policies=[str(setup / "policy.pt")], real_results=[]))


def _policy_data(root, policy_path: str):
    """Recorded real episodes: three of `policy_path` (grasp at step 6) and one of another policy."""
    rng = np.random.default_rng(1)
    with EpisodeWriter(root, DatasetConfig(views=("agentview",), image_size=(H, H))) as w:
        for task, init, ok, who in [(0, 0, True, policy_path), (0, 1, False, policy_path), (1, 0, False, policy_path),
                                    (1, 1, True, "other.pt")]:
            w.append(grasping_episode(rng, 10, H, task, ok, "policy", init, {"policy": who}))


def _random_reader(path, seed: int) -> None:
    """An untrained goal reader of both tasks: its verdicts follow the imagined frames, unlike the fixed head."""
    from world_models.goal_reader import GoalReader, GoalReaderConfig

    torch.manual_seed(seed)
    GoalReader(GoalReaderConfig(channels=[8, 8], keypoints=8), "libero_spatial",
               {t: ["(on akita_black_bowl_1 plate_1)"] for t in (0, 1)}, H).save(path)


@pytest.mark.libero
def test_branches_start_from_the_policy_own_rollouts(setup):
    policy = str(setup / "policy.pt")
    _policy_data(setup / "policy_data", policy)
    cfg = ClosedLoopConfig(world_model=str(setup / "wm.pt"), proprio=str(setup / "proprio.pt"), max_steps=12,
                           num_envs=2)
    records = branch_records(str(setup / "policy_data"), policy, cfg, lead_steps=4, progress=False)
    assert ([(r["task_id"], r["init_state_id"], r["real_success"]) for r in records]
            == [(0, 0, True), (0, 1, False), (1, 0, False)])
    assert all(r["start_t"] == 2 for r in records)  # 4 steps before the grasp at step 6
    np.testing.assert_allclose([r["max_success_prob"] for r in records], 1 / (1 + math.exp(-2.0)), atol=1e-3)
    fitted = ClosedLoopConfig(**{**vars(cfg), "proprio": ""})  # no proprio model given: one is fitted on the data
    assert len(branch_records(str(setup / "policy_data"), policy, fitted, lead_steps=4, progress=False)) == 3
    with pytest.raises(ValueError, match="no recorded real episode of nobody.pt"):
        branch_records(str(setup / "policy_data"), "nobody.pt", cfg, progress=False)
    only = branch_records(str(setup / "policy_data"), policy, cfg, lead_steps=4, progress=False, tasks=[1])
    assert [(r["task_id"], r["init_state_id"]) for r in only] == [(1, 0)]
    with pytest.raises(ValueError, match=r"branch_tasks: .* no recorded episode of .* on task\(s\) \[5\]"):
        branch_records(str(setup / "policy_data"), policy, cfg, progress=False, tasks=[1, 5])

    from imagination.eval.closed_loop_check import CheckConfig, check_closed_loop

    result = check_closed_loop(CheckConfig(**vars(cfg), policies=[policy],
                                           branch_data=str(setup / "policy_data"), lead_steps=4,
                                           out_dir=str(setup / "branch_check")))
    assert result["separation"]["all"]["jobs"] == 3 and result["separation"]["all"]["successes"] == 1
    # the fixed head's verdict everywhere, so the mean is sigmoid(2) too
    assert result["separation"]["all"]["mean_verdict"] == pytest.approx(1 / (1 + math.exp(-2.0)), abs=1e-3)
    task1 = check_closed_loop(CheckConfig(**vars(cfg), policies=[policy], branch_data=str(setup / "policy_data"),
                                          branch_tasks=[1], lead_steps=4, out_dir=str(setup / "branch_check_t1")))
    assert task1["separation"]["all"]["jobs"] == 1 and {r["task_id"] for r in task1["jobs"]} == {1}
    with pytest.raises(SystemExit, match="branch_tasks: only with branch_data"):
        check_closed_loop(CheckConfig(**{**vars(cfg), "start_data": str(setup / "data")}, policies=[policy],
                                      real_results=[str(setup / "real.json")], branch_tasks=[1]))
    with pytest.raises(SystemExit, match="real_results: not used with branch_data"):
        check_closed_loop(CheckConfig(**vars(cfg), policies=[policy], branch_data=str(setup / "policy_data"),
                                      real_results=[str(setup / "real.json")]))


def _goal_branches(setup, name: str, reader_seed: int, num_envs: int) -> tuple[str, Path, ClosedLoopConfig]:
    """The policy, a dataset of its recorded episodes (`name`) and a goal-judged branch config over a 4-step window
    with a random goal reader (`reader_seed`)."""
    policy = str(setup / "policy.pt")
    data = setup / name
    _policy_data(data, policy)
    _random_reader(setup / f"reader_{name}.pt", seed=reader_seed)
    cfg = ClosedLoopConfig(world_model=str(setup / "wm.pt"), proprio=str(setup / "proprio.pt"), max_steps=12,
                           num_envs=num_envs, reward="goal", goal_reader=str(setup / f"reader_{name}.pt"),
                           imagined_steps=4)
    return policy, data, cfg


@pytest.mark.libero
def test_branches_judged_by_a_goal_reader_over_a_window(setup):
    """reward "goal": each branch is the goal reader's verdict on its last imagined frame, read against 0.5, and
    `imagined_steps` ends every branch that many steps after its start (the window recipes' check)."""
    from imagination.eval.closed_loop_check import CheckConfig, check_closed_loop

    policy, data, cfg = _goal_branches(setup, "policy_data_goal", reader_seed=0, num_envs=2)
    records = branch_records(str(data), policy, cfg, lead_steps=4, progress=False)
    assert [(r["start_t"], r["end_t"]) for r in records] == [(2, 6)] * 3  # one chunk of 4 from step 2
    probs = np.array([r["max_success_prob"] for r in records])
    assert ((probs >= 0) & (probs <= 1)).all()
    assert not np.allclose(probs, 1 / (1 + math.exp(-2.0)), atol=1e-3)  # the reader judged, not the head
    distance = ClosedLoopConfig(**{**vars(cfg), "goal_score": "distance"})  # the score reaches the judge
    by_distance = [r["max_success_prob"] for r in branch_records(str(data), policy, distance, lead_steps=4,
                                                                 progress=False)]
    assert not np.allclose(by_distance, probs)
    whole = ClosedLoopConfig(**{**vars(cfg), "imagined_steps": 0})
    assert [r["end_t"] for r in branch_records(str(data), policy, whole, lead_steps=4, progress=False)] == [12] * 3

    result = check_closed_loop(CheckConfig(**vars(cfg), policies=[policy], branch_data=str(data), lead_steps=4,
                                           out_dir=str(setup / "goal_check")))
    assert result["success_threshold"] == 0.5
    assert result["separation"]["all"]["imagined_successes"] == int((probs >= 0.5).sum())
    with pytest.raises(SystemExit, match="goal_reader: reward goal needs a goal reader file"):
        check_closed_loop(CheckConfig(**{**vars(cfg), "goal_reader": ""}, policies=[policy], branch_data=str(data)))
    with pytest.raises(SystemExit, match="goal_score: 'distance' only with branch_data"):
        check_closed_loop(CheckConfig(**{**vars(cfg), "goal_score": "distance", "imagined_steps": 0},
                                      policies=[policy], real_results=[str(setup / "real.json")]))
    with pytest.raises(SystemExit, match="imagined_steps: expected an integer >= 0, and only with branch_data"):
        check_closed_loop(CheckConfig(**vars(cfg), policies=[policy], real_results=[str(setup / "real.json")]))


@pytest.mark.libero
def test_recorded_branches_replay_the_episodes_own_actions(setup, capsys, monkeypatch):
    """branch_actions "recorded": the same starts, played with each episode's recorded actions (the open-loop control);
    an unknown mode is refused by name."""
    import imagination.eval.closed_loop as closed_loop
    from imagination.episodes import load_start_episodes
    from imagination.eval.closed_loop_check import CheckConfig, check_closed_loop
    from imagination.imagine import RecordedActions

    policy = str(setup / "policy.pt")
    data = setup / "policy_data_recorded"
    _policy_data(data, policy)
    cfg = ClosedLoopConfig(world_model=str(setup / "wm.pt"), proprio=str(setup / "proprio.pt"), max_steps=12,
                           num_envs=3)
    seen = []

    class Spy(RecordedActions):
        def __call__(self, obs):
            out = super().__call__(obs)
            seen.append(np.array(out))
            return out

    monkeypatch.setattr(closed_loop, "RecordedActions", Spy)
    records = branch_records(str(data), policy, cfg, lead_steps=4, progress=False, actions="recorded")
    episodes = load_start_episodes(str(data), ["agentview"])
    first = np.stack([episodes[r["episode"]].action[2:2 + K] for r in records])
    np.testing.assert_allclose(seen[0], first, atol=1e-6)  # the first chunk is each episode's own, from step 2
    with pytest.raises(ValueError, match=r"branch_actions: expected one of \['policy', 'recorded'\], got 'mine'"):
        branch_records(str(data), policy, cfg, progress=False, actions="mine")
    check_closed_loop(CheckConfig(**vars(cfg), policies=[policy], branch_data=str(data), lead_steps=4,
                                  branch_actions="recorded", out_dir=str(setup / "recorded_check")))
    assert "open loop (recorded actions) from 4 steps before the first grasp" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="branch_actions: expected one of"):
        check_closed_loop(CheckConfig(**vars(cfg), policies=[policy], branch_data=str(data), branch_actions="mine"))


@pytest.mark.libero
def test_a_policy_branches_from_another_policys_recordings(setup, tmp_path):
    """recorded_by: a policy without real rollouts of its own (the start adapted to imagined frames) acts from its
    start's recorded episodes; one recorder per policy, and only with branch_data."""
    import shutil

    from imagination.eval.closed_loop_check import CheckConfig, check_closed_loop

    policy = str(setup / "policy.pt")
    data = setup / "policy_data_by"
    _policy_data(data, policy)
    adapted = str(shutil.copy(policy, tmp_path / "adapted.pt"))
    cfg = ClosedLoopConfig(world_model=str(setup / "wm.pt"), proprio=str(setup / "proprio.pt"), max_steps=12,
                           num_envs=3)
    with pytest.raises(ValueError, match="no recorded real episode of .*adapted.pt"):
        branch_records(str(data), adapted, cfg, lead_steps=4, progress=False)
    records = branch_records(str(data), adapted, cfg, lead_steps=4, progress=False, recorded_by=policy)
    assert [(r["task_id"], r["init_state_id"]) for r in records] == [(0, 0), (0, 1), (1, 0)]
    result = check_closed_loop(CheckConfig(**vars(cfg), policies=[adapted], recorded_by=[policy],
                                           branch_data=str(data), lead_steps=4, out_dir=str(tmp_path / "check")))
    assert result["separation"]["all"]["jobs"] == 3
    with pytest.raises(SystemExit, match="recorded_by: expected one recording policy per policy"):
        check_closed_loop(CheckConfig(**vars(cfg), policies=[adapted, policy], recorded_by=[policy],
                                      branch_data=str(data)))
    with pytest.raises(SystemExit, match="recorded_by: only with branch_data"):
        check_closed_loop(CheckConfig(**vars(cfg), policies=[adapted], recorded_by=[policy],
                                      real_results=[str(setup / "real.json")]))


def test_draw_spread_counts_the_starts_whose_draws_split_on_the_threshold():
    from imagination.eval.closed_loop_check import draw_spread

    spread = draw_spread(np.array([[0.9, 0.2, 0.8], [0.1, 0.1, 0.1], [0.6, 0.7, 0.5]]), 0.5)
    assert spread["starts"] == 3 and spread["split"] == 1  # only episode 0 has draws on both sides of 0.5
    assert spread["mean_range"] == pytest.approx((0.7 + 0.0 + 0.2) / 3)


@pytest.mark.libero
def test_draws_imagine_each_start_several_times_with_the_exploration_noise_given(setup, capsys, monkeypatch):
    """draws: every start imagined `draws` times, consecutively, the policy sampling with noise_log_std as RL
    explores; the check scores each start by its draws' mean and says how many starts split on the threshold."""
    import imagination.eval.closed_loop as closed_loop
    from imagination.eval.closed_loop_check import CheckConfig, check_closed_loop

    policy, data, cfg = _goal_branches(setup, "policy_data_draws", reader_seed=1, num_envs=4)
    noise = []
    real_sample = closed_loop.policy_sample

    def spy(policy_obj, generator=None):
        noise.append(policy_obj.noise_log_std().detach().clone())
        return real_sample(policy_obj, generator)

    monkeypatch.setattr(closed_loop, "policy_sample", spy)
    records = branch_records(str(data), policy, cfg, lead_steps=4, progress=False, draws=3, noise_log_std=-0.5)
    assert [(r["init_state_id"], r["task_id"], r["draw"]) for r in records] == [
        (i, t, k) for i, t in [(0, 0), (1, 0), (0, 1)] for k in range(3)]
    assert len(noise) == 1 and torch.allclose(noise[0], torch.full_like(noise[0], -0.5))
    verdicts = np.array([r["max_success_prob"] for r in records]).reshape(3, 3)
    assert not np.allclose(verdicts, verdicts[:, :1])  # the draws of a start differ
    assert len(branch_records(str(data), policy, cfg, lead_steps=4, progress=False)) == 3  # one draw: deterministic
    assert len(noise) == 1

    result = check_closed_loop(CheckConfig(**vars(cfg), policies=[policy], branch_data=str(data), lead_steps=4,
                                           draws=3, noise_log_std=-0.5, out_dir=str(setup / "draws_check")))
    assert result["separation"]["all"]["jobs"] == 3 and result["separation"]["draws"]["starts"] == 3
    assert len(result["jobs"]) == 9
    assert "3 draws of each start" in capsys.readouterr().out
    with pytest.raises(ValueError, match="draws: expected an integer >= 1, got 0"):
        branch_records(str(data), policy, cfg, progress=False, draws=0)
    with pytest.raises(SystemExit, match="draws: expected an integer >= 1, and > 1 only with branch_actions=policy"):
        check_closed_loop(CheckConfig(**vars(cfg), policies=[policy], branch_data=str(data), draws=2,
                                      branch_actions="recorded"))
    with pytest.raises(ValueError, match="noise_log_std: the policy's exploration noise, so only with branch_action"):
        branch_records(str(data), policy, cfg, progress=False, actions="recorded", noise_log_std=-1.0)
    with pytest.raises(SystemExit, match="noise_log_std: the policy's exploration noise, so only with branch_action"):
        check_closed_loop(CheckConfig(**vars(cfg), policies=[policy], branch_data=str(data), noise_log_std=-1.0,
                                      branch_actions="recorded"))
    with pytest.raises(SystemExit, match="draws: only with branch_data"):
        check_closed_loop(CheckConfig(**{**vars(cfg), "imagined_steps": 0}, policies=[policy], draws=2,
                                      real_results=[str(setup / "real.json")]))


@pytest.mark.libero
def test_common_noise_gives_one_starts_draws_the_world_models_noise_as_grpo_groups_share_it(setup):
    """common_noise: a start's draws share the world model's sampling noise (noise_group = draws), so with the policy
    acting deterministically they imagine the same window; each with its own noise, they do not. Batches hold whole
    groups (num_envs 4 with 3 draws runs 3 at a time)."""
    from imagination.eval.closed_loop_check import CheckConfig, check_closed_loop

    policy, data, cfg = _goal_branches(setup, "policy_data_crn", reader_seed=2, num_envs=4)

    def verdicts(common: bool) -> np.ndarray:
        rows = branch_records(str(data), policy, cfg, lead_steps=4, progress=False, draws=3, common_noise=common)
        return np.array([r["max_success_prob"] for r in rows]).reshape(3, 3)

    shared, own = verdicts(True), verdicts(False)
    assert np.allclose(shared, shared[:, :1])  # one noise, one deterministic policy: one window per start
    assert not np.allclose(own, own[:, :1])
    with pytest.raises(ValueError, match="common_noise: needs draws >= 2"):
        branch_records(str(data), policy, cfg, progress=False, draws=1, common_noise=True)
    with pytest.raises(SystemExit, match="common_noise: shares the noise among one start's draws"):
        check_closed_loop(CheckConfig(**vars(cfg), policies=[policy], branch_data=str(data), common_noise=True))
    with pytest.raises(ValueError, match="action_guidance: 2.0 needs a world model trained with"):
        branch_records(str(data), policy, replace(cfg, action_guidance=2.0), progress=False)
