"""imagination.eval.reality_gate: jobs pooled over policies, the verdict's three checks on hand-made figures,
and the whole comparison on real-format evaluation files (a judge as good as reality, one worse, one that
ranks nothing, and the cases where no comparison can be made)."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from imagination.eval.reality_gate import (
    POLICY_STRIDE,
    against_reality,
    judge_probs,
    load_reality,
    reality_missing,
    reality_verdict,
    tag_jobs,
)


def test_jobs_of_several_policies_pool_apart():
    eps = [{"task_id": 1, "init_state_id": 12, "success": True}]
    assert tag_jobs(eps, 0) == eps and tag_jobs(eps, 2)[0]["init_state_id"] == 2 * POLICY_STRIDE + 12
    assert eps[0]["init_state_id"] == 12  # the caller's records are not changed
    records = [{"policy": "bc", "task_id": 1, "init_state_id": 12, "max_success_prob": 0.25},
               {"policy": "rl", "task_id": 1, "init_state_id": 12, "max_success_prob": 0.75}]
    assert judge_probs(records, ["bc", "rl"]) == {(1, 12): 0.25, (1, POLICY_STRIDE + 12): 0.75}
    with pytest.raises(ValueError, match="policy 'rl' is not one of"):
        judge_probs(records, ["bc"])
    with pytest.raises(ValueError, match="appears twice"):
        judge_probs(records[:1] * 2, ["bc"])


GOOD_GAP = {"gap": -0.01, "gap_ci95": [-0.11, 0.10]}


def test_the_verdict_passes_a_judge_not_shown_worse_than_a_re_run():
    v = reality_verdict((0.64, 0.80), GOOD_GAP, 0.74)
    assert v.passed and v.measurable and v.reasons == ()
    # the edges: a gap interval ending exactly at 0 and p exactly at 0.05 are not "shown"
    assert reality_verdict((0.64, 0.80), {"gap": -0.1, "gap_ci95": [-0.2, 0.0]}, 0.05).passed


@pytest.mark.parametrize("auc_ci, gap, joint_p, reason", [
    ((0.45, 0.70), GOOD_GAP, 0.74, "not shown to rank real outcomes at all"),
    ((0.50, 0.70), GOOD_GAP, 0.74, "not shown to rank real outcomes at all"),
    ((0.60, 0.70), {"gap": -0.15, "gap_ci95": [-0.25, -0.01]}, 0.74,
     "worse than one real re-run: judge - reality -0.15"),
    ((0.64, 0.80), GOOD_GAP, 2.3e-6, "errs by task more than a real re-run: joint paired p = 2.3e-06 < 0.05"),
])
def test_each_check_fails_alone_and_says_why(auc_ci, gap, joint_p, reason):
    v = reality_verdict(auc_ci, gap, joint_p)
    assert not v.passed and v.measurable and len(v.reasons) == 1 and reason in v.reasons[0]


def test_an_undefined_figure_fails_unmeasured():
    v = reality_verdict((math.nan, math.nan), {"gap": math.nan, "gap_ci95": [math.nan, math.nan]}, 1.0)
    assert not v.passed and not v.measurable


# ---------------------------------------------------------------- on evaluation files as the benches write them
TASKS, INITS = range(4), range(10, 30)  # 80 jobs a policy: enough pairs for the bootstrap to separate judges


def _write_eval(path: Path, outcomes: dict[tuple[int, int], bool]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"episodes": [{"task_id": t, "init_state_id": i, "success": ok}
                                             for (t, i), ok in outcomes.items()]}))


@pytest.fixture
def reality(tmp_path):
    """Two policies' recorded gate outcomes and 2 repeats that flip 10% of them (rates 0.3-0.7 by task)."""
    rng = np.random.default_rng(0)
    gate, ceiling = tmp_path / "gate", tmp_path / "gate_ceiling" / "seed"
    policies = {"bc": "bc/policy.pt", "rl": "rl/policy.pt"}
    truth = {}
    for name in policies:
        ref = {(t, i): bool(rng.random() < 0.3 + 0.1 * t) for t in TASKS for i in INITS}
        truth[name] = ref
        _write_eval(gate / f"eval_{name}" / "results.json", ref)
        for k in (1, 2):
            _write_eval(ceiling / f"{name}_r{k}" / "results.json",
                        {job: ok != bool(rng.random() < 0.1) for job, ok in ref.items()})
    ceiling.mkdir(parents=True, exist_ok=True)
    (ceiling / "gate_ceiling.json").write_text(json.dumps({"repeats": 2, "policies": policies}))
    return gate, ceiling, policies, truth


def _records(truth: dict, prob) -> list[dict]:
    return [{"policy": name, "task_id": t, "init_state_id": i, "max_success_prob": prob(ok)}
            for name, ref in truth.items() for (t, i), ok in ref.items()]


def test_load_reality_pools_the_recorded_and_repeated_episodes(reality):
    gate, ceiling, policies, truth = reality
    reference, repeats = load_reality(ceiling, gate, list(policies))
    assert len(reference) == 160 and len(repeats) == 2 and all(len(r) == 160 for r in repeats)
    tagged = {(e["task_id"], e["init_state_id"]): e["success"] for e in reference}
    assert tagged[(2, 15)] == truth["bc"][(2, 15)] and tagged[(2, POLICY_STRIDE + 15)] == truth["rl"][(2, 15)]


def test_a_judge_that_knows_the_outcome_passes_and_one_that_knows_nothing_fails(reality):
    gate, ceiling, policies, truth = reality
    sure = against_reality(_records(truth, lambda ok: 0.9 if ok else 0.1), policies, ceiling, gate, (0.9, 1.0), 0.9)
    assert sure["measured"] and sure["verdict"] == "PASS" and sure["repeats"] == 2
    assert sure["judge_auc_within_task"] == pytest.approx(1.0) and sure["gap"] > 0  # a re-run flips 10%
    # a constant probability ties every pair (AUC 0.5): shown worse than a re-run, whose flips are few
    flat = against_reality(_records(truth, lambda ok: 0.5), policies, ceiling, gate, (0.5, 0.5), 0.9)
    assert flat["measured"] and flat["verdict"] == "FAIL" and flat["gap_ci95"][1] < 0
    assert any("worse than one real re-run" in r for r in flat["reasons"])
    assert any("not shown to rank real outcomes at all" in r for r in flat["reasons"])


def test_without_matching_repeats_nothing_is_claimed(reality, tmp_path):
    gate, ceiling, policies, truth = reality
    records = _records(truth, lambda ok: 0.9 if ok else 0.1)
    assert "not found" in against_reality(records, policies, tmp_path / "none", gate, (0.9, 1.0), 0.9)["why"]
    other = against_reality(records, {"bc": "other.pt", "rl": "rl/policy.pt"}, ceiling, gate, (0.9, 1.0), 0.9)
    assert not other["measured"] and "repeated the policies" in other["why"]
    fewer = [r for r in records if r["init_state_id"] != 10]  # a judge of other jobs than the repeats'
    fewer_result = against_reality(fewer, policies, ceiling, gate, (0.9, 1.0), 0.9)
    assert not fewer_result["measured"] and "expected the reference's 160 jobs" in fewer_result["why"]
    (ceiling / "rl_r2" / "results.json").unlink()
    gone = against_reality(records, policies, ceiling, gate, (0.9, 1.0), 0.9)
    assert not gone["measured"] and "the repeats' evaluations are missing (rl_r2)" in gone["why"]
    # the same reasons, cheaply and before anything is imagined (bench/reward_signal.py checks them first)
    assert reality_missing(ceiling, policies) == gone["why"]
    assert "not found" in str(reality_missing(tmp_path / "none", policies))
    assert "repeated the policies" in str(reality_missing(ceiling, {"bc": "other.pt", "rl": "rl/policy.pt"}))
    (ceiling / "rl_r2").mkdir(exist_ok=True)
    (ceiling / "rl_r2" / "results.json").write_text((ceiling / "rl_r1" / "results.json").read_text())
    assert reality_missing(ceiling, policies) is None
