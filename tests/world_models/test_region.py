"""The moving-region mask and metrics (world_models.region) on hand-made frames, the bootstrap interval,
and the imagined eef track (world_models.tracks) of a fitted proprio model."""
import math
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from world_models.metrics import psnr_per_frame
from world_models.region import bootstrap_interval, masked_psnr, masked_ssim, moving_mask, pooled_mean
from world_models.tracks import object_track, proprio_track, track_errors

S = 32


def _frames(squares: Sequence[tuple[int, int] | None]) -> torch.Tensor:
    """[T, 3, S, S] in [-1, 1]: a grey background with a white 4x4 square at (x, y) per frame (None: none)."""
    out = torch.full((len(squares), 3, S, S), -0.2)
    for t, sq in enumerate(squares):
        if sq is not None:
            x, y = sq
            out[t, :, y:y + 4, x:x + 4] = 1.0
    return out


def test_the_mask_covers_where_the_square_was_and_is_dilated_and_nothing_else():
    real = _frames([(4, 4), (4, 4), (10, 4)])  # frame 0 = first; frame 1 unchanged; frame 2 moved right
    mask = moving_mask(real[1:], real[0], dilate=2)
    assert mask.shape == (2, 1, S, S) and mask.dtype == torch.bool
    assert not mask[0].any()  # nothing moved yet
    # moved: the old place (x 4-7) and the new one (x 10-13), rows 4-7, each grown by 2 px
    expect = torch.zeros(S, S, dtype=torch.bool)
    expect[2:10, 2:16] = True
    assert torch.equal(mask[1, 0], expect)
    undilated = moving_mask(real[1:], real[0], dilate=0)[1, 0]
    assert undilated.sum() == 32 and undilated[4:8, 4:8].all() and undilated[4:8, 10:14].all()


def test_a_change_below_the_tolerance_is_not_motion():
    real = _frames([(4, 4), (4, 4)])
    real[1] += 4 / 255  # in [-1, 1] units: 2/255 on [0, 1], below MOVE_TOL
    assert not moving_mask(real[1:], real[0]).any()


def test_masked_psnr_counts_only_the_masked_pixels_and_is_nan_on_an_empty_mask():
    real = _frames([(4, 4), (10, 4), (4, 4)])
    mask = moving_mask(real, real[0])
    pred = real.clone()
    pred[:, :, 20:, 20:] += 0.5  # error away from the square: outside the mask
    got = masked_psnr(pred, real, mask)
    assert math.isnan(got[0]) and math.isnan(got[2])  # frames equal to the first: empty masks
    assert got[1] == pytest.approx(100.0)  # exact inside the mask (capped at 100 dB)
    pred[1, :, 4:8, 10:14] -= 0.2  # an error of 0.1 on [0, 1] images, on 16 of the masked pixels
    n = int(mask[1].sum())
    assert masked_psnr(pred, real, mask)[1] == pytest.approx(10 * math.log10(n / (16 * 0.01)), rel=1e-4)


def test_the_still_frame_scores_worse_on_the_moving_region_than_on_the_whole_frame():
    real = _frames([(4, 4)] + [(4 + 2 * t, 4 + t) for t in range(1, 8)])
    still = real[:1].expand(7, -1, -1, -1)
    mask = moving_mask(real[1:], real[0])
    whole, moving = psnr_per_frame(still, real[1:]), masked_psnr(still, real[1:], mask)
    assert (whole - moving > 8).all()  # ~90% of the frame is static: whole-frame PSNR hides the miss
    assert (masked_ssim(still, real[1:], mask) < masked_ssim(real[1:], real[1:], mask)).all()
    assert masked_ssim(real[1:], real[1:], mask) == pytest.approx(torch.ones(7), abs=1e-4)


def test_bootstrap_interval_resamples_episodes_and_skips_missing_values():
    rows = [np.array([10.0, np.nan, 12.0]), np.array([20.0, 22.0]), np.array([np.inf, 30.0])]
    assert pooled_mean(rows) == pytest.approx((10 + 12 + 20 + 22 + 30) / 5)
    lo, hi = bootstrap_interval(rows, resamples=4000)
    assert 10 <= lo < pooled_mean(rows) < hi <= 30
    assert bootstrap_interval([np.array([5.0, 5.0])] * 4) == (5.0, 5.0)  # no spread between episodes
    assert all(math.isnan(v) for v in bootstrap_interval([np.array([np.nan])]))
    with pytest.raises(ValueError, match="shapes differ"):
        masked_psnr(torch.zeros(1, 3, 4, 4), torch.zeros(1, 3, 4, 5), torch.ones(1, 1, 4, 4, dtype=torch.bool))


def _episodes(rng: np.random.Generator, n: int, T: int = 40) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Robot states that integrate the action: eef += 0.01 m x action xyz, fingers follow action[6]. Each
    episode heads one way (a drawn direction plus noise), as a reaching arm does."""
    states, actions = [], []
    for _ in range(n):
        a = np.clip(rng.uniform(-1, 1, (1, 7)) + rng.normal(0, 0.3, (T, 7)), -1, 1).astype(np.float32)
        s = np.zeros((T, 8), np.float32)
        for t in range(1, T):
            s[t, :3] = s[t - 1, :3] + 0.01 * a[t - 1, :3]
            s[t, 6:8] = 0.02 * a[t - 1, 6]
        states.append(s)
        actions.append(a)
    return states, actions


def test_the_imagined_eef_track_follows_the_actions_open_loop():
    from world_models.proprio import ProprioConfig, fit_proprio

    torch.manual_seed(0)
    states, actions = _episodes(np.random.default_rng(0), 30)
    model, _ = fit_proprio(states, actions, ProprioConfig(chunk_len=4, steps=400, hidden=64))
    test_s, test_a = _episodes(np.random.default_rng(1), 1)
    pred = proprio_track(model, test_s[0][0], test_a[0][:21])  # 21 actions: the last chunk is padded
    assert pred.shape == (21, 8)
    errs = track_errors(model, test_s[0], test_a[0], steps=21)
    assert errs["eef_err"].shape == (21,) and "object_err" not in errs
    # the real eef moves up to ~1.7 cm a step; holding the start state is off by ~10 cm on average
    still = np.linalg.norm(test_s[0][1:22, :3] - test_s[0][0, :3], axis=1)
    assert errs["eef_err"].mean() < 0.2 * still.mean()
    with pytest.raises(ValueError, match="at least 2 rows"):
        track_errors(model, test_s[0][:1], test_a[0][:1], steps=5)


def test_the_object_is_carried_as_imagination_carries_it():
    from world_models.object_state import LabelledEpisode, StateReward, StateRewardConfig, track
    from world_models.proprio import ProprioConfig, ProprioModel

    torch.manual_seed(0)
    model = StateReward(StateRewardConfig(chunk_len=4)).eval()  # untrained: the carry's arithmetic is what counts
    states, actions = _episodes(np.random.default_rng(2), 1, T=19)
    state = states[0]
    sim = {"object_pos": np.tile(np.array([0.1, 0.2, 0.9], np.float32), (19, 1)),
           "target_pos": np.zeros((19, 3), np.float32), "grasped": np.zeros(19, bool)}
    ep = LabelledEpisode(state, sim["object_pos"], sim["target_pos"], sim["grasped"], np.zeros(19, bool))
    ours = object_track(model, state[0], state[1:], sim)  # 18 steps: the last of 5 chunks is padded
    theirs, _ = track(model, ep, 0)  # whole chunks only: 4 x 4 = 16 steps
    assert ours.shape == (18, 3) and np.allclose(ours[:16], theirs, atol=1e-6)
    proprio = ProprioModel(ProprioConfig(chunk_len=4)).eval()  # untrained too: only shapes and the carry matter
    errs = track_errors(proprio, state, actions[0], steps=18, state_reward=model, sim=sim)
    assert errs["object_err"].shape == errs["object_err_recorded"].shape == (18,)
    assert np.allclose(errs["object_err_recorded"], np.linalg.norm(ours - sim["object_pos"][1:], axis=1), atol=1e-6)

