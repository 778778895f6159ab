"""The ledger of recipes scored on a benchmark's jobs (bench/ledger.py)."""
from bench.ledger import record_scored, scored_recipes


def test_the_ledger_counts_each_recipe_once(tmp_path):
    ledger = tmp_path / "scored.json"
    assert scored_recipes(ledger) == []
    entry = {"protocol": "v2", "recipe": "grasp_floor", "overrides": []}
    assert record_scored(ledger, entry) == 1 and record_scored(ledger, entry) == 1
    assert record_scored(ledger, {**entry, "overrides": ["iterations=20"]}) == 2
    assert scored_recipes(ledger)[1]["overrides"] == ["iterations=20"]
