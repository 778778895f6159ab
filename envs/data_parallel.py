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
