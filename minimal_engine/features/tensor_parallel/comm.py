"""What the ranks share: the process group, the counted all-reduce, and the step's ForwardBatch sent between ranks
(block numbers on the wire; each rank maps them onto the pool rows of its own KV heads)."""
from __future__ import annotations

import datetime
import time
from dataclasses import fields, is_dataclass, replace

import torch


def make_process_group(store, rank: int, world: int, device: torch.device, timeout_s: float):
    """A process group object (not torch.distributed's global default): gloo on the CPU, NCCL on CUDA."""
    import torch.distributed as dist
    if device.type == "cuda":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = datetime.timedelta(seconds=timeout_s)
        return dist.ProcessGroupNCCL(store, rank, world, opts)
    return dist.ProcessGroupGloo(store, rank, world, datetime.timedelta(seconds=timeout_s))


class Comm:
    """All-reduce (sum) over the TP group, counted: calls, payload bytes and seconds spent waiting in it.
    The time includes waiting for the slowest rank to arrive, not only moving bytes."""

    def __init__(self, pg):
        self.pg = pg
        self.reset()

    def reset(self) -> None:
        self.all_reduces, self.bytes, self.seconds, self.send_seconds, self.steps = 0, 0, 0.0, 0.0, 0
        self.trace = None            # a list: every call's (entry, exit, bytes) in time.perf_counter seconds

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        self.pg.allreduce([t]).wait()                                   # in place: t = sum over ranks
        if t.is_cuda:
            torch.cuda.synchronize(t.device)                            # so that the time is the transfer's
        t1 = time.perf_counter()
        self.seconds += t1 - t0
        if self.trace is not None:                                      # measurements (TensorParallelModel.trace_calls)
            self.trace.append((t0, t1, t.numel() * t.element_size()))
        self.all_reduces += 1
        self.bytes += t.numel() * t.element_size()
        return t

    def start_trace(self) -> None:
        """Record every call's (entry, exit, bytes) from now on (lab 7's per-rank reading)."""
        self.trace = []

    def stop_trace(self) -> list:
        """Stop recording; the calls recorded since start_trace (empty if it was not started)."""
        out, self.trace = self.trace or [], None
        return out

    def count_step(self, send_seconds: float) -> None:
        """One step sent to the workers, taking send_seconds (rank 0's TensorParallelModel)."""
        self.send_seconds += send_seconds
        self.steps += 1

    def stats(self) -> dict:
        per = max(1, self.steps)
        return dict(steps=self.steps, all_reduces=self.all_reduces, bytes=self.bytes, seconds=self.seconds,
                    send_seconds=self.send_seconds, all_reduces_per_step=self.all_reduces / per,
                    bytes_per_step=self.bytes / per, ms_per_step=1000 * (self.seconds + self.send_seconds) / per)


def for_workers(batch):
    """Rank 0's ForwardBatch as the workers need it: on the CPU (to be pickled), without logits rows (only
    rank 0 samples). Layouts name blocks by number, so each rank reads its own pool's heads from it."""
    return replace(batch_to(batch, "cpu"), logits_indices=batch.logits_indices[:0].cpu())


def batch_to(x, device):
    """A ForwardBatch (or any of its parts) with every tensor on `device`."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, list):
        return [batch_to(y, device) for y in x]
    if is_dataclass(x) and not isinstance(x, type):
        return replace(x, **{f.name: batch_to(getattr(x, f.name), device)
                             for f in fields(x) if f.init})
    return x
