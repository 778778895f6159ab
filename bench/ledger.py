"""The ledger of recipes scored on a benchmark's own jobs (bench/protocol.py ledger_path: in the repository for the
project's own roots, else <root>/scored.json): every recipe is scored there once, with all its seeds, and
bench/rl_gain.py prints how many have been, so that a figure can be read against the number of looks that produced
it."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from infra.atomic import atomic_write_text


def scored_recipes(ledger: Path) -> list[dict]:
    """The recipes scored on the benchmark's jobs so far (the protocol's ledger; [] before the first)."""
    return json.loads(ledger.read_text())["scored"] if ledger.is_file() else []


def record_scored(ledger: Path, entry: dict, canonical: Callable[[dict], dict] = lambda e: e) -> int:
    """Add a recipe to the ledger unless it is there already; returns the number of distinct recipes.

    canonical: an entry as the current code would write it. Why: a config field added since an entry was written
    (at its default) must not make the same recipe count twice; entries that become equal are merged."""
    scored: list[dict] = []
    for e in [*scored_recipes(ledger), entry]:
        if canonical(e) not in [canonical(s) for s in scored]:
            scored.append(e)
    if scored != scored_recipes(ledger):
        atomic_write_text(ledger, json.dumps({"scored": scored}, indent=2))
    return len(scored)


__all__ = ["record_scored", "scored_recipes"]
