"""ProprioModel's action history: the pairs it trains on, why it is there (a moving arm keeps moving), and
files saved before it existed."""
import numpy as np
import torch

from infra.checkpoint import load_model_file, save_model_file
from world_models.proprio import ProprioConfig, ProprioModel, chunk_pairs, fit_proprio, history_at
from world_models.tracks import proprio_track


def test_history_at_pads_the_start_with_rest():
    a = np.arange(10 * 7, dtype=np.float32).reshape(10, 7)
    np.testing.assert_array_equal(history_at(a, 0, 3), np.zeros((3, 7)))
    np.testing.assert_array_equal(history_at(a, 2, 3), np.concatenate([np.zeros((1, 7)), a[:2]]))
    np.testing.assert_array_equal(history_at(a, 7, 3), a[4:7])
    assert history_at(a, 5, 0).shape == (0, 7)


def test_chunk_pairs_carry_the_actions_before_each_chunk():
    a = np.arange(6 * 7, dtype=np.float32).reshape(6, 7)
    s = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    s0, hist, acts, targets, mask = chunk_pairs([s], [a], K=2, H=3)
    assert hist.shape == (5, 3, 7) and acts.shape == (5, 2, 7)
    np.testing.assert_array_equal(hist[0], np.zeros((3, 7)))
    np.testing.assert_array_equal(hist[4], a[1:4])
    np.testing.assert_array_equal(acts[4, 0], a[4])
    np.testing.assert_array_equal(mask[4], [1, 0])  # row 5 has no successor state


def _momentum_episodes(n: int, T: int = 48, seed: int = 0):
    """x_{t+1} = x_t + v_{t+1}, v_{t+1} = 0.8 v_t + 0.02 a_t: the state (x) holds no velocity, like OSC's."""
    rng = np.random.default_rng(seed)
    states, actions = [], []
    for _ in range(n):
        a = rng.uniform(-1, 1, (T, 7)).astype(np.float32)
        x, v, rows = np.zeros(8), np.zeros(8), []
        for t in range(T):
            rows.append(x.copy())
            v = 0.8 * v + 0.02 * np.pad(a[t], (0, 1))
            x = x + v
        states.append(np.array(rows, np.float32))
        actions.append(a)
    return states, actions


def test_history_removes_the_drift_of_a_moving_arm():
    torch.manual_seed(0)
    states, actions = _momentum_episodes(12)
    errors = {}
    for H in (0, 4):
        model, _ = fit_proprio(states[:10], actions[:10], ProprioConfig(chunk_len=4, history=H, hidden=64, steps=700))
        err = [np.abs(proprio_track(model, s[0], a[:-1]) - s[1:]).mean() for s, a in zip(states[10:], actions[10:])]
        errors[H] = float(np.mean(err))
    assert errors[4] < 0.5 * errors[0], errors  # open loop over held-out episodes


def test_a_file_saved_before_the_history_loads_as_history_zero(tmp_path):
    old = ProprioModel(ProprioConfig(chunk_len=4, history=0, hidden=16, layers=1))
    save_model_file(tmp_path / "p.pt", "wm-vla-rl/proprio_model",
                    {k: v for k, v in old.cfg.__dict__.items() if k != "history"}, old.state_dict())
    assert "history" not in load_model_file(tmp_path / "p.pt", "proprio", "wm-vla-rl/proprio_model")["config"]
    loaded = ProprioModel.load(tmp_path / "p.pt")
    assert loaded.cfg.history == 0
    s, a = torch.zeros(2, 8), torch.ones(2, 4, 7)
    torch.testing.assert_close(loaded.predict(s, a), old.predict(s, a))


def test_a_fit_is_the_same_whatever_ran_before_it():
    """The model's initial weights come from cfg.seed, not from the global generator's state: an RL run fits its
    proprio model after other work has drawn from that generator, and the same run must give the same model."""
    states, actions = _momentum_episodes(4, T=16)
    cfg = ProprioConfig(chunk_len=4, history=2, hidden=16, steps=5)
    fitted = []
    for draws in (0, 3):
        torch.manual_seed(1234)
        torch.rand(draws)  # the global generator left in another state
        fitted.append(fit_proprio(states, actions, cfg)[0].state_dict())
    for name, weights in fitted[0].items():
        torch.testing.assert_close(weights, fitted[1][name], rtol=0, atol=0, msg=name)
