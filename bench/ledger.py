"""The ledger of recipes scored on a benchmark's own jobs (<protocol root>/scored.json): every recipe is scored there
once, with all its seeds, and bench/rl_gain.py prints how many have been, so that a figure can be read against the
number of looks that produced it."""
from __future__ import annotations

import json
from pathlib import Path

from envs.atomic import atomic_write_text


def scored_recipes(ledger: Path) -> list[dict]:
    """The recipes scored on the benchmark's jobs so far (the protocol's ledger; [] before the first)."""
    return json.loads(ledger.read_text())["scored"] if ledger.is_file() else []


def record_scored(ledger: Path, entry: dict) -> int:
    """Add a recipe to the ledger unless it is there already (the same recipe and seeds); returns the count."""
    scored = scored_recipes(ledger)
    if entry not in scored:
        scored.append(entry)
        atomic_write_text(ledger, json.dumps({"scored": scored}, indent=2))
    return len(scored)


__all__ = ["record_scored", "scored_recipes"]
