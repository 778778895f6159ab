"""Robot deployment: safety limits, e-stop, watchdog, LeRobot adapter, and the loop on the simulated arm.

The LIBERO tests drive the real simulator (`SimArm`) against real policy servers: one in this process
for the end-to-end episode, one subprocess per watchdog test so it can really be frozen or killed.
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from envs.robot.base import RobotStopped, check_observation
from envs.robot.client import PolicyClient
from envs.robot.control import ControlConfig, Watchdog, run_episode
from envs.robot.lerobot_arm import LeRobotArm, LeRobotArmConfig, ee_action, require_lerobot, state_from_ee
from envs.robot.safety import EmergencyStop, SafetyLimits, UnsafeAction, check_limits, clamp_action

ROOT = Path(__file__).resolve().parents[2]
LIMITS = SafetyLimits(workspace_min=[-0.3, -0.3, 0.9], workspace_max=[0.3, 0.3, 1.3], pos_scale=0.05, rot_scale=0.5,
                      max_translation=0.03, max_rotation=0.2, gripper_min=-1.0, gripper_max=0.5)


def state(x: float, y: float, z: float) -> np.ndarray:
    return np.array([x, y, z, np.pi, 0, 0, 0.04, -0.04], np.float32)


# ---------------------------------------------------------------------------------------------- safety
def test_action_inside_limits_is_unchanged():
    a = np.array([0.2, -0.1, 0.3, 0.1, 0.0, -0.2, -1.0], np.float32)
    out, report = clamp_action(a, state(0, 0, 1.1), LIMITS)
    np.testing.assert_allclose(out, a, atol=1e-6)
    assert not report.clamped


def test_workspace_clamps_the_commanded_target_to_the_box():
    out, report = clamp_action(np.array([0, 0, 1, 0, 0, 0, 0]), state(0, 0, 1.29), LIMITS)
    assert report.workspace and 1.29 + out[2] * LIMITS.pos_scale == pytest.approx(1.3, abs=1e-6)
    out, report = clamp_action(np.array([-1, 0, 0, 0, 0, 0, 0]), state(-0.3, 0, 1.1), LIMITS)
    assert report.workspace and out[0] == pytest.approx(0.0, abs=1e-5)  # on the wall: no further out
    # already outside (z above the box): moving further out is refused, moving back is allowed
    out, _ = clamp_action(np.array([0, 0, 1, 0, 0, 0, 0]), state(0, 0, 1.35), LIMITS)
    assert out[2] < 0


def test_random_actions_never_leave_the_limits():
    rng = np.random.default_rng(0)
    lo, hi = np.array(LIMITS.workspace_min), np.array(LIMITS.workspace_max)
    for _ in range(2000):
        s = state(*rng.uniform(lo, hi))
        a = rng.uniform(-3, 3, 7)  # also out of the normalized range
        out, _ = clamp_action(a, s, LIMITS)
        target = s[:3] + out[:3] * LIMITS.pos_scale
        assert np.all(target >= lo - 1e-6) and np.all(target <= hi + 1e-6)
        assert np.linalg.norm(out[:3] * LIMITS.pos_scale) <= LIMITS.max_translation + 1e-6
        assert np.linalg.norm(out[3:6] * LIMITS.rot_scale) <= LIMITS.max_rotation + 1e-6
        assert LIMITS.gripper_min <= out[6] <= LIMITS.gripper_max and np.all(np.abs(out) <= 1)


def test_speed_caps_keep_direction_and_gripper_range():
    out, report = clamp_action(np.array([1, 1, 0, 1, 0, 0, 1.0]), state(0, 0, 1.1), LIMITS)
    d = out[:3] * LIMITS.pos_scale
    assert report.translation and report.rotation and report.gripper
    assert np.linalg.norm(d) == pytest.approx(0.03) and d[0] == pytest.approx(d[1])
    assert np.linalg.norm(out[3:6] * LIMITS.rot_scale) == pytest.approx(0.2) and out[6] == 0.5


def test_unsafe_inputs_and_bad_limits_are_refused():
    with pytest.raises(UnsafeAction, match="action"):
        clamp_action(np.array([np.nan, 0, 0, 0, 0, 0, 0]), state(0, 0, 1), LIMITS)
    with pytest.raises(UnsafeAction, match="state"):
        clamp_action(np.zeros(7), np.full(8, np.inf), LIMITS)
    with pytest.raises(UnsafeAction, match="7 values"):
        clamp_action(np.zeros(6), state(0, 0, 1), LIMITS)
    with pytest.raises(ValueError, match="workspace_min"):
        check_limits(SafetyLimits(workspace_min=[0, 0, 2], workspace_max=[1, 1, 1]))
    with pytest.raises(ValueError, match="max_translation"):
        check_limits(SafetyLimits(max_translation=0))


def test_emergency_stop_latches_and_catches_ctrl_c():
    estop = EmergencyStop()
    calls: list[str] = []
    estop.on_trigger(calls.append)
    with estop.sigint():
        os.kill(os.getpid(), signal.SIGINT)  # first Ctrl-C: a stop, not a KeyboardInterrupt
        assert estop.wait(2.0)
    assert estop.is_set() and calls == ["emergency stop: Ctrl-C"] and "Ctrl-C" in estop.reason
    estop.trigger("again")
    assert estop.reason == "emergency stop: Ctrl-C"  # the first reason is kept
    estop.clear()
    assert not estop.is_set()


def test_watchdog_fires_only_after_its_deadline():
    fired: list[str] = []
    dog = Watchdog(fired.append)
    try:
        dog.arm(5.0, "slow")  # disarmed at once: 5 s leaves room for a loaded machine's scheduling stalls
        assert not dog.disarm() and not fired
        dog.arm(0.05, "stalled")
        deadline = time.monotonic() + 30  # the timer thread fires after 0.05 s; under load it may run late
        while not fired and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fired == ["stalled"] and dog.disarm()
    finally:
        dog.close()


# ---------------------------------------------------------------------------------------------- lerobot
@pytest.mark.skipif(__import__("importlib.util").util.find_spec("lerobot") is not None, reason="lerobot installed")
def test_lerobot_arm_without_lerobot_names_the_package():
    with pytest.raises(ImportError, match="`lerobot` package"):
        require_lerobot()
    with pytest.raises(ImportError, match="docs/deploy.md"):
        LeRobotArm(object(), LeRobotArmConfig(cameras={"agentview": "front", "wrist": "wrist"}, instruction="x"))


def test_lerobot_end_effector_conversions():
    cfg = LeRobotArmConfig(gripper_open=100.0, gripper_closed=0.0, pos_scale=0.01, rot_scale=0.1)
    raw = {"ee.x": 0.3, "ee.y": 0.0, "ee.z": 0.2, "ee.wx": np.pi, "ee.wy": 0.0, "ee.wz": 0.0, "gripper.pos": 100.0}
    s = state_from_ee(raw, cfg)
    np.testing.assert_allclose(s, [0.3, 0, 0.2, np.pi, 0, 0, 0.04, -0.04], atol=1e-6)
    hold = ee_action(np.array([0, 0, 0, 0, 0, 0, -1.0]), s, cfg)  # zero motion, gripper open
    assert hold["ee.x"] == pytest.approx(0.3) and hold["ee.gripper_pos"] == pytest.approx(100.0)
    assert abs(abs(hold["ee.wx"]) - np.pi) < 1e-5
    move = ee_action(np.array([1, 0, -1, 0, 0, 1, 1.0]), s, cfg)
    assert move["ee.x"] == pytest.approx(0.31) and move["ee.z"] == pytest.approx(0.19)
    assert move["ee.gripper_pos"] == pytest.approx(0.0)  # +1 = closed
    with pytest.raises(KeyError, match="ee.z"):
        state_from_ee({k: v for k, v in raw.items() if k != "ee.z"}, cfg)


def test_check_observation_names_the_field():
    good = {"image": np.zeros((2, 64, 64, 3), np.uint8), "state": np.zeros(8, np.float32), "instruction": "x"}
    assert check_observation(good, 2, 64) is good
    for key, bad, field in (("image", np.zeros((2, 64, 64, 3)), "image"), ("state", np.zeros(7, np.float32), "state"),
                            ("instruction", "", "instruction")):
        with pytest.raises(ValueError, match=field):
            check_observation({**good, key: bad}, 2, 64)


# ---------------------------------------------------------------------------------------------- real LIBERO
@pytest.fixture(scope="module")
def arm():
    """One simulated arm (real LIBERO-Spatial task 0) for every test below: building it takes ~10 s."""
    from envs.robot.sim_arm import SimArm, SimArmConfig

    a = SimArm(SimArmConfig(max_steps=24, image_size=64))
    yield a
    a.close()


@pytest.fixture()
def served_subprocess(tmp_path):
    """scripts/serve_policy.py (random policy) in its own process, so a test can freeze or kill it."""
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts/serve_policy.py"), "checkpoint=random", "port=0"],
                            stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None  # stdout=PIPE
        ready, _, _ = select.select([proc.stdout], [], [], 120)  # never hang the suite on a server that stays silent
        line = proc.stdout.readline() if ready else ""  # "serving ... at ws://127.0.0.1:PORT; ..."
        match = re.search(r"ws://[\d.]+:\d+", line)
        assert match, f"server did not start: {line!r} {(tmp_path / 'server.log').read_text()[-2000:]}"
        yield proc, match.group(0)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait(10)
        log.close()


@pytest.mark.libero
@pytest.mark.slow
def test_end_to_end_episode_over_loopback(arm, tmp_path):
    """scripts/run_robot.py with a small untrained VLA served on loopback completes a simulated episode."""
    from policies.deploy import RunRobotConfig, run_robot
    from policies.vla import VLAConfig, VLAPolicy

    ckpt = tmp_path / "vla.pt"
    VLAPolicy(VLAConfig(views=["agentview", "wrist"], image_size=64, conv_channels=[8, 16], image_features=32,
                        hidden=64)).save(ckpt)
    cfg = RunRobotConfig(checkpoint=str(ckpt), out_dir=str(tmp_path / "run"))
    summary = run_robot(cfg, arm=arm)
    ep = summary["episodes"][0]
    assert (ep["steps"], ep["stop_reason"], ep["requests"]) == (24, "done", 3)  # 3 chunks of 8 up to the horizon
    assert summary["policy"]["policy"] == "VLAPolicy" and ep["round_trip_ms"]["p99"] > 0
    assert Path(ep["video"]).stat().st_size > 1000
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["episodes"][0]["steps"] == 24


@pytest.mark.libero
@pytest.mark.slow
def test_limits_keep_the_simulated_arm_in_the_workspace(arm):
    """Full-speed upward commands for 20 steps stop at the box's ceiling instead of rising ~0.2 m."""
    z0 = float(arm.start_episode()["state"][2])
    limits = SafetyLimits(workspace_max=[0.35, 0.45, z0 + 0.04])
    flagged = 0
    for _ in range(20):
        action, report = clamp_action(np.array([0, 0, 1, 0, 0, 0, -1.0]), arm.get_state(), limits)
        flagged += report.workspace
        arm.send_action(action)
    z = float(arm.get_state()[2])
    assert flagged > 0 and z0 + 0.02 < z <= z0 + 0.04 + 0.005  # moved up, stopped at the ceiling (5 mm tracking)


@pytest.mark.libero
@pytest.mark.slow
@pytest.mark.parametrize("fault", ["stall", "kill"])
def test_watchdog_stops_the_arm_when_the_server_stalls_or_dies(arm, served_subprocess, fault):
    proc, url = served_subprocess
    arm.start_episode()
    cfg = ControlConfig(server_deadline_s=1.0, action_steps=8)

    def on_step(step: int, info: dict) -> None:
        if step == 4:  # mid-chunk: the next request (after step 8) meets a frozen or dead server
            proc.send_signal(signal.SIGSTOP if fault == "stall" else signal.SIGKILL)

    with PolicyClient(url) as client:
        result = run_episode(arm, client, cfg, on_step=on_step)
    assert result.stop_reason == "watchdog" and result.steps == 8 and arm.stopped, result.summary()
    assert ("no reply" if fault == "stall" else "lost") in result.detail
    with pytest.raises(RobotStopped):
        arm.send_action(np.zeros(7, np.float32))


@pytest.mark.libero
@pytest.mark.slow
def test_emergency_stop_and_fixed_rate(arm, served_subprocess):
    _, url = served_subprocess
    estop = EmergencyStop()
    arm.start_episode()
    with PolicyClient(url) as client:
        paced = run_episode(arm, client, ControlConfig(rate_hz=4.0, max_steps=5), estop=estop)
        assert paced.stop_reason == "max_steps" and paced.steps == 5 and not arm.stopped
        assert paced.duration_s >= 4 / 4.0  # 5 ticks at 4 Hz: >= 1 s, whatever the simulator's speed

        def press_stop(step: int, info: dict) -> None:
            if step == 3:  # from another thread, as a stop button's monitor would; joined to be deterministic
                button = threading.Thread(target=estop.trigger, args=("operator pressed stop",))
                button.start()
                button.join()

        stopped = run_episode(arm, client, ControlConfig(), estop=estop, on_step=press_stop)
    assert stopped.stop_reason == "estop" and stopped.steps == 3 and arm.stopped
    assert "operator pressed stop" in arm.stop_reason
