"""Every pointer from code or a preset to a section of a page (`docs/<page>.md, "<Section>"`) names a heading that
exists: moving a section (a guide's experiment log into the notebook) must move its pointers with it."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("envs", "infra", "robot_data", "world_models", "policies", "imagination", "scripts", "bench", "configs")
# docs/<page>.md, "<Section>" -- also when the pointer runs over comment lines or joined string literals
POINTER = re.compile(r'(docs/[\w/.-]+\.md),\s*\\?"((?:[^"\\]|\\.)+?)\\?"')


def _flat(text: str) -> str:
    """The text with comment continuations and adjacent string literals joined, lines joined by one space."""
    text = re.sub(r'\s*\n\s*#\s*', " ", text)
    text = re.sub(r'"\s*\n\s*"', "", text)
    return re.sub(r"\s*\n\s*", " ", text)


def _pointers() -> list[tuple[str, str, str]]:
    out = []
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in (".py", ".yaml"):
                for m in POINTER.finditer(_flat(path.read_text())):
                    out.append((str(path.relative_to(REPO)), m.group(1), m.group(2).replace('\\"', '"').strip()))
    return out


def test_every_section_pointer_names_a_heading_of_its_page():
    pointers = _pointers()
    assert len(pointers) >= 30  # the regex finds the pointers that are there (41 when written)
    headings: dict[str, list[str]] = {}
    stale = []
    for source, page, section in pointers:
        doc = REPO / page
        if not doc.is_file():
            stale.append(f"{source}: {page} does not exist")
            continue
        if page not in headings:
            headings[page] = [line.lstrip("#").strip() for line in doc.read_text().splitlines() if line.startswith("#")]
        # a heading may go on after the quoted words ("... (`imagination/eval/reality_gate.py`)")
        if not any(h == section or h.startswith(section) for h in headings[page]):
            stale.append(f"{source}: {page} has no section {section!r}")
    assert not stale, "\n".join(stale)
