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


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's rule) gives a heading: lower case, punctuation dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    """Every heading anchor of `page` (a repeated heading gets -1, -2, ...; fenced code is not a heading)."""
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text().splitlines():
        fenced ^= line.startswith("```")
        if fenced or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        seen[slug] = seen.get(slug, -1) + 1
    return {slug if n == 0 else f"{slug}-{n}" for slug, last in seen.items() for n in range(last + 1)}


def test_every_markdown_link_to_a_section_names_a_heading():
    """README and docs link sections of docs/results.md and the guides by anchor: a renamed heading breaks them."""
    link = re.compile(r"\]\(([^)\s#]*)#([^)\s]+)\)")
    checked, stale = 0, []
    for md in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for m in link.finditer(md.read_text()):
            target = md.parent / m.group(1) if m.group(1) else md
            checked += 1
            if not target.is_file():
                stale.append(f"{md.relative_to(REPO)}: {m.group(1)} does not exist")
            elif m.group(2) not in _anchors(target):
                stale.append(f"{md.relative_to(REPO)}: {m.group(1) or md.name} has no heading #{m.group(2)}")
    assert checked >= 20, checked  # the pattern finds the links that are there
    assert not stale, "\n".join(stale)
