"""Scripts and benchmarks are entry points over the installed packages: each runs as a file from any
folder (`python scripts/X.py`, as README and the Makefile write it) and as a module (`python -m`),
with no path set-up of its own; nothing in the tree edits the import path."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (REPO / "scripts").glob("*.py") if p.name != "__init__.py")
# modules the benchmarks import, not benchmarks
LIBRARY = ("__init__.py", "protocol.py", "inputs.py", "gate_side.py", "ledger.py", "task_gate.py",
           "rank_candidates.py", "recipe_inputs.py", "rl_gain_args.py", "rl_gain_report.py")
BENCHES = sorted(p.name for p in (REPO / "bench").glob("*.py") if p.name not in LIBRARY)


def _help(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args, "--help"], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_nothing_edits_the_import_path():
    needle = "sys.path." + "insert"  # split, so that this file does not match itself
    folders = ("envs", "infra", "robot_data", "world_models", "policies", "imagination", "scripts", "bench", "tests")
    offenders = [str(p.relative_to(REPO)) for d in folders for p in (REPO / d).rglob("*.py") if needle in p.read_text()]
    assert offenders == []


def test_every_script_has_a_main_and_no_library_code():
    for name in SCRIPTS:
        text = (REPO / "scripts" / name).read_text()
        assert "def main(cfg" in text, name
        assert len(text.splitlines()) <= 60, f"{name}: a script is a thin main(cfg) over the library"


def test_every_bench_file_is_a_benchmark_or_a_listed_library_module():
    # a new helper module must be listed in LIBRARY, and a benchmark must run as a file; this fast check says which
    # file broke that before the slow --help runs below do
    for p in sorted((REPO / "bench").glob("*.py")):
        is_entry = 'if __name__ == "__main__":' in p.read_text()
        assert is_entry == (p.name in BENCHES), f"bench/{p.name}: add it to LIBRARY or give it a main"


@pytest.mark.slow
@pytest.mark.parametrize("folder, name", [("scripts", s) for s in SCRIPTS] + [("bench", b) for b in BENCHES])
def test_runs_as_a_file_from_another_folder(folder, name, tmp_path):
    out = _help([str(REPO / folder / name)], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("module", ["scripts.loop", "scripts.eval_policy", "bench.rl_gain"])
def test_runs_as_a_module(module, tmp_path):
    out = _help(["-m", module], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout
