"""Scripted LIBERO-Spatial experts in real LIBERO: clean successes, labelled failures, input checks.

Runs without cameras (the experts read privileged state only): three env builds (~8 s each) and
eight short episodes, about a minute on 2 cores.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from envs import libero_suites

os.environ.setdefault("MUJOCO_GL", "egl")
pytest.importorskip("libero.libero")

from envs.libero_env import LiberoEnv, LiberoEnvConfig  # noqa: E402
from envs.outcome import outcome  # noqa: E402
from robot_data.collection import CollectConfig, plan_perturbations, validate  # noqa: E402
from robot_data.experts import (  # noqa: E402
    DEFAULT_PERTURBATIONS,
    PERTURBATION_KINDS,
    Perturbation,
    PerturbedExpert,
    SpatialExpert,
    run_expert_episode,
)

pytestmark = [pytest.mark.slow, pytest.mark.libero]

SUITE = "libero_spatial"


def _make_env(task_id: int):
    """State-only raw LIBERO env (no cameras): the expert reads simulator state."""
    task = libero_suites.get_task(SUITE, task_id)
    return libero_suites.make_raw_env(task), task.init_states


@pytest.fixture(scope="module")
def task0():
    env, states = _make_env(0)
    yield env, states
    env.close()


@pytest.fixture(scope="module")
def task8():
    env, states = _make_env(8)
    yield env, states
    env.close()


def _bowl_plate_xy(obs: dict) -> float:
    return float(np.linalg.norm(obs["akita_black_bowl_1_pos"][:2] - obs["plate_1_pos"][:2]))


@pytest.mark.parametrize("fixture, init_id", [("task0", 3), ("task8", 1)])
def test_expert_succeeds(request, fixture, init_id):
    env, states = request.getfixturevalue(fixture)
    expert = SpatialExpert(rng=np.random.default_rng(0))
    seen = []
    res = run_expert_episode(
        env, states[init_id], expert, reset_seed=init_id, on_step=lambda o, a, r, d: seen.append((a, d))
    )
    assert res.success and env.check_success()
    assert res.steps <= 220 and res.perturbation == "none"
    assert res.actions.shape == (res.steps, 7) and res.actions.dtype == np.float32
    assert np.all(np.abs(res.actions) <= 1.0)
    assert len(res.phases) == res.steps == len(seen) and seen[-1][1]  # done reported at success
    assert {"approach", "descend", "close", "lift", "carry", "lower"} <= set(res.phases)


def test_early_release_fails(task0):
    env, states = task0
    expert = PerturbedExpert(Perturbation("early_release"), rng=np.random.default_rng(1))
    res = run_expert_episode(env, states[0], expert, max_steps=160, reset_seed=0)
    assert res.perturbation == "early_release" and res.info["perturbation"] == "early_release"
    assert "release_dist_m" in res.info  # it did let go during the carry
    assert not res.success and not env.check_success()
    assert res.steps == 160


def test_offset_target_misses_plate(task0):
    env, states = task0
    expert = PerturbedExpert(Perturbation("offset_target", strength=1.0), rng=np.random.default_rng(2))
    last: dict[str, dict] = {}
    res = run_expert_episode(
        env, states[1], expert, max_steps=160, reset_seed=1, on_step=lambda o, a, r, d: last.update(obs=o)
    )
    assert res.perturbation == "offset_target" and "release" in res.phases
    assert not res.success
    assert _bowl_plate_xy(last["obs"]) > 0.03  # LIBERO's On(bowl, plate) needs < 3 cm


def test_perturbation_validation():
    assert set(PERTURBATION_KINDS) == {"noise", "wrong_azimuth", "early_release", "offset_target", "near_miss"}
    # What a collection cycles through by default is unchanged: near_miss is accepted, not added.
    assert DEFAULT_PERTURBATIONS == ("noise", "wrong_azimuth", "early_release", "offset_target")
    assert plan_perturbations(CollectConfig()) == list(DEFAULT_PERTURBATIONS)
    validate(CollectConfig(perturbations=["near_miss", "noise"]))
    with pytest.raises(ValueError, match="perturbations"):
        validate(CollectConfig(perturbations=["near_misses"]))
    with pytest.raises(ValueError):
        Perturbation("teleport")
    with pytest.raises(ValueError):
        Perturbation("noise", strength=-1.0)
    for bad in (-0.01, float("nan")):
        with pytest.raises(ValueError, match="near_miss_offset_m"):
            Perturbation("near_miss", near_miss_offset_m=bad)


def test_bad_inputs_raise(task0):
    env, states = task0
    expert = SpatialExpert()
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="max_steps"):
            run_expert_episode(env, states[0], expert, max_steps=bad)  # type: ignore[arg-type]  # bad on purpose
    with pytest.raises(ValueError, match="settle_steps"):
        run_expert_episode(env, states[0], expert, settle_steps=-1)
    with pytest.raises(ValueError, match="init_state"):
        run_expert_episode(env, states[0][:50], expert)
    with pytest.raises(ValueError, match="init_state"):
        run_expert_episode(env, states[:2], expert)
    with pytest.raises(ValueError, match="non-finite"):
        run_expert_episode(env, np.full_like(states[0], np.nan), expert)
    with pytest.raises(ValueError, match="raw_env"):
        run_expert_episode(object(), states[0], expert)
    with pytest.raises(ValueError, match="on_step"):
        run_expert_episode(env, states[0], expert, on_step="not callable")  # type: ignore[arg-type]  # on purpose


@pytest.fixture(scope="module")
def task0_env():
    """A camera-less LiberoEnv (the way label collection runs experts), with the outcome tracker."""
    env = LiberoEnv(LiberoEnvConfig(suite=SUITE, task_id=0, views=(), chunk_len=1, max_steps=160))
    yield env
    env.close()


def test_near_miss_offsets_are_drawn_around_the_clean_plan(task0_env):
    env = task0_env
    env.reset(seed=0, options={"init_state_id": 0})
    clean = SpatialExpert()
    clean.reset(env.raw, env.raw_obs)
    sizes = []
    for seed in range(12):
        expert = PerturbedExpert(Perturbation("near_miss", strength=0.5), rng=np.random.default_rng(seed))
        expert.reset(env.raw, env.raw_obs)
        offset = np.array(expert.perturbation_info["grasp_offset_m"])
        sizes.append(float(np.linalg.norm(offset)))
        assert expert.cfg.max_regrasps == 0 and expert._azimuth == clean._azimuth  # the plan is the clean one
        point, _, _ = expert._grasp_frame(env.raw_obs, expert._azimuth)
        clean_point = clean._grasp_frame(env.raw_obs, clean._azimuth)[0]
        np.testing.assert_allclose(point[:2] - clean_point[:2], offset, atol=1e-4)
    assert max(sizes) <= 0.025 + 1e-4 and max(sizes) > 0.01 and min(sizes) < max(sizes) / 2  # uniform in [0, 2.5 cm]


# Found by a search over offsets and directions on task 0, init state 0: offsets up to ~4 cm still
# pinch the rim (the expert is robust); at 5 cm most directions close on nothing, some pinch the rim's
# edge, lift the bowl ~15 cm and let it slip during the carry.
@pytest.mark.parametrize("offset_m, seed, expected", [
    (0.0, 0, "success"),
    (0.05, 1, "never lifted"),
    (0.05, 6, "lifted, not placed"),
])
def test_near_miss_outcomes(task0_env, offset_m, seed, expected):
    env = task0_env
    expert = PerturbedExpert(Perturbation("near_miss", near_miss_offset_m=offset_m), rng=np.random.default_rng(seed))
    env.reset(seed=seed, options={"init_state_id": 0})
    expert.reset(env.raw, env.raw_obs)
    assert np.linalg.norm(expert.perturbation_info["grasp_offset_m"]) == pytest.approx(offset_m, abs=1e-4)
    done, info = False, {}
    while not done:
        _, _, terminated, truncated, info = env.step_single(expert.act(env.raw_obs))
        done = terminated or truncated
    assert outcome(info["success"], info["object_lift_m"]) == expected, info
    assert expert.regrasps == 0
