"""tests/slowest_files.txt names test files that exist, once each, and the collection runs them first in its order."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _listed() -> list[str]:
    text = (ROOT / "tests" / "slowest_files.txt").read_text()
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def test_every_listed_file_exists_once():
    listed = _listed()
    assert listed and len(set(listed)) == len(listed)
    missing = [p for p in listed if not (ROOT / p).is_file()]
    assert not missing, f"tests/slowest_files.txt names files that are gone: {missing}"


def test_the_listed_files_are_collected_first(request):
    files = list(dict.fromkeys(str(Path(str(item.path)).relative_to(ROOT)) for item in request.session.items))
    listed = [p for p in _listed() if p in files]  # a run of a few files collects only those
    assert files[:len(listed)] == listed
