"""The ledger of recipes scored on a benchmark's jobs (bench/ledger.py)."""
import json

from bench.ledger import record_scored, scored_recipes


def test_the_ledger_counts_each_recipe_once(tmp_path):
    ledger = tmp_path / "scored.json"
    assert scored_recipes(ledger) == []
    entry = {"protocol": "v2", "recipe": "grasp_floor", "overrides": []}
    assert record_scored(ledger, entry) == 1 and record_scored(ledger, entry) == 1
    assert record_scored(ledger, {**entry, "overrides": ["iterations=20"]}) == 2
    assert scored_recipes(ledger)[1]["overrides"] == ["iterations=20"]


def test_a_recipe_is_its_config_whatever_its_seed_folder_or_device(tmp_path):
    from dataclasses import replace

    from bench.rl_gain_report import recipe_identity
    from imagination.rl.training import ImagineRLConfig
    from infra.cli import load_config

    cfg = load_config(ImagineRLConfig, "grasp_floor", group="rl")
    again = replace(cfg, seed=2, out_dir="elsewhere", device="cuda",
                    imagination=replace(cfg.imagination, device="cuda"))
    assert recipe_identity(again) == recipe_identity(cfg)
    shared = replace(cfg, adapt=replace(cfg.adapt, out_dir="run/adapt", num_threads=1))  # where seeds adapt
    assert recipe_identity(shared) == recipe_identity(cfg)
    assert recipe_identity(replace(cfg, adapt=replace(cfg.adapt, steps=7))) != recipe_identity(cfg)
    ledger = tmp_path / "scored.json"
    assert record_scored(ledger, {"protocol": "v2", "recipe": recipe_identity(cfg)}) == 1
    assert record_scored(ledger, {"protocol": "v2", "recipe": recipe_identity(again)}) == 1  # the same recipe
    assert record_scored(ledger, {"protocol": "v2", "recipe": recipe_identity(replace(cfg, iterations=24))}) == 2


def test_a_field_added_since_an_entry_was_written_does_not_count_the_recipe_twice(tmp_path):
    """An entry written before `imagination.object_reader` existed is the same recipe as one with it at its default;
    a recipe that sets it is another one."""
    from dataclasses import replace

    from bench.rl_gain_report import canonical_entry, recipe_identity
    from imagination.rl.training import ImagineRLConfig
    from infra.cli import load_config

    cfg = load_config(ImagineRLConfig, "grasp_floor", group="rl")
    recipe = recipe_identity(cfg)
    recipe["imagination"].pop("object_reader")
    old = {"protocol": "v2", "recipe": recipe}
    ledger = tmp_path / "scored.json"
    assert record_scored(ledger, old, canonical_entry) == 1
    now = {"protocol": "v2", "recipe": recipe_identity(cfg)}
    assert record_scored(ledger, now, canonical_entry) == 1
    reader = replace(cfg, imagination=replace(cfg.imagination, object_reader="reader.pt"))
    assert record_scored(ledger, {"protocol": "v2", "recipe": recipe_identity(reader)}, canonical_entry) == 2
    # a ledger that already counted both forms merges them
    ledger.write_text(json.dumps({"scored": [old, now]}))
    assert record_scored(ledger, now, canonical_entry) == 1 and len(scored_recipes(ledger)) == 1


def test_a_recipes_seeds_share_one_adaptation_folder():
    from dataclasses import replace
    from pathlib import Path

    from bench.rl_gain import shared_adaptation
    from imagination.rl.training import ImagineRLConfig
    from infra.cli import load_config

    cfg = load_config(ImagineRLConfig, "crn_goal", group="rl")
    assert cfg.adapt.steps > 0
    assert shared_adaptation(cfg, Path("run/adapt")).adapt.out_dir == "run/adapt"
    own = replace(cfg, adapt=replace(cfg.adapt, out_dir="mine"))
    assert shared_adaptation(own, Path("run/adapt")).adapt.out_dir == "mine"  # a folder named by the user stays
    off = replace(cfg, adapt=replace(cfg.adapt, steps=0))
    assert shared_adaptation(off, Path("run/adapt")) == off


def test_the_project_roots_keep_their_ledgers_in_the_repository(tmp_path, monkeypatch):
    """A fresh checkout rebuilds outputs/, so the ledger of the project's own benchmark roots lives in bench/scored/;
    any other root keeps its own beside its outputs."""
    from pathlib import Path

    from bench.protocol import LEDGERS, PROTOCOLS, SUITE_ROOTS, ledger_path

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)
    for root in [*SUITE_ROOTS.values(), *(p.root for p in PROTOCOLS.values())]:
        assert ledger_path(root) == LEDGERS / f"{Path(root).name}.json"
        assert ledger_path(str(repo / root)) == ledger_path(root)  # the same root, absolute
        assert LEDGERS.is_relative_to(repo) and not ledger_path(root).is_relative_to(repo / "outputs")
    assert ledger_path(str(tmp_path)) == tmp_path / "scored.json"
    for ledger in LEDGERS.glob("*.json"):  # every committed ledger reads, and names the protocol of each entry
        assert all(e["protocol"] in PROTOCOLS for e in scored_recipes(ledger)), ledger
