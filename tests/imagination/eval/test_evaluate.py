"""Policy evaluation loop: scheduling, seeds, results, videos (fake env), and real LIBERO."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import imagination.eval.evaluate as ev
from imagination.eval.evaluate import evaluate, plan_jobs, wilson_interval
from imagination.eval.jobs import EvalConfig
from policies.base import Policy, PolicyConfig, batch_obs
from robot_data.dataset import decode_video


class SignPolicy(Policy):
    """Pushes +0.5 on even task ids (read from state[0]) and -0.5 on odd ones."""

    def predict_action_chunk(self, obs):
        state = batch_obs(obs)["state"]
        sign = torch.where(state[:, 0] % 2 == 0, 0.5, -0.5)
        return sign[:, None, None].expand(-1, self.chunk_len, 7).clone()

    def evaluate(self, obs, actions, per_dim=False):
        b = batch_obs(obs)["state"].shape[0]
        return torch.zeros(b), torch.zeros(b), torch.zeros(b)

    def sample(self, obs, generator=None):
        a = self.predict_action_chunk(obs)
        return a, torch.zeros(a.shape[0]), torch.zeros(a.shape[0])


class FakeEnv:
    """Job succeeds after (task_id + 2) chunks if actions[..., 0] > 0, else truncates after 4 chunks."""

    instances: list[FakeEnv] = []

    def __init__(self, cfg: EvalConfig, spec: ev.EnvSpec, first_tasks: list[int]):
        self.num_envs, self.spec = len(first_tasks), spec
        self.jobs: list = [None] * self.num_envs
        self.chunks = [0] * self.num_envs
        self.resets: list[int] = []
        self.action_shapes: set = set()
        self.closed = False
        FakeEnv.instances.append(self)

    def num_tasks(self) -> int:
        return 3

    def num_init_states(self, task_id: int) -> int:
        return 5

    def instruction(self, task_id: int) -> str:
        return f"do task {task_id}"

    def _obs(self) -> dict:
        B, V, S = self.num_envs, len(self.spec.views), self.spec.image_size
        image = np.stack([np.full((V, S, S, 3), j.index * 10, np.uint8) for j in self.jobs])
        state = np.zeros((B, 8), np.float32)
        state[:, 0] = [j.task_id for j in self.jobs]
        return {"image": image, "state": state, "instruction": tuple(f"do task {j.task_id}" for j in self.jobs)}

    def reset_envs(self, jobs):
        for i, job in enumerate(jobs):
            if job is not None:
                self.jobs[i], self.chunks[i] = job, 0
                self.resets.append(job.index)
        return self._obs()

    def step(self, actions):
        self.action_shapes.add(actions.shape)
        term, trunc = np.zeros(self.num_envs, bool), np.zeros(self.num_envs, bool)
        for i, job in enumerate(self.jobs):
            self.chunks[i] += 1
            term[i] = actions[i, :, 0].mean() > 0 and self.chunks[i] >= job.task_id + 2
            trunc[i] = not term[i] and self.chunks[i] >= 4
        K = actions.shape[1]
        frames = [np.repeat(o[None], K, 0) for o in self._obs()["image"]]
        info = {"t": np.array(self.chunks) * K, "frames": frames}
        return self._obs(), term.astype(np.float64), term, trunc, info

    def close(self):
        self.closed = True


@pytest.fixture
def fake():
    FakeEnv.instances.clear()
    return FakeEnv


def run(tmp_path, num_envs=2, write=True, **kw) -> dict:
    policy = SignPolicy(PolicyConfig(chunk_len=4))
    cfg = EvalConfig(env="fake", tasks=[0, 1, 2], episodes_per_task=3, num_envs=num_envs, videos=2, image_size=8,
                     out_dir=str(tmp_path / f"eval{num_envs}"), **kw)
    return evaluate(cfg, policy=policy, progress=False, env_factory=FakeEnv, write=write)


def test_wilson_interval_known_values():
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)


def test_write_false_leaves_results_json_to_the_caller(fake, tmp_path):
    """evaluate_and_record adds its counts and writes results.json once, after its dataset is committed."""
    result = run(tmp_path, write=False)
    assert result["overall"]["episodes"] == 9
    assert not (tmp_path / "eval2" / "results.json").exists()


def test_plan_seeds_depend_on_task_and_episode_only():
    cfg = EvalConfig(episodes_per_task=7, init_state_offset=3, seed=1)
    both, one = plan_jobs(cfg, [0, 1], lambda t: 5), plan_jobs(cfg, [1], lambda t: 5)
    assert [j.seed for j in both[7:]] == [j.seed for j in one]
    assert [j.init_state_id for j in one] == [3, 4, 0, 1, 2, 3, 4]  # wraps around the init states
    assert len({j.seed for j in both}) == 14 and [j.index for j in both] == list(range(14))
    assert plan_jobs(EvalConfig(episodes_per_task=7, seed=2), [1], lambda t: 5)[0].seed != one[0].seed


def test_plan_on_drawn_layouts_never_wraps():
    from envs.libero_suites import DRAWN_LAYOUT_BASE

    cfg = EvalConfig(episodes_per_task=7, init_state_offset=DRAWN_LAYOUT_BASE + 40, seed=1)
    ids = [j.init_state_id for j in plan_jobs(cfg, [1], lambda t: 5)]
    assert ids == [DRAWN_LAYOUT_BASE + 40 + j for j in range(7)]  # layouts 40-46, however few init states


def test_success_per_task_records_and_videos(fake, tmp_path):
    result = run(tmp_path)
    assert [r["index"] for r in result["episodes"]] == list(range(9))
    per_task = {t: (v["successes"], v["episodes"]) for t, v in result["per_task"].items()}
    assert per_task == {"0": (3, 3), "1": (0, 3), "2": (3, 3)}
    assert result["per_task"]["0"]["ci95"] == pytest.approx(list(wilson_interval(3, 3)))
    assert result["overall"]["successes"] == 6 and result["per_task"]["1"]["instruction"] == "do task 1"
    assert [r["steps"] for r in result["episodes"]] == [8] * 3 + [16] * 3 + [16] * 3
    env = fake.instances[0]
    assert env.closed and env.action_shapes == {(2, 4, 7)}
    assert set(range(9)) <= set(env.resets)
    on_disk = json.loads((tmp_path / "eval2" / "results.json").read_text())
    assert on_disk["overall"] == result["overall"] and on_disk["config"]["env"] == "fake"
    # the reproducibility record: versions, the seed and every job as [task, init state, seed]
    record = on_disk["provenance"]
    assert record["seed"] == on_disk["config"]["seed"] and record["versions"]["torch"] == torch.__version__
    assert record["jobs"] == [[r["task_id"], r["init_state_id"], r["seed"]] for r in result["episodes"]]
    videos = sorted((tmp_path / "eval2" / "videos").glob("*.mp4"))
    assert [v.name for v in videos] == ["ep000_task0_init0_success.mp4", "ep001_task0_init1_success.mp4"]
    frames = decode_video(videos[1])
    assert frames.shape == (1 + 8, 16, 32, 3)  # reset frame + 2 chunks of 4; two views side by side, 2x
    assert abs(int(frames[0].mean()) - 10) <= 2  # episode 1's frames (value 10), not another episode's


def test_results_do_not_depend_on_parallelism(fake, tmp_path):
    key = lambda r: [(e["seed"], e["success"], e["steps"]) for e in r["episodes"]]  # noqa: E731
    assert key(run(tmp_path, num_envs=1)) == key(run(tmp_path, num_envs=2)) == key(run(tmp_path, num_envs=4))


def test_action_steps_shortens_the_executed_chunk(fake, tmp_path):
    result = run(tmp_path, action_steps=2)
    assert fake.instances[0].action_shapes == {(2, 2, 7)}
    assert [r["steps"] for r in result["episodes"][:3]] == [4, 4, 4]


def test_bad_configs_raise(fake, tmp_path):
    with pytest.raises(ValueError, match="world_model"):
        evaluate(EvalConfig(env="imagination", out_dir=str(tmp_path)), policy=SignPolicy(PolicyConfig()))
    with pytest.raises(ValueError, match=r"task ids in \[0, 2\]"):
        evaluate(EvalConfig(env="fake", tasks=[5], out_dir=str(tmp_path)), policy=SignPolicy(PolicyConfig()),
                 progress=False, env_factory=FakeEnv)
    assert fake.instances[-1].closed  # the env is closed on errors too
    with pytest.raises(ValueError, match="action_steps"):
        run(tmp_path, action_steps=9)
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        evaluate(EvalConfig(env="fake", checkpoint=str(tmp_path / "missing.pt"), out_dir=str(tmp_path)),
                 env_factory=FakeEnv)


class SpyPolicy(SignPolicy):
    """SignPolicy that keeps every image batch it is shown."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.seen: list[np.ndarray] = []

    def predict_action_chunk(self, obs):
        self.seen.append(np.array(obs["image"]))
        return super().predict_action_chunk(obs)


def _seen_per_job(tmp_path, num_envs: int, **kw) -> tuple[dict[int, list[np.ndarray]], dict]:
    """The images the policy saw, per job (FakeEnv renders job j's images at value 10 j), and the result."""
    policy = SpyPolicy(PolicyConfig(chunk_len=4))
    cfg = EvalConfig(env="fake", tasks=[0, 2], episodes_per_task=2, num_envs=num_envs, videos=1, image_size=8,
                     out_dir=str(tmp_path / f"noise{num_envs}_{kw}"), **kw)
    result = evaluate(cfg, policy=policy, progress=False, env_factory=FakeEnv)
    per_job: dict[int, list[np.ndarray]] = {}
    for batch in policy.seen:
        for image in batch:
            per_job.setdefault(int(round(float(np.median(image)) / 10)), []).append(image)
    return per_job, result


def test_obs_noise_reaches_the_policy_only_and_is_drawn_per_job(fake, tmp_path):
    clean, _ = _seen_per_job(tmp_path, 2)
    assert all((im == 10 * j).all() for j, ims in clean.items() for im in ims)  # no noise: the rendered images
    noisy, result = _seen_per_job(tmp_path, 2, obs_noise=2.0, obs_noise_seed=1)
    assert noisy.keys() == clean.keys() and all(len(noisy[j]) == len(clean[j]) for j in clean)
    diffs = np.concatenate([(im.astype(float) - 10 * j).ravel() for j, ims in noisy.items() for im in ims])
    assert 1.7 < diffs.std() < 2.3 and abs(diffs.mean()) < 0.3  # N(0, 2), rounded (job 0 is clipped at 0)
    # the video keeps the rendered frames
    video = decode_video(Path(result["episodes"][0]["video"]))
    assert abs(float(video[1:].mean()) - 0.0) < 2
    # a job's noise does not depend on how many envs ran; another noise seed draws other noise
    alone, _ = _seen_per_job(tmp_path, 1, obs_noise=2.0, obs_noise_seed=1)
    assert all(np.array_equal(a, b) for j in noisy for a, b in zip(noisy[j], alone[j]))
    other, _ = _seen_per_job(tmp_path, 2, obs_noise=2.0, obs_noise_seed=2)
    assert not np.array_equal(other[1][0], noisy[1][0])
    with pytest.raises(ValueError, match="obs_noise: expected a noise std >= 0"):
        _seen_per_job(tmp_path, 2, obs_noise=-1.0)


def test_a_finished_evaluation_stands_for_the_same_config_only(fake, tmp_path):
    import os
    from dataclasses import replace

    from imagination.eval.evaluate import finished_results

    ckpt = tmp_path / "policy.pt"
    ckpt.write_bytes(b"a policy")
    os.utime(ckpt, (0, 0))
    cfg = EvalConfig(env="fake", checkpoint=str(ckpt), tasks=[0], episodes_per_task=2, num_envs=1, videos=0,
                     image_size=8, out_dir=str(tmp_path / "eval"))
    assert finished_results(cfg) is None  # nothing written yet
    result = evaluate(cfg, policy=SignPolicy(PolicyConfig(chunk_len=4)), progress=False, env_factory=FakeEnv)
    finished = finished_results(cfg)
    assert finished is not None and finished["episodes"] == result["episodes"]
    for change in ({"seed": 1}, {"tasks": [1]}, {"obs_noise": 2.0}, {"start_suite": "libero_object"},
                   {"image_size": 16}):
        assert finished_results(replace(cfg, **change)) is None, change
    assert finished_results(replace(cfg, videos=3, num_envs=2)) is not None  # how it ran is not what it measured
    later = (tmp_path / "eval" / "results.json").stat().st_mtime + 10
    os.utime(ckpt, (later, later))  # the checkpoint changed after the evaluation
    assert finished_results(cfg) is None
    assert finished_results(replace(cfg, checkpoint="random")) is None


def test_unknown_env_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="imagination"):
        evaluate(EvalConfig(env="mars", out_dir=str(tmp_path)), policy=SignPolicy(PolicyConfig()), progress=False)


@pytest.mark.slow
@pytest.mark.libero
def test_real_libero_masked_resets_follow_the_plan(tmp_path):
    """3 episodes on 2 envs: the third starts by a masked reset while the other env keeps running."""
    from envs.libero_env import LiberoEnv, LiberoEnvConfig
    from imagination.eval.real_rollouts import evaluate_policy

    cfg = EvalConfig(checkpoint="random", env="libero_spatial", tasks=[1], episodes_per_task=3, num_envs=2,
                     max_steps=16, action_steps=8, videos=3, out_dir=str(tmp_path / "eval"))
    result = evaluate_policy(cfg)
    eps = result["episodes"]
    assert ([(e["init_state_id"], e["steps"], e["success"]) for e in eps]
            == [(0, 16, False), (1, 16, False), (2, 16, False)])
    assert result["timing"]["env_steps"] == 48 and result["per_task"]["1"]["ci95"][1] < 0.6
    # 16 random steps never pick the bowl up: every failure is "never lifted" (envs.outcome)
    assert [e["outcome"] for e in eps] == ["never lifted"] * 3 and all(e["object_lift_m"] < 0.03 for e in eps)
    assert all(e["target_distance_m"] > 0.05 and "grasp_distance_m" in e for e in eps)
    assert result["per_task"]["1"]["failures"] == {"never lifted": 3} == result["overall"]["failures"]
    first = decode_video(Path(eps[2]["video"]))[0, ::2, ::2].astype(np.float32)  # undo the 2x
    env = LiberoEnv(LiberoEnvConfig(suite="libero_spatial", task_id=1, fast_render=True))
    try:
        same = env.reset(seed=eps[2]["seed"], options={"init_state_id": 2})[0]["image"]
        other = env.reset(seed=eps[2]["seed"], options={"init_state_id": 0})[0]["image"]
    finally:
        env.close()
    tile = lambda im: np.concatenate(list(im), axis=1).astype(np.float32)  # noqa: E731
    err_same, err_other = np.abs(first - tile(same)).mean(), np.abs(first - tile(other)).mean()
    print(f"first frame vs same reset: {err_same:.2f}, vs another init state: {err_other:.2f}")
    assert err_same < 4.0 and err_other > 2 * err_same, (err_same, err_other)


def test_a_stopped_evaluation_runs_only_its_unfinished_episodes(fake, tmp_path, monkeypatch):
    from dataclasses import replace

    from imagination.eval import evaluate as module
    from imagination.eval.partial import PARTIAL

    ckpt = tmp_path / "policy.pt"
    ckpt.write_bytes(b"a policy")
    policy = SignPolicy(PolicyConfig(chunk_len=4))
    cfg = EvalConfig(env="fake", checkpoint=str(ckpt), tasks=[0, 1, 2], episodes_per_task=3, num_envs=2, videos=2,
                     image_size=8, out_dir=str(tmp_path / "eval"))
    whole = evaluate(replace(cfg, out_dir=str(tmp_path / "whole")), policy=policy, progress=False,
                     env_factory=FakeEnv)
    assert not (tmp_path / "whole" / PARTIAL).exists()  # removed once results.json holds every record

    class Stop(Exception):
        pass

    ended: list[int] = []
    real_append = module.PartialEpisodes.append

    def append_then_stop(self, record):
        real_append(self, record)
        ended.append(record["index"])
        if len(ended) == 4:
            raise Stop

    monkeypatch.setattr(module.PartialEpisodes, "append", append_then_stop)
    with pytest.raises(Stop):
        evaluate(cfg, policy=policy, progress=False, env_factory=FakeEnv)
    assert not (tmp_path / "eval" / "results.json").exists()
    monkeypatch.setattr(module.PartialEpisodes, "append", real_append)
    FakeEnv.instances.clear()
    resumed = evaluate(replace(cfg, num_envs=1), policy=policy, progress=False, env_factory=FakeEnv)
    assert sorted(FakeEnv.instances[0].resets) == sorted(set(range(9)) - set(ended))  # only the 5 unfinished ran
    assert resumed["timing"]["episodes_reused"] == 4
    strip = [{k: v for k, v in e.items() if k not in ("seconds", "video")} for e in resumed["episodes"]]
    assert strip == [{k: v for k, v in e.items() if k not in ("seconds", "video")} for e in whole["episodes"]]
    assert all(Path(e["video"]).is_file() for e in resumed["episodes"][:2])  # the first two kept their videos
    assert not (tmp_path / "eval" / PARTIAL).exists()

    # a file of another evaluation (another key) is set aside, never reused
    (tmp_path / "eval" / "results.json").unlink()
    (tmp_path / "eval" / PARTIAL).write_text('{"format": "wm-vla-rl/eval_partial", "key": {}}\n{"index": 0}\n')
    FakeEnv.instances.clear()
    evaluate(cfg, policy=policy, progress=False, env_factory=FakeEnv)
    assert set(FakeEnv.instances[0].resets) == set(range(9))
    assert (tmp_path / "eval" / (PARTIAL + ".stale")).is_file()
