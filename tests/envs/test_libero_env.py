"""Real LIBERO env: Gymnasium contract, observation convention, chunking, horizon, input errors."""
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from envs import libero_suites
from envs.libero_env import LiberoEnv, LiberoEnvConfig
from envs.spaces import check_instruction

pytestmark = [pytest.mark.libero, pytest.mark.slow]


@pytest.fixture(scope="module")
def env():
    e = LiberoEnv(LiberoEnvConfig(suite="libero_spatial", task_id=1, chunk_len=4, max_steps=10, fast_render=True))
    yield e
    e.close()


def test_check_env_passes(env):
    check_env(env, skip_render_check=True)


def test_observation_convention(env):
    obs, info = env.reset(seed=0, options={"init_state_id": 2})
    assert info["init_state_id"] == 2 and info["task_id"] == 1
    assert obs["image"].dtype == np.uint8 and obs["image"].shape == (2, 64, 64, 3)
    assert obs["state"].dtype == np.float32 and obs["state"].shape == (8,)
    assert obs["instruction"] == libero_suites.get_task("libero_spatial", 1).language
    assert env.observation_space.contains(obs)
    # Upright agentview: the bright table fills the bottom of the frame, the robot and the grey
    # wall the top. An unflipped (upside-down) robosuite render has it the other way round.
    agent = obs["image"][0].astype(np.float32)
    assert agent[-16:].mean() > agent[:16].mean() + 20
    # State: eef position is above the table (z ~ 1.0-1.2 m), gripper open after the settle steps.
    assert 0.9 < obs["state"][2] < 1.4
    assert obs["state"][6] > 0.02 and obs["state"][7] < -0.02


def test_seeded_reset_is_reproducible(env):
    a, _ = env.reset(seed=7)
    b, _ = env.reset(seed=7)
    np.testing.assert_array_equal(a["image"], b["image"])
    np.testing.assert_array_equal(a["state"], b["state"])


def test_the_settle_steps_unrendered_leave_the_episode_as_rendering_every_step_does(env):
    # start_episode renders only the last settle step; here every settle step is rendered, as LIBERO does
    raw, init = env.raw, env.init_states[3]
    push = np.array([0.3, 0.0, -0.2, 0.0, 0.0, 0.0, -1.0], np.float32)
    runs = []
    for fast in (True, False):
        saved = np.random.get_state()
        np.random.seed(11)
        if fast:
            obs = libero_suites.start_episode(raw, init, settle_steps=10)
        else:
            libero_suites.reset_scene(raw)
            raw.set_init_state(init)
            for _ in range(10):
                obs = raw.step(libero_suites.SETTLE_ACTION.copy())[0]
        np.random.set_state(saved)
        state = raw.env.sim.get_state().flatten().copy()
        after = [raw.step(push)[0] for _ in range(3)]
        runs.append((obs, state, after))
    (a, state_a, after_a), (b, state_b, after_b) = runs
    np.testing.assert_array_equal(state_a, state_b)
    for x, y in [(a, b), *zip(after_a, after_b)]:
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)
    assert a["agentview_image"].mean() > 50  # the returned frame was rendered, not blank
    assert "render" not in vars(raw.env.sim)  # the blank renderer is gone after the start


def test_chunked_and_single_steps_and_horizon(env):
    env.reset(seed=0, options={"init_state_id": 0})
    up = np.zeros((4, 7), np.float32)
    up[:, 2] = 1.0  # move the gripper up: z must rise
    obs0 = env._last_obs["state"].copy()
    obs, r, term, trunc, info = env.step(up)
    assert info["steps"] == 4 and env.t == 4 and not term and not trunc and r == 0.0
    assert obs["state"][2] > obs0[2] + 0.01
    obs, r, term, trunc, info = env.step_single(np.zeros(7, np.float32))
    assert info["steps"] == 1 and env.t == 5
    obs, r, term, trunc, info = env.step(np.zeros((4, 7), np.float32))
    assert env.t == 9 and not trunc
    # The horizon (10) falls inside the next chunk: only one of its 4 actions runs.
    obs, r, term, trunc, info = env.step(np.zeros((4, 7), np.float32))
    assert info["steps"] == 1 and env.t == 10 and trunc and not term
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros((4, 7), np.float32))


@pytest.mark.parametrize(
    "action, match",
    [
        (np.zeros((3, 7), np.float32), "shape"),
        (np.zeros((4, 6), np.float32), "shape"),
        (np.full((4, 7), np.nan, np.float32), "NaN"),
        (np.full((4, 7), np.inf, np.float32), "NaN or inf"),
        (np.full((4, 7), 1.5, np.float32), r"\[-1, 1\]"),
    ],
)
def test_bad_actions_are_rejected(env, action, match):
    env.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        env.step(action)
    with pytest.raises(ValueError, match="action"):
        env.step_single(np.array([0, 0, 0, 0, 0, 0, 2.0], np.float32))


def test_drawn_layouts_are_their_ids_alone(env):
    # a drawn layout's scene depends on its id only (not the reset's seed), and two ids draw two scenes
    base = libero_suites.DRAWN_LAYOUT_BASE
    a, info = env.reset(seed=1, options={"init_state_id": base + 3})
    qpos_a = env.raw.sim.data.qpos.copy()
    b, _ = env.reset(seed=2, options={"init_state_id": base + 3})
    np.testing.assert_array_equal(a["image"], b["image"])
    np.testing.assert_array_equal(qpos_a, env.raw.sim.data.qpos)
    assert info["init_state_id"] == base + 3
    c, _ = env.reset(seed=1, options={"init_state_id": base + 4})
    assert np.abs(c["image"].astype(int) - a["image"].astype(int)).mean() > 1.0  # the objects moved
    official, _ = env.reset(seed=1, options={"init_state_id": 3})
    assert np.abs(official["image"].astype(int) - a["image"].astype(int)).mean() > 1.0
    assert 0.9 < a["state"][2] < 1.4 and a["state"][6] > 0.02  # settled as an official start, gripper open


def test_bad_reset_options(env):
    for bad in (50, -1):  # past the official init states, below the drawn layouts
        with pytest.raises(ValueError, match="init_state_id"):
            env.reset(options={"init_state_id": bad})
    with pytest.raises(ValueError, match="unknown keys"):
        env.reset(options={"init_state": 1})


def test_unknown_suite_and_task_ids():
    with pytest.raises(ValueError, match="suite"):
        LiberoEnv(LiberoEnvConfig(suite="libero_nonexistent"))
    with pytest.raises(ValueError, match=r"task_id: expected an integer in \[0, 9\]"):
        LiberoEnv(LiberoEnvConfig(suite="libero_spatial", task_id=10))
    with pytest.raises(ValueError, match="views"):
        LiberoEnv(LiberoEnvConfig(views=("top",)))


def test_all_five_suites_resolve_tasks():
    for suite, info in libero_suites.SUITES.items():
        last = libero_suites.get_task(suite, info.num_tasks - 1)
        assert last.init_states.ndim == 2 and len(last.init_states) >= 10
        check_instruction(last.language)


def test_registry_suites_are_accepted_with_their_init_states():
    names = libero_suites.registry_suites()
    assert set(libero_suites.SUITES) <= set(names)
    variant = "libero_spatial_swap"  # LIBERO-PRO's variant with objects swapped; its init states ship
    assert variant in names
    info = libero_suites.suite_info(variant)
    assert info.max_steps == 220 and info.num_tasks >= 1  # the horizon of the suite it varies
    env = LiberoEnv(LiberoEnvConfig(suite=variant, task_id=0, fast_render=True))
    try:
        obs, _ = env.reset(seed=0, options={"init_state_id": 0})
        assert obs["image"].dtype == np.uint8 and len(libero_suites.get_task(variant, 0).init_states) >= 1
    finally:
        env.close()
    with pytest.raises(ValueError, match=f"registry holds .*{variant}"):
        libero_suites.suite_info("libero_mars")
    with pytest.raises(FileNotFoundError, match="no official init states"):  # listed, files not installed
        libero_suites.get_task("libero_spatial_env", 0)


def test_fast_render_xml_keeps_geometry():
    xml = ('<mujoco><asset><material name="m" reflectance="0.5"/></asset>'
           '<worldbody><geom size="1"/></worldbody></mujoco>')
    out = libero_suites.fast_render_xml(xml)
    assert 'offsamples="0"' in out and 'reflectance="0"' in out and '<geom size="1"' in out


def test_scene_errors_surface_instead_of_hanging():
    # LIBERO's own reset retries forever on any exception; ours must raise it.
    def broken(xml: str) -> str:
        raise KeyError("broken scene processor")

    env = LiberoEnv(LiberoEnvConfig(task_id=0, settle_steps=0), xml_processor=broken)
    try:
        with pytest.raises(KeyError, match="broken scene processor"):
            env.reset(seed=0)
    finally:
        env.close()
