"""Several suites in one evaluation, reported per suite and averaged (imagination/eval/suites.py)."""
from __future__ import annotations

import json

import pytest

from imagination.eval.real_rollouts import EvalPolicyConfig
from imagination.eval.suites import evaluate_suites, merge_results, suite_table, table_markdown


def _result(successes: int, episodes: int) -> dict:
    rate = successes / episodes
    return {"overall": {"successes": successes, "episodes": episodes, "success_rate": rate, "ci95": [0.1, 0.9]},
            "per_task": {"0": {"success_rate": rate}}}


def test_average_weighs_suites_equally_and_pooled_counts_episodes():
    table = suite_table({"libero_spatial": _result(9, 10), "libero_object": _result(10, 40)})
    assert table["average"] == pytest.approx((0.9 + 0.25) / 2)
    assert table["pooled"]["successes"] == 19 and table["pooled"]["episodes"] == 50
    md = table_markdown(table, "policy.pt")
    assert "| policy | Spatial | Object | Average |" in md and "| 57.5 |" in md


def test_merged_results_keep_each_suite_apart():
    def result(outcomes: list[bool], recorded: int) -> dict:
        r = _result(sum(outcomes), len(outcomes))
        r["episodes"] = [{"task_id": 0, "init_state_id": i, "seed": 7, "success": ok, "steps": 10,
                          "outcome": "success" if ok else "never lifted"} for i, ok in enumerate(outcomes)]
        return {**r, "recorded": {"episodes": recorded, "failures": len(outcomes) - sum(outcomes)}}

    merged = merge_results({"libero_spatial": result([True, False], 2), "libero_object": result([True, True, True], 3)})
    assert set(merged["per_task"]) == {"libero_spatial/0", "libero_object/0"}
    assert merged["env"] == "libero_spatial+libero_object"
    assert merged["overall"]["successes"] == 4 and merged["overall"]["episodes"] == 5
    assert merged["overall"]["failures"] == {"never lifted": 1}
    assert [e["suite"] for e in merged["episodes"]] == ["libero_spatial"] * 2 + ["libero_object"] * 3
    assert merged["recorded"] == {"episodes": 5, "failures": 1}
    assert merged["suites"]["average"] == pytest.approx((0.5 + 1.0) / 2)


def test_bad_suite_lists_are_refused(tmp_path):
    with pytest.raises(ValueError, match="distinct"):
        evaluate_suites(EvalPolicyConfig(suites=["libero_goal", "libero_goal"], out_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="LIBERO suites only"):
        evaluate_suites(EvalPolicyConfig(suites=["libero_goal", "imagination"], out_dir=str(tmp_path)))


@pytest.mark.libero
def test_two_real_suites_in_one_run(tmp_path):
    cfg = EvalPolicyConfig(checkpoint="random", suites=["libero_object", "libero_goal"], tasks=[0],
                           episodes_per_task=1, num_envs=1, max_steps=8, action_steps=8, videos=0,
                           out_dir=str(tmp_path))
    table = evaluate_suites(cfg)
    assert list(table["suites"]) == ["libero_object", "libero_goal"]
    for suite in table["suites"]:
        r = json.loads((tmp_path / suite / "results.json").read_text())
        assert r["env"] == suite and r["overall"]["episodes"] == 1
    assert json.loads((tmp_path / "suites.json").read_text())["pooled"]["episodes"] == 2
    assert "| Object | Goal | Average |" in (tmp_path / "suites.md").read_text()
