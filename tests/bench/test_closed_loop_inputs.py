"""bench/closed_loop_inputs.py: the policy reads the imagined or the recorded observation in each of the four mixes,
recorded observations stop at the given last step, and the first release is found in the chunks."""
import numpy as np
import pytest
import torch

from imagination.imagine import open_imagination
from imagination.keyframes import Keyframe
from tests.bench.test_bench_options import _load
from tests.imagination.test_imagine import K, _episodes, _policy, _proprio, _wm


def _env_and_policy():
    policy = _policy()
    policy.eval()
    eps = _episodes((20, 24))
    return open_imagination(_wm(), eps, _proprio(), num_envs=2, policy=policy), policy, eps


def _direct(policy, eps, steps: list[int]) -> np.ndarray:
    """The policy's chunk [2, K, 7] on the recorded observations of both episodes at `steps`."""
    obs = {"image": np.stack([ep.frames[t] for ep, t in zip(eps, steps)]),
           "state": np.stack([ep.state[t] for ep, t in zip(eps, steps)]),
           "instruction": tuple(ep.instruction for ep in eps)}
    with torch.no_grad():
        return policy.predict_action_chunk(obs).numpy()


def test_recorded_mix_reads_the_recording_and_the_imagined_one_does_not():
    bench = _load("closed_loop_inputs")
    env, policy, eps = _env_and_policy()
    starts = [Keyframe(0, 4), Keyframe(1, 8)]
    recorded = bench.mixed_run(env, policy, starts, 3, "recorded", "recorded")
    assert recorded.shape == (2, 3, K, 7)
    for j in range(3):
        np.testing.assert_allclose(recorded[:, j], _direct(policy, eps, [4 + j * K, 8 + j * K]), atol=1e-6)
    imagined = bench.mixed_run(env, policy, starts, 3, "imagined", "imagined")
    np.testing.assert_allclose(imagined[:, 0], recorded[:, 0], atol=1e-6)  # the first observation is the real frame
    assert not np.allclose(imagined[:, 1:], recorded[:, 1:])  # then the world model's frames and predicted states
    # recorded observations stop at `last`: every chunk after it reads that step's
    held = bench.mixed_run(env, policy, starts, 3, "recorded", "recorded", last=[4 + K, 8])
    np.testing.assert_allclose(held[:, 2], _direct(policy, eps, [4 + K, 8]), atol=1e-6)
    with pytest.raises(ValueError, match="image, state"):
        bench.mixed_run(env, policy, starts, 1, "real", "recorded")
    with pytest.raises(ValueError, match="starts"):
        bench.mixed_run(env, policy, starts[:1], 1, "recorded", "recorded")


def test_first_release_is_the_first_open_command_over_the_chunks():
    bench = _load("closed_loop_inputs")
    chunks = np.ones((3, 2, K, 7), np.float32)
    chunks[0, 1, 2, 6] = -1.0  # step K + 2
    chunks[2, 0, 0, 6] = -0.5  # step 0
    assert bench.first_release(chunks).tolist() == [K + 2, -1, 0]


def test_missing_inputs_exit_2(tmp_path, capsys):
    bench = _load("closed_loop_inputs")
    assert bench.main(["--world-model", str(tmp_path / "none.pt")]) == 2
    assert "--world-model" in capsys.readouterr().out


def test_film_shows_the_imagined_views_above_the_recording_and_writes_one_video_per_episode(tmp_path):
    from envs.frames import tile_views
    from robot_data.dataset.video import decode_video

    bench = _load("closed_loop_inputs")
    env, policy, eps = _env_and_policy()
    starts = [Keyframe(0, 4), Keyframe(1, 8)]
    film: list[np.ndarray] = []
    bench.mixed_run(env, policy, starts, 2, "imagined", "imagined", film=film)
    assert len(film) == 2
    h = eps[0].frames.shape[-3]
    for j, picture in enumerate(film):
        real = tile_views(np.stack([eps[0].frames[4 + (j + 1) * K], eps[1].frames[8 + (j + 1) * K]]))
        np.testing.assert_array_equal(picture[:, h:], real)  # the recording below, at the step the chunk ends on
        assert not np.array_equal(picture[:, :h], real)  # the world model's views above
    paths = bench.write_films(film, ["a", "b"], tmp_path / "videos", fps=2.5)
    assert [p.split("/")[-1] for p in paths] == ["a.mp4", "b.mp4"]
    frames = decode_video(paths[1])
    assert frames.shape == (2, 4 * h, 2 * film[0].shape[2], 3)  # two chunks, shown twice as large
