"""Hand-made recorded episodes for tests that need a dataset of a policy's real rollouts."""
import numpy as np

from robot_data.dataset import Episode


def grasping_episode(rng: np.random.Generator, T: int, size: int, task: int, ok: bool, source: str, init: int,
                     extra: dict) -> Episode:
    """A short episode of random frames, states and actions whose gripper closes at step 6 and whose
    last step carries the real outcome `ok` (as a recorded policy rollout of LIBERO-Spatial task `task`)."""
    action = rng.uniform(-1, 1, (T, 7)).astype(np.float32)
    action[:, 6] = np.where(np.arange(T) >= 6, 1.0, -1.0)
    success = np.zeros(T, bool)
    success[-1] = ok
    return Episode(frames={"agentview": rng.integers(0, 255, (T, size, size, 3), dtype=np.uint8)},
                   state=rng.normal(size=(T, 8)).astype(np.float32), action=action, reward=success.astype(np.float32),
                   success=success, instruction=f"task {task}", suite="libero_spatial", task_id=task, source=source,
                   perturbation="", init_state_id=init, extra=extra)


def grasp_label_dir(root, n=60, seed=0) -> str:
    """Label-collection files whose outcome follows a rule the grasp classifier can learn: success when the
    gripper is commanded shut within 2 cm (in the plane) of the object's start."""
    from robot_data.label_collection import _write

    rng = np.random.default_rng(seed)
    root.mkdir()
    for k in range(n):
        T, close = 20, int(rng.integers(5, 12))
        obj = np.array([0.1, 0.0, 0.9])
        state = np.zeros((T, 8), np.float32)
        state[:, :3] = obj + np.r_[rng.uniform(-0.04, 0.04, 2), 0.02]
        action = np.zeros((T, 7), np.float32)
        action[close:, 6] = 1.0
        ok = bool(np.hypot(*(state[0, :2] - obj[:2])) < 0.02)
        arrays = {"state": state, "action": action, "success": np.full(T, ok), "grasped": np.zeros(T, bool),
                  "object_pos": np.repeat(obj[None], T, 0), "target_pos": np.repeat(obj[None] + [0.2, 0, 0], T, 0)}
        _write(root / f"task{k % 3:02d}_ep{k:04d}.npz", arrays, {"task_id": k % 3, "success": ok})
    return str(root)
