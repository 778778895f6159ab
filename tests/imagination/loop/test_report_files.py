"""imagination/loop/report_files.py: what the report reads from a run folder, read directly."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from imagination.loop.report_files import ASSETS, RunFiles, read_csv


def test_read_csv_keeps_numeric_columns_with_blanks_as_nan(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss,note\n1,0.5,warmup\n2,,steady\n")
    cols = read_csv(path)
    assert set(cols) == {"step", "loss"}  # the text column is dropped
    assert cols["step"].tolist() == [1.0, 2.0] and cols["loss"][0] == 0.5 and np.isnan(cols["loss"][1])
    assert read_csv(tmp_path / "absent.csv") == {} and read_csv(None) == {}


def test_paths_are_rerooted_and_outside_files_copied_in(tmp_path: Path) -> None:
    run_dir, outside = tmp_path / "moved", tmp_path / "elsewhere" / "eval.json"
    (run_dir / "bc").mkdir(parents=True)
    (run_dir / "bc" / "loss.csv").write_text("step\n1\n")
    outside.parent.mkdir()
    outside.write_text(json.dumps({"a": 1}))
    run = RunFiles(run_dir, {"run_dir": "outputs/demo"})  # loop.json written when the folder was outputs/demo
    assert run.path("outputs/demo/bc/loss.csv") == run_dir / "bc" / "loss.csv"
    assert run.path("") is None and run.path(3) is None
    link = run.link(outside)
    assert link.startswith(f"{ASSETS}/linked/") and (run_dir / link).read_text() == outside.read_text()
    (run_dir / "bad.json").write_text("{not json")
    assert run.json("bad.json") is None and run.notes == ["`bad.json` could not be read and was skipped"]
