"""bench/wm_paired.py on hand-made bench/wm_fidelity.py results: the paired difference, its interval, the verdict
and the errors for unusable inputs."""
import json

import numpy as np
import pytest

from tests.bench.test_bench_options import _load


def _result(path, moving, whole, episodes=None, steps=64):
    rows = [{"data_dir": "d", "episode": e, "steps": steps, "moving_psnr": m, "static_moving_psnr": 15.0,
             "psnr": w} for e, m, w in zip(episodes or range(len(moving)), moving, whole)]
    path.write_text(json.dumps({"per_episode": rows}))
    return str(path)


def test_a_model_better_on_every_episode_passes_and_a_noisy_one_does_not(tmp_path, capsys):
    wm_paired = _load("wm_paired")
    rng = np.random.default_rng(0)
    base = 17.0 + rng.normal(0, 2.0, 18)  # episodes differ a lot from each other
    a = _result(tmp_path / "a.json", base, base + 7)
    b = _result(tmp_path / "b.json", base + 0.3 + rng.normal(0, 0.05, 18), base + 7)
    assert wm_paired.main([a, b]) == 0
    out = capsys.readouterr().out
    line = out.strip().splitlines()[-1]
    assert line.startswith("BENCH wm_paired episodes=18 ") and line.endswith(" PASS")
    assert "moving_diff=+0.30" in line and "whole_diff=+0.00 whole_diff_ci95=[+0.00,+0.00]" in line
    assert "18 of 18 episodes better in the moving region" in out
    assert f"A {np.mean(base) - 15:+.2f} dB" in out
    # the same mean difference, but as noisy as the episodes themselves: not shown
    c = _result(tmp_path / "c.json", base + 0.3 + np.tile([2.0, -2.0], 9), base + 7)
    assert wm_paired.main([a, c]) == 1
    assert wm_paired.main([a, b, "--threshold", "0.5"]) == 1  # shown better, not by 0.5 dB
    capsys.readouterr()


@pytest.mark.parametrize("case", ["missing", "no_records", "other_episodes", "other_horizon"])
def test_unusable_inputs_give_one_line_and_exit_2(tmp_path, capsys, case):
    wm_paired = _load("wm_paired")
    a = _result(tmp_path / "a.json", [17.0, 18.0], [24.0, 25.0])
    b = {"missing": str(tmp_path / "none.json"),
         "no_records": str(tmp_path / "empty.json"),
         "other_episodes": _result(tmp_path / "b.json", [17.0, 18.0], [24.0, 25.0], episodes=[0, 5]),
         "other_horizon": _result(tmp_path / "b.json", [17.0, 18.0], [24.0, 25.0], steps=32)}[case]
    (tmp_path / "empty.json").write_text("{}")
    assert wm_paired.main([a, b]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wm_paired: ")
    if case.startswith("other"):
        assert "must score the same episodes at one horizon" in err[0]
