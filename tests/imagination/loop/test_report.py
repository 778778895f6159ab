"""Loop report: tables, guard warnings, plots, relative links and "not run" pieces, on a made-up run folder."""
from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pytest
import torch
from torch.utils.tensorboard import SummaryWriter

from imagination.eval.evaluate import summarize, wilson_interval
from imagination.loop.report import write_report
from infra.provenance import provenance
from robot_data.dataset import encode_video

INSTRUCTIONS = {0: "pick up the black bowl between the plate and the ramekin and place it on the plate",
                1: "pick up the black bowl | next to the cookie box and place it on the plate"}


def _video(path: Path) -> None:
    encode_video(path, np.random.default_rng(0).integers(0, 255, (3, 16, 16, 3), dtype=np.uint8), fps=4)


def _results(path: Path, successes: dict[int, int], episodes: int = 10, video_prefix: str = "", prob=None) -> None:
    """results.json as evaluate() writes it; the first two episodes get videos under path's folder,
    recorded as `video_prefix/videos/<name>` (the evaluating process's own path for them).
    prob(task, j): the episode's max_success_prob, as imagined evaluations record it; without it (a
    real evaluation) every episode has an outcome, failures alternating never lifted / lifted, not placed."""
    records: list[dict[str, Any]] = []
    for task, s in successes.items():
        for j in range(episodes):
            records.append({"index": len(records), "task_id": task, "episode": j, "init_state_id": j, "seed": j,
                            "success": j < s, "steps": 50 + j, "seconds": 1.0})
            if prob is not None:
                records[-1]["max_success_prob"] = round(prob(task, j), 4)
            else:
                failure = "never lifted" if j % 2 == 0 else "lifted, not placed"
                records[-1]["outcome"] = "success" if j < s else failure
    for r in records[:2]:
        name = f"ep{r['index']:03d}_task{r['task_id']}_init{r['init_state_id']}.mp4"
        _video(path.parent / "videos" / name)
        r["video"] = f"{video_prefix}/videos/{name}"
    result = {"env": "libero_spatial", "checkpoint": "policy.pt", **summarize(records, INSTRUCTIONS),
              "timing": {"seconds": 10.0}, "episodes": records}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))


def _csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _scalars(folder: Path, tags: list[str], steps: int) -> None:
    writer = SummaryWriter(str(folder))
    for step in range(1, steps + 1):
        for tag in tags:
            writer.add_scalar(tag, 1.0 / step, step)
    writer.close()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A loop run: BC, a finished RL phase, an RL phase still running; two world models, one evaluated."""
    run, outside = tmp_path / "run", tmp_path / "elsewhere"
    _csv(run / "bc" / "loss.csv",
         [{"step": s, "loss": 1 / s, "mse": 1 / s, "lr": 1e-3, "seconds": s} for s in (50, 100)])
    _scalars(run / "wm0" / "logs" / "world_model", ["train/loss", "train/mse"], 5)
    steps = 6
    ev = {"psnr": 24.5, "ssim": 0.812, "static_psnr": 21.25, "static_ssim": 0.846, "success_f1": 0.67, "done_f1": 0.5,
          "psnr_per_step": list(np.linspace(30, 20, steps)), "ssim_per_step": [0.8] * steps,
          "static_psnr_per_step": list(np.linspace(29, 17, steps)), "per_episode": []}
    (run / "wm0" / "eval" / "videos").mkdir(parents=True)
    (run / "wm0" / "eval" / "eval.json").write_text(json.dumps(ev))
    _video(run / "wm0" / "eval" / "videos" / "ep0000.mp4")
    _results(run / "eval" / "bc_real" / "results.json", {0: 6, 1: 3}, video_prefix="outputs/eval/bc_real")
    # task 0: the probability falls with j as real success does (j < 6); task 1: one probability for all
    _results(run / "eval" / "bc_imagined" / "results.json", {0: 8, 1: 7},
             prob=lambda t, j: 0.9 - 0.05 * j if t == 0 else 0.5)
    # rl1's real evaluation lives outside the run folder (linked videos are copied in)
    _results(outside / "rl1_real" / "results.json", {0: 9, 1: 5}, video_prefix=str(outside / "rl1_real"))
    _results(run / "eval" / "rl1_imagined" / "results.json", {0: 10, 1: 10}, prob=lambda t, j: 0.7)
    _csv(run / "rl1" / "metrics.csv", [{"iteration": i, "imagined_success_rate": 0.2 * i, "imagined_return": 0.3 * i,
                                        "policy_loss": 0.1, "std": 0.5} for i in range(1, 4)])
    _video(run / "rl1" / "videos" / "imagined00_start0-1_success.mp4")
    (run / "rl1" / "result.json").write_text(json.dumps({
        "history": [], "seconds": 120.0, "real_env_steps": 0,
        "videos": [str(run / "rl1" / "videos" / "imagined00_start0-1_success.mp4")]}))
    _scalars(run / "rl2" / "logs", ["imagined_success_rate", "imagined_return"], 2)  # still running
    loop = {
        "run_dir": str(run), "config": {"rounds": 2},
        "stages": [{"name": "collect", "seconds": 360.0, "status": "done"},
                   {"name": "train_wm", "seconds": 3240.0, "status": "reused"},
                   {"name": "round1_task_bias", "seconds": 60.0, "status": "done",  # as loop.json stores it
                    "result": {"bias": [1.5, -0.25] + [0.0] * 8, "jobs": 12,
                               "tasks": {"0": {"jobs": 6, "real_successes": 5, "imagined_before": 0.4,
                                               "imagined_after": 0.79},
                                         "1": {"jobs": 6, "real_successes": 2, "imagined_before": 0.45,
                                               "imagined_after": 0.36}}}}],
        "phases": [
            {"name": "bc", "label": "BC", "policy": "bc/policy.pt", "real": "eval/bc_real/results.json",
             "imagined": str(run / "eval" / "bc_imagined" / "results.json"), "rl": None, "world_model": "wm0/wm.pt"},
            {"name": "rl1", "label": "after imagined RL", "policy": "rl1/policy.pt",
             "real": str(outside / "rl1_real" / "results.json"), "imagined": "eval/rl1_imagined/results.json",
             "rl": str(run / "rl1"), "world_model": "wm0/wm.pt"},
            {"name": "rl2", "label": "after loop round 1", "policy": "rl2/policy.pt", "real": None, "imagined": None,
             "rl": "rl2", "world_model": "wm1/wm.pt"}],
        "world_models": [{"name": "wm0", "path": "wm0/wm.pt", "train_dir": "wm0", "eval": "wm0/eval/eval.json",
                          "calibration": {"threshold": 0.8125, "balanced_accuracy": 0.75,
                                          "balanced_accuracy_at_default": 0.5}},
                         {"name": "wm1", "path": "wm1/wm.pt", "train_dir": "wm1", "eval": None}],
        "guard": [{"round": 1, "phase": "rl1", "imagined_success": 1.0, "real_success": 0.7, "gap": 0.3,
                   "margin": 0.25, "fired": True, "failure_weight": 3.0},
                  {"round": 2, "phase": "rl2", "imagined_success": 0.6, "real_success": 0.5, "gap": 0.1,
                   "margin": 0.25, "fired": False, "failure_weight": 1.0}],
        "data": {"episodes_before": 18, "episodes_after": 48, "policy_episodes_added": 30, "failures_added": 12},
        "bc_dir": "bc"}
    (run / "loop.json").write_text(json.dumps(loop))
    return run


def _cell(s: int, n: int) -> str:
    lo, hi = wilson_interval(s, n)
    return f"{100 * s / n:.0f}% ({s}/{n}) [{100 * lo:.0f}, {100 * hi:.0f}]"


def _row(md: str, start: str) -> list[str]:
    line = next(line for line in md.splitlines() if line.startswith(start))
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def _links(md: str) -> list[str]:
    return [unquote(m) for m in re.findall(r"\]\(([^)]+)\)", md)]


def test_reproducibility_section(run_dir: Path) -> None:
    md = write_report(run_dir)[0].read_text()
    assert "## Reproducibility" in md and "not recorded by this run" in md  # loop.json from before the record
    loop = json.loads((run_dir / "loop.json").read_text())
    loop["provenance"] = provenance({"rl": 1}, {"env": "libero_spatial", "tasks": [0, 1]})
    (run_dir / "loop.json").write_text(json.dumps(loop))
    md = write_report(run_dir)[0].read_text()
    assert f"torch {torch.__version__}" in md and "seed: {'rl': 1}" in md and "'tasks': [0, 1]" in md


def test_success_tables_and_guard(run_dir: Path) -> None:
    md_path, html_path = write_report(run_dir)
    md = md_path.read_text()
    assert _row(md, "| 0: pick up the black bowl") == [_row(md, "| 0:")[0], _cell(6, 10), _cell(9, 10), "not run"]
    assert _row(md, "| 1:")[1:] == [_cell(3, 10), _cell(5, 10), "not run"]
    assert "\\|" in _row(md, "| 1:")[0]  # a '|' in an instruction does not split the row
    assert _row(md, "| **all**")[1:] == [_cell(9, 20), _cell(14, 20), "not run"]
    # reward signal: task 0 ranks all 24 pairs right, task 1's 21 pairs tie: (24 + 10.5) / 45; pooled 81 / 99
    assert _row(md, f"| BC | {_cell(15, 20)}") == ["BC", _cell(15, 20), _cell(9, 20), "+30 pts", "0.77 (AUC 0.82)"]
    assert _row(md, f"| after imagined RL | {_cell(20, 20)}")[4] == "0.50 (AUC 0.50)"
    warning = next(line for line in md.splitlines() if "little closed-loop signal" in line)
    assert "after imagined RL (0.50)" in warning and "BC" not in warning
    assert _row(md, "| after loop round 1 |")[1:3] == ["not run", "not run"]
    # failures by outcome: BC task 0 j=6..9, task 1 j=3..9; RL task 0 j=9, task 1 j=5..9 (even j never lifted)
    assert _row(md, "| policy | failures |") == ["policy", "failures", "never lifted", "lifted, not placed"]
    assert _row(md, "| BC | 11 |") == ["BC", "11", "5", "6"]
    assert _row(md, "| after imagined RL | 6 |") == ["after imagined RL", "6", "2", "4"]
    assert md.count("Exploitation warning") == 1
    assert "imagined success exceeds real by 30 points" in md and "weighted failures up by 3×" in md
    assert "Exploitation guard (round 2, after loop round 1): gap 10 points is within the margin" in md
    assert _row(md, "| wm0 |") == ["wm0", "24.50", "0.812", "21.25", "0.846", "0.67", "0.50", "0.81 (0.75; 0.50)"]
    assert _row(md, "| wm1 |")[1:] == ["not run"] * 6 + ["0.5 (not calibrated)"]
    assert _row(md, "| after imagined RL | 3 |")[2:] == ["0.20 → 0.60", "0.30 → 0.90", "2.0", "0"]
    assert _row(md, "| after loop round 1 | 2 |")[2] == "1.00 → 0.50"  # read from the logs of a running RL
    assert _row(md, "| failures added |") == ["failures added", "12"]
    assert _row(md, "| round1 | 0 |") == ["round1", "0", "5/6", "0.40 → 0.79", "+1.50"]
    assert _row(md, "| round1 | 1 |") == ["round1", "1", "2/6", "0.45 → 0.36", "-0.25"]
    assert "Total wall time: **1 h 01 min**" in md and _row(md, "| train_wm |") == ["train_wm", "reused", "54.0"]
    html = html_path.read_text()
    assert "<table>" in html and "<blockquote>" in html and '<img alt="Real success' in html


def test_paths_relative_to_the_loop_working_directory(run_dir: Path, monkeypatch) -> None:
    # `make demo` runs the loop with out_dir=outputs/demo: loop.json then holds run_dir "outputs/demo"
    # and paths like "outputs/demo/bc/eval_real/results.json", relative to where the loop ran
    loop = json.loads((run_dir / "loop.json").read_text())
    loop["run_dir"] = "outputs/demo"
    loop["phases"][0]["real"] = "outputs/demo/eval/bc_real/results.json"
    loop["phases"][0]["imagined"] = "outputs/demo/eval/bc_imagined/results.json"
    (run_dir / "loop.json").write_text(json.dumps(loop))
    monkeypatch.chdir(run_dir.parent)  # the run folder is not outputs/demo from here: re-rooted, not joined
    md = write_report(run_dir)[0].read_text()
    assert _row(md, f"| BC | {_cell(15, 20)}")[1:3] == [_cell(15, 20), _cell(9, 20)]


def test_plots_and_links_are_relative_and_survive_a_move(run_dir: Path, tmp_path: Path) -> None:
    md = write_report(run_dir)[0].read_text()
    for name in ("real_success.png", "psnr_vs_horizon.png", "learning_curves.png"):
        png = run_dir / "report_assets" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    links = _links(md)
    assert any(link.endswith(".mp4") and "linked/" in link for link in links)  # copied in from outside
    assert sum("ep000_task0" in link for link in links) == 2  # the first real videos of BC and rl1
    assert any("imagined00" in link for link in links) and any("ep0000" in link for link in links)
    moved = shutil.move(str(run_dir), str(tmp_path / "moved"))
    shutil.rmtree(tmp_path / "elsewhere")
    for link in links:
        assert not Path(link).is_absolute() and ".." not in Path(link).parts
        assert (Path(moved) / link).is_file(), link
    # loop.json's absolute paths still name the old folder: they are re-rooted in the moved one
    md = write_report(moved)[0].read_text()
    assert _row(md, f"| BC | {_cell(15, 20)}")[2] == _cell(9, 20) and "imagined00" in md


def test_missing_pieces_say_not_run(tmp_path: Path) -> None:
    (tmp_path / "loop.json").write_text(json.dumps({
        "run_dir": str(tmp_path), "stages": [{"name": "collect", "seconds": 60, "status": "done"}],
        "phases": [{"name": "bc", "label": "BC", "policy": "p.pt", "real": "eval/missing.json", "imagined": None,
                    "rl": None, "world_model": None}]}))
    (tmp_path / "broken.json").write_text("{not json")
    md_path, html_path = write_report(tmp_path)
    md = md_path.read_text()
    assert _row(md, "| **all**") == ["**all**", "not run"]
    assert "Exploitation guard: not run" in md and "World models: not run" in md
    assert "Data aggregation: not run" in md and "- BC loss: not run" in md and "- BC: not run" in md
    assert (tmp_path / "report_assets" / "learning_curves.png").stat().st_size > 0
    assert "<table>" in html_path.read_text()
    assert all((tmp_path / link).is_file() for link in _links(md))


def test_unreadable_results_are_noted(run_dir: Path) -> None:
    (run_dir / "eval" / "bc_imagined" / "results.json").write_text('{"overall": {"successes": 1}}')
    md = write_report(run_dir)[0].read_text()
    assert _row(md, "| BC | not run")[2] == _cell(9, 20) and "`results.json` could not be read" in md


@pytest.mark.parametrize("content, match", [(None, "no loop.json"), ("{oops", "not valid JSON"),
                                            ("[1, 2]", "expected a JSON object"),
                                            ('{"phases": {"bc": 1}}', "'phases' must be a list"),
                                            ('{"world_models": [{"path": "x"}]}', "with a 'name'")])
def test_bad_loop_json_names_the_file(tmp_path: Path, content: str | None, match: str) -> None:
    if content is not None:
        (tmp_path / "loop.json").write_text(content)
    with pytest.raises((ValueError, FileNotFoundError), match=match) as info:
        write_report(tmp_path)
    assert str(tmp_path / "loop.json") in str(info.value)
