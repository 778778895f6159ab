"""Benchmarks read what `make demo` writes, and say in one line (exit 2) which inputs are missing; and
wm_fidelity end to end on a tiny world model: its moving-region verdict and its episode minimum."""
import importlib
from pathlib import Path

import pytest
import torch

from bench.inputs import demo_dir, demo_path, missing_line

ROOT = Path(__file__).resolve().parents[2]


def _main(name: str):
    return importlib.import_module(f"bench.{name}").main


def test_the_defaults_are_where_the_demo_loop_writes():
    import yaml

    # make demo = scripts/loop.py --config grasp; the loop writes data/, world_model/ and bc/ under out_dir
    assert "scripts/loop.py --config grasp" in (ROOT / "Makefile").read_text()
    out_dir = yaml.safe_load((ROOT / "configs" / "loop" / "grasp.yaml").read_text())["out_dir"]
    assert demo_dir() == Path(out_dir) == Path("outputs/demo")
    from imagination.loop.config import LoopConfig
    from infra.cli import load_config

    assert demo_dir() == Path(load_config(LoopConfig, "grasp", group="loop").out_dir)  # what the loop writes
    assert demo_path("data") == "outputs/demo/data"
    assert demo_path("world_model") == "outputs/demo/world_model/world_model.pt"
    with pytest.raises(ValueError, match="expected one of"):
        demo_path("policy")
    loop_src = (ROOT / "imagination" / "loop" / "run.py").read_text()
    assert 'str(run / "data")' in loop_src and 'out_dir=str(run / "world_model")' in loop_src


@pytest.mark.parametrize("bench, names", [
    ("wm_fidelity", ["world model outputs/demo/world_model/world_model.pt"]),
    ("imagine_speed", ["dataset outputs/demo/data"]),
    ("rank", ["world model outputs/demo/world_model/world_model.pt", "dataset outputs/demo/data"]),
])
def test_with_no_demo_run_the_defaults_name_the_demo_files_in_one_line(bench, names, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # a checkout where `make demo` has not run
    assert _main(bench)([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"{bench}: missing ") and "`make demo` makes" in err
    for name in names:
        assert name in err


@pytest.mark.parametrize("bench, args, what", [
    ("wm_fidelity", ["--checkpoint", "{tmp}/wm.pt"], "world model {tmp}/wm.pt"),
    ("imagine_speed", ["--data", "{tmp}/data", "--world-model", "{tmp}/wm.pt"],
     "dataset {tmp}/data, world model {tmp}/wm.pt"),
    ("rank", ["--world-model", "{tmp}/wm.pt", "--data", "{tmp}/data"], "world model {tmp}/wm.pt, dataset {tmp}/data"),
    ("wm_speed", ["--checkpoint", "{tmp}/wm.pt"], "world model {tmp}/wm.pt"),
    ("serve_latency", ["--checkpoint", "{tmp}/policy.pt"], "policy {tmp}/policy.pt"),
])
def test_a_missing_input_is_one_line_and_exit_2(bench, args, what, tmp_path, capsys):
    args = [a.format(tmp=tmp_path) for a in args]
    assert _main(bench)(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"{bench}: missing {what.format(tmp=tmp_path)}; `make demo` makes")


def test_missing_line_names_only_what_is_missing():
    assert missing_line("b", [("x", "a/x", True)]) is None
    assert missing_line("b", [("x", "", False), ("y", "a/y", True)], make="m", instead="give --x") == \
        "b: missing x (not given); `m` makes it (or give --x)"


@pytest.mark.slow
def test_wm_fidelity_scores_a_trained_model_and_its_verdict_follows_the_thresholds(tmp_path, capsys):
    from tests.world_models.conftest import tiny_train_config, write_square_dataset
    from world_models.training import train_world_model

    torch.set_num_threads(1)
    data = write_square_dataset(tmp_path / "data", episodes=10, T=20, seed=0)
    more = write_square_dataset(tmp_path / "more", episodes=12, T=20, seed=1)
    run = tmp_path / "run"
    train_world_model(tiny_train_config(data, run, steps=4, batch_size=4))
    ckpt = str(run / "world_model.pt")
    capsys.readouterr()  # the training's progress
    # a dataset named but absent: one line, naming it
    assert _main("wm_fidelity")(["--checkpoint", ckpt, "--more-data", str(tmp_path / "gone")]) == 2
    assert capsys.readouterr().err.startswith(f"wm_fidelity: missing dataset {tmp_path / 'gone'};")

    base = ["--checkpoint", ckpt, "--more-data", str(more), "--episodes", "12", "--horizon", "8", "--threads", "1",
            "--out-dir", str(tmp_path / "bench")]
    assert _main("wm_fidelity")(base + ["--min-moving-gain-db", "-100"]) == 0
    out = capsys.readouterr().out
    assert "not scored: object:" in out  # the square world has no simulator labels
    line = out.strip().splitlines()[-1]
    assert line.startswith("BENCH wm_fidelity episodes=12 successes=") and line.endswith("PASS")
    keys = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    for k in ("psnr", "ssim", "static_psnr", "static_ssim", "moving_psnr", "static_moving_psnr", "moving_gain_db",
              "moving_ssim", "eef_err_cm", "whole_episode_success_f1", "episode_outcome_f1"):
        assert k in keys and f"{k}_ci95" in keys or k.endswith("f1"), k
    lo, hi = (float(x) for x in keys["moving_gain_db_ci95"].strip("[]").split(","))
    assert lo <= float(keys["moving_gain_db"]) <= hi
    assert keys["object_err_cm"] == "n/a" and keys["threshold_moving_gain_db"] == "-100.0"
    # the fitted proprio model is kept and can be given back; the same run against a gain no model reaches fails
    proprio = tmp_path / "bench" / "horizon" / "proprio.pt"
    assert proprio.is_file()
    assert _main("wm_fidelity")(base + ["--proprio", str(proprio), "--min-moving-gain-db", "100"]) == 1
    assert capsys.readouterr().out.strip().endswith("FAIL")
    # and fewer episodes than the minimum fails whatever the gain
    assert _main("wm_fidelity")(base + ["--proprio", str(proprio), "--min-moving-gain-db", "-100",
                                        "--min-episodes", "13"]) == 1
    assert capsys.readouterr().out.strip().endswith("min_episodes=13 FAIL")


def test_scale_names_its_missing_start_data_and_a_collect_command_that_parses(tmp_path, capsys):
    import shlex

    from bench.scale import MAKE_DATA
    from infra.cli import load_config
    from robot_data.collection import CollectConfig, validate

    assert _main("scale")(["--data", str(tmp_path / "data")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"scale: missing dataset {tmp_path / 'data'}; `{MAKE_DATA}` makes it")
    words = shlex.split(MAKE_DATA)
    assert words[:2] == ["python", "scripts/collect.py"]
    validate(load_config(CollectConfig, None, words[2:], group="collect"))  # the command it names is a valid one
