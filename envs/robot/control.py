"""The control loop on the robot side: observe, ask the policy server, execute the chunk at a fixed rate.

    result = run_episode(arm, client, ControlConfig(rate_hz=20, max_steps=400), SafetyLimits(), estop)

Per control step: the next action of the current chunk is made safe against the arm's *current*
state (`envs.robot.safety.clamp_action`), the loop waits for the step's tick, then sends it. When the
chunk is used up (`action_steps` actions), the loop observes and asks the server for a new one.

What stops the arm (`arm.stop`), and the `stop_reason` it leaves in the result:
  * "watchdog": no reply within `server_deadline_s` (a thread stops the arm at the deadline, even
    while the loop is blocked), or the connection to the server was lost (server killed, network);
  * "server_error": the server answered with an error;
  * "safety_fault": an action or state the limits cannot make safe (NaN);
  * "estop": the emergency stop (also Ctrl-C within `EmergencyStop.sigint()`), checked before every
    command and acting immediately through its callback;
  * any exception in the loop (the arm is stopped, then the exception propagates).
An episode that ends normally ("done": the arm reports the end; "max_steps") leaves the arm holding
its last target.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from envs.robot.base import RobotArm, RobotStopped
from envs.robot.client import PolicyClient, ServerError, ServerUnavailable
from envs.robot.safety import EmergencyStop, SafetyLimits, UnsafeAction, check_limits, clamp_action


@dataclass
class ControlConfig:
    """Timing of the control loop."""

    rate_hz: float = 0.0  # control steps per second; 0 = the arm's native rate (simulation: free-running)
    max_steps: int = 0  # 0 = until the arm reports the episode done (a real arm should set a bound)
    action_steps: int = 0  # actions executed per chunk before asking again; 0 = the whole chunk
    server_deadline_s: float = 0.5  # watchdog: a reply later than this stops the arm
    first_request_timeout_s: float = 30.0  # the first request may load lazily built parts of the policy
    record: bool = True  # keep every step's images (for a video) and actions


class Watchdog:
    """A thread that calls `on_expire(reason)` when it is armed and not disarmed before its deadline."""

    def __init__(self, on_expire: Callable[[str], None]):
        self._on_expire = on_expire
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._what = ""
        self._fired = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
        self._thread.start()

    def arm(self, seconds: float, what: str) -> None:
        with self._cond:
            self._deadline, self._what, self._fired = time.monotonic() + seconds, what, False
            self._cond.notify()

    def disarm(self) -> bool:
        """Stop watching; True if the deadline had already passed (the callback ran)."""
        with self._cond:
            self._deadline = None
            return self._fired

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (self._deadline is None or self._deadline > time.monotonic()):
                    self._cond.wait(None if self._deadline is None else self._deadline - time.monotonic())
                if self._closed:
                    return
                self._deadline, self._fired, what = None, True, self._what
            self._on_expire(what)  # outside the lock: stopping real hardware may take a while

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(1.0)


@dataclass
class EpisodeResult:
    """What happened in one episode; `summary()` is JSON-ready."""

    steps: int = 0
    success: bool = False
    stop_reason: str = ""
    detail: str = ""
    duration_s: float = 0.0
    requests: int = 0
    late_steps: int = 0  # steps whose tick had already passed by more than a period (no catch-up burst)
    round_trip_ms: list[float] = field(default_factory=list)
    server_infer_ms: list[float] = field(default_factory=list)
    clamps: dict[str, int] = field(
        default_factory=lambda: {"workspace": 0, "translation": 0, "rotation": 0, "gripper": 0})
    frames: list[np.ndarray] = field(default_factory=list)  # uint8 [V, H, W, 3] after every step (record=True)
    actions: list[np.ndarray] = field(default_factory=list)  # float32 [7] as sent, after the safety limits

    def summary(self) -> dict[str, Any]:
        skip = ("frames", "actions", "round_trip_ms", "server_infer_ms")
        out = {k: v for k, v in asdict(self).items() if k not in skip}
        for name, xs in (("round_trip_ms", self.round_trip_ms), ("server_infer_ms", self.server_infer_ms)):
            out[name] = ({"p50": float(np.percentile(xs, 50)), "p99": float(np.percentile(xs, 99)),
                          "max": float(max(xs))} if xs else None)
        return out


def run_episode(arm: RobotArm, client: PolicyClient, cfg: ControlConfig | None = None,
                limits: SafetyLimits | None = None, estop: EmergencyStop | None = None,
                on_step: Callable[[int, dict], None] | None = None) -> EpisodeResult:
    """Run one episode from the arm's current state (call `arm.start_episode()` first)."""
    cfg, limits, estop = cfg or ControlConfig(), check_limits(limits or SafetyLimits()), estop or EmergencyStop()
    rate = cfg.rate_hz or (arm.control_hz if arm.realtime else 0.0)
    period = 1.0 / rate if rate > 0 else 0.0
    res = EpisodeResult()
    queue: list[np.ndarray] = []
    watchdog = Watchdog(lambda what: arm.stop(f"watchdog: {what}"))
    estop.on_trigger(arm.stop)
    t_start = next_tick = time.perf_counter()

    def end(reason: str, detail: str = "", stop: bool = True) -> None:
        res.stop_reason, res.detail = reason, detail
        if stop:
            arm.stop(f"{reason}: {detail}" if detail else reason)

    try:
        while True:
            if estop.is_set():
                end("estop", estop.reason)
                break
            if cfg.max_steps and res.steps >= cfg.max_steps:
                end("max_steps", stop=False)
                break
            if not queue:
                timeout = cfg.first_request_timeout_s if res.requests == 0 else cfg.server_deadline_s
                obs = arm.get_observation()
                watchdog.arm(timeout, f"no reply from the policy server within {timeout:g} s")
                try:
                    reply = client.infer(obs, timeout=timeout)
                except (TimeoutError, ServerUnavailable) as e:
                    watchdog.disarm()
                    end("watchdog", str(e))
                    break
                except ServerError as e:
                    watchdog.disarm()
                    end("server_error", str(e))
                    break
                if watchdog.disarm():  # the reply came, but after the deadline: the arm is already stopped
                    end("watchdog", arm.stop_reason)
                    break
                res.requests += 1
                res.round_trip_ms.append(reply.round_trip_ms)
                res.server_infer_ms.append(float(reply.server_ms.get("infer", float("nan"))))
                chunk = reply.actions.reshape(-1, 7)
                queue = list(chunk[: cfg.action_steps or len(chunk)])
            try:
                action, report = clamp_action(queue.pop(0), arm.get_state(), limits)
            except UnsafeAction as e:
                end("safety_fault", str(e))
                break
            for name in res.clamps:
                res.clamps[name] += bool(getattr(report, name))
            if period:
                now = time.perf_counter()
                if now < next_tick:
                    estop.wait(next_tick - now)  # wakes at once on an emergency stop
                elif now - next_tick > period:
                    res.late_steps += 1
                    next_tick = now  # re-anchor: sending the missed steps in a burst would move the arm too fast
                next_tick += period
            if estop.is_set():
                end("estop", estop.reason)
                break
            try:
                info = arm.send_action(action)
            except RobotStopped as e:
                end("estop" if estop.is_set() else "stopped", str(e))
                break
            res.steps += 1
            if cfg.record:
                res.frames.append(arm.get_observation()["image"])
                res.actions.append(action)
            if on_step is not None:
                on_step(res.steps, info)
            if info.get("done"):
                res.success = bool(info.get("success"))
                end("done", "success" if res.success else "horizon reached", stop=False)
                break
    except BaseException as e:  # a fault anywhere: the arm must not keep moving on its last command
        arm.stop(f"control loop error: {type(e).__name__}: {e}")
        raise
    finally:
        watchdog.close()
        estop.remove(arm.stop)
        res.duration_s = time.perf_counter() - t_start
    return res


__all__ = ["ControlConfig", "EpisodeResult", "Watchdog", "run_episode"]
