"""scripts/calibrate_success.py killed between the calibrated model file and calibration.json, its record.

An earlier calibration's record lies beside the output. A kill after the new model file must not leave
that record naming a threshold the model no longer holds (export_hub and the model card quote it); the
re-run writes a record that matches the model file.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.crash.harness import run_script
from tests.imagination.eval.test_calibrate import _bias_success, _proprio, _wm, _write_data
from world_models.model import WorldModel


def _threshold(path: Path) -> float:
    return WorldModel.load(path).cfg.head.success_threshold


@pytest.mark.slow
def test_calibration_killed_before_its_record_leaves_no_stale_record(tmp_path):
    _write_data(tmp_path / "data", [True, True, False])
    wm = _wm()
    _bias_success(wm, 1.0)  # every replay scores sigmoid(1): the calibrated threshold is 0.5
    wm.save(tmp_path / "wm.pt")
    _proprio().save(tmp_path / "proprio.pt")
    out = tmp_path / "cal" / "wm.pt"
    # an earlier calibration into the same place: its model file, record and figure
    wm.cfg.head.success_threshold = 0.123
    wm.save(out)
    (out.parent / "calibration.json").write_text(json.dumps({"threshold": 0.123, "out": str(out)}))
    (out.parent / "calibration.png").write_bytes(b"an earlier figure")
    args = [f"checkpoint={tmp_path / 'wm.pt'}", f"data_dir={tmp_path / 'data'}", f"proprio={tmp_path / 'proprio.pt'}",
            f"out={out}", "num_threads=1"]

    run_script("scripts/calibrate_success.py", args, crash="calibrate.before_record")
    assert _threshold(out) == 0.5  # the new model file is in place (written atomically)...
    record = out.parent / "calibration.json"
    assert not record.exists() or json.loads(record.read_text())["threshold"] == _threshold(out), (
        "calibration.json names a threshold the model file does not hold")
    assert not record.exists() and not (out.parent / "calibration.png").exists()  # ...and no record of it yet

    run_script("scripts/calibrate_success.py", args)
    assert json.loads(record.read_text())["threshold"] == _threshold(out) == 0.5
    assert (out.parent / "calibration.png").stat().st_size > 1000
