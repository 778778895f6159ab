"""Data-parallel training across the processes of `accelerate launch` (torchrun underneath), for the
trainers that are plain torch loops in one process (BC, imagined RL).

    acc = data_parallel("cpu")      # None in a plain `python script.py` run: that path stays untouched
    if acc is not None:
        model = acc.prepare_model(model)   # DistributedDataParallel: gradients averaged over processes

Why the one-process run does not go through accelerate at all: accelerate would wrap the optimizer and
LR scheduler and own the device, and the one-process run must stay exactly what it was (same numbers,
same checkpoints).

Every process draws the same global batch from the same generator and keeps its own slice of it
(`shard`), so the generator, the RNG states and the weights are the same in every process after each
step. Hence one checkpoint, written by the main process, resumes all of them exactly, and the data a
step sees does not depend on the number of processes.
"""
from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs


def launched_processes() -> int:
    """How many processes the launcher started (torchrun's WORLD_SIZE); 1 outside a launcher."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ValueError(f"WORLD_SIZE: expected a number of processes, got {os.environ['WORLD_SIZE']!r}") from None


def data_parallel(device: str) -> Accelerator | None:
    """The accelerator of a multi-process launch, None for one process.

    device "cpu" joins the processes with gloo on the CPU even where GPUs exist; any other device
    gives each process its own GPU (accelerate's choice, from LOCAL_RANK).
    """
    if launched_processes() <= 1:
        return None
    # policies return outputs the loss does not use (BC: the value head; the MSE loss: log_std too), so
    # DDP must look for parameters without gradients instead of waiting for them
    acc = Accelerator(cpu=device == "cpu", kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
    if acc.num_processes <= 1:  # e.g. WORLD_SIZE set by hand without a launcher behind it
        raise ValueError(f"WORLD_SIZE={launched_processes()} but accelerate found one process; start the run "
                         f"with `accelerate launch --num_processes N` (on CPUs: ACCELERATE_USE_CPU=true, "
                         f"see docs/scale.md)")
    return acc


def shard(batch_size: int, rank: int, processes: int) -> slice:
    """The slice of a global batch that process `rank` trains on; ValueError unless it divides evenly."""
    if batch_size % processes:
        raise ValueError(f"batch_size: {batch_size} does not split evenly over {processes} processes; use a "
                         f"multiple of {processes}")
    size = batch_size // processes
    return slice(rank * size, (rank + 1) * size)


def mean_over_processes(acc: Accelerator | None, values: list[float]) -> list[float]:
    """`values` averaged over the processes (for logging what each process's slice of the batch gave)."""
    if acc is None:
        return values
    return [float(v) for v in acc.reduce(torch.tensor(values, device=acc.device), reduction="mean").tolist()]


class GradientSync:
    """Gradient averaging for a trainer whose loss does not go through the model's forward (so DDP cannot
    hook it: imagined RL calls `policy.evaluate`), and the minibatch count every process must agree on.

    Each process updates on its own samples; after every backward the gradients are averaged, so the
    replicas take the same optimizer step and stay equal. Every all-reduce must be matched by every
    process: they all take the same number of minibatches (`split`), however many samples each has.
    """

    def __init__(self, acc: Accelerator):
        self.acc = acc

    def split(self, order: np.ndarray, size: int) -> list[np.ndarray]:
        """`order` in as many near-equal minibatches as the process with the most samples needs at `size`."""
        mine = torch.tensor(-(-len(order) // size), device=self.acc.device)
        torch.distributed.all_reduce(mine, op=torch.distributed.ReduceOp.MAX)
        n = int(mine)
        if len(order) < n:  # fewer samples than minibatches: reuse some rather than step on an empty one
            order = np.resize(order, n)
        return np.array_split(order, n)

    def average(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Replace each gradient by its mean over the processes (one all-reduce for all of them)."""
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        torch.distributed.all_reduce(flat)
        flat /= self.acc.num_processes
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def check_replicas(acc: Accelerator | None, module: torch.nn.Module) -> None:
    """RuntimeError unless every process holds the same weights in `module` (a cheap fingerprint of them).

    Why: the main process alone saves, so a replica that drifted (a gradient not averaged, a random draw
    one process made and another did not) would be lost silently; checked where a checkpoint is written."""
    if acc is None:
        return
    flat = torch.cat([p.detach().reshape(-1).double() for p in module.parameters()])
    mine = torch.stack([flat.sum(), flat.square().sum(), flat[::7].sum()])
    every = acc.gather(mine[None]).cpu()  # [processes, 3]
    if not bool((every == every[0]).all()):
        raise RuntimeError(f"data-parallel replicas differ (weight fingerprints per process: {every.tolist()})")
