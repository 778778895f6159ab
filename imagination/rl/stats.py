"""The figures an imagined-RL iteration logs: imagined success, return and length, per task too.

    row = imagined_stats(acc, rollouts, env)      # {"imagined_success_rate": .., "imagined_success_task5": .., ..}
    write_metrics(out / "metrics.csv", history)   # one row per iteration, atomically
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator

from imagination.env import ImaginationVectorEnv
from imagination.episodes import task_keys
from imagination.rl.rollout import Rollouts, uncertainty_spread
from infra.atomic import atomic_write


def imagined_stats(acc: Accelerator | None, r: Rollouts, env: ImaginationVectorEnv) -> dict[str, float]:
    """The imagined_* figures (Rollouts.stats) and per-task success of this iteration's episodes; under a
    launch, of every process's episodes (each process holds as many)."""
    if acc is None:
        return {**{f"imagined_{k}": v for k, v in r.stats(_threshold(env)).items()}, **per_task_success(r, env)}
    tasks, names = _start_tasks(r, env)
    mine = np.stack([r.success, r.episode_return, r.length, r.uncertainty, tasks], 1).astype(np.float64)
    success, ret, length, uncertainty, task = acc.gather(torch.from_numpy(mine).to(acc.device)).cpu().numpy().T
    samples = acc.gather(torch.tensor([len(r.episode)], device=acc.device)).sum()
    # the names and means of Rollouts.stats, over the gathered episodes
    out = {"imagined_success_rate": float(success.mean()), "imagined_return": float(ret.mean()),
           "imagined_episode_chunks": float(length.mean()), "imagined_samples": float(samples),
           "imagined_uncertainty": float(uncertainty.mean())}
    out.update({f"imagined_success_{names[int(t)]}": float(success[task == t].mean()) for t in np.unique(task)})
    threshold = _threshold(env)
    if threshold is not None:  # per chunk: the processes' batches differ in length, so pad to gather
        chunks = torch.from_numpy(r.chunk_uncertainty.astype(np.float64)).to(acc.device)
        gathered = acc.pad_across_processes(chunks, pad_index=float("nan"))
        every = acc.gather(gathered).cpu().numpy()
        spread = uncertainty_spread(every[~np.isnan(every)], threshold)
        out.update({f"imagined_{k}": v for k, v in spread.items()})
    return out


def _threshold(env: ImaginationVectorEnv) -> float | None:
    """The env's uncertainty threshold when it measures disagreement at all, else None."""
    return None if env.cfg.uncertainty == "off" else float(env.cfg.uncertainty_threshold)


def _start_tasks(r: Rollouts, env: ImaginationVectorEnv) -> tuple[np.ndarray, dict[int, str]]:
    """Each rollout's start task key [N] (imagination.env.task_keys) and the keys' names."""
    keys, names = task_keys(env.episodes)
    return np.array([keys[k] for k in r.keyframe[:, 0]]), names


def per_task_success(r: Rollouts, env: ImaginationVectorEnv) -> dict[str, float]:
    """imagined_success_task<t>: success rate of this batch's episodes that started in task t (only the
    tasks drawn this iteration; imagined_success_<suite>_task<t> when the start episodes mix suites). Why:
    one shared policy can trade one task for another while the mean stays flat; the real evaluation
    reports per task, so the imagined side does too."""
    tasks, names = _start_tasks(r, env)
    return {f"imagined_success_{names[int(t)]}": float(r.success[tasks == t].mean()) for t in np.unique(tasks)}


def write_metrics(path: Path, history: list[dict]) -> None:
    if not history:
        return
    keys = sorted({k for row in history for k in row}, key=lambda k: (k != "iteration", k))

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(history)

    atomic_write(path, write)


__all__ = ["imagined_stats", "per_task_success", "write_metrics"]
