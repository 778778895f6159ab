"""Hand-made recorded episodes for tests that need a dataset of a policy's real rollouts."""
import numpy as np

from envs.dataset import Episode


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
