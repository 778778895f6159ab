"""Two evaluations compared job by job (imagination/eval/compare.py, scripts/compare_evals.py)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from imagination.eval.compare import CompareConfig, compare_evaluations

REPO = Path(__file__).resolve().parents[3]


def _write(folder: Path, outcomes: dict[tuple[int, int], bool]) -> str:
    folder.mkdir(parents=True)
    episodes = [{"task_id": t, "init_state_id": i, "seed": 100 + i, "success": ok,
                 **({} if ok else {"outcome": "never lifted"})} for (t, i), ok in outcomes.items()]
    (folder / "results.json").write_text(json.dumps({"episodes": episodes}))
    return str(folder)


def test_the_comparison_pairs_the_jobs_overall_and_per_task(tmp_path, capsys):
    jobs = [(t, i) for t in (5, 6) for i in range(10)]
    before = _write(tmp_path / "a", {j: j[1] < 5 for j in jobs})  # 5/10 on each task
    # task 5: 3 more solved; task 6: 1 solved lost
    after = _write(tmp_path / "b", {j: (j[1] < 8 if j[0] == 5 else 1 <= j[1] < 5) for j in jobs})
    out = compare_evaluations(CompareConfig(before=before, after=str(Path(after) / "results.json")))
    assert out["overall"]["n"] == 20 and out["overall"]["gained"] == 3 and out["overall"]["lost"] == 1
    assert out["overall"]["gain_points"] == pytest.approx(10.0)
    lo, hi = out["overall"]["ci95_points"]
    assert lo < 10.0 < hi
    assert out["per_task"][5]["gain_points"] == pytest.approx(30.0) and out["per_task"][6]["lost"] == 1
    printed = capsys.readouterr().out
    assert "all jobs: 10/20 -> 12/20   +10.0 points" in printed and "before failures: never lifted 10" in printed


def test_other_jobs_and_missing_files_are_refused_by_name(tmp_path):
    a = _write(tmp_path / "a", {(5, 0): True, (5, 1): False})
    b = _write(tmp_path / "b", {(5, 0): True, (5, 2): False})
    with pytest.raises(ValueError, match="same jobs"):
        compare_evaluations(CompareConfig(before=a, after=b))
    with pytest.raises(FileNotFoundError, match="after"):
        compare_evaluations(CompareConfig(before=a, after=str(tmp_path / "none")))
    with pytest.raises(ValueError, match="before: required"):
        compare_evaluations(CompareConfig(after=b))


def test_the_script_prints_the_comparison_and_names_a_bad_input(tmp_path):
    a = _write(tmp_path / "a", {(5, 0): True, (5, 1): False})
    run = [sys.executable, str(REPO / "scripts" / "compare_evals.py"), f"before={a}"]
    ok = subprocess.run([*run, f"after={a}"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert ok.returncode == 0 and "all jobs: 1/2 -> 1/2   +0.0 points" in ok.stdout
    bad = subprocess.run([*run, f"after={tmp_path / 'none'}"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert bad.returncode == 2 and "after:" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
