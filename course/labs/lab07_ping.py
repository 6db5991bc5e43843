"""Lab 7: the bare all-reduce on this machine, with no model and no computation between the calls.

    floor = bare_allreduce_us((1_280, 327_680), calls=300, threads=1)
    floor[1_280]["median_us"], floor[1_280]["p90_us"]

Two processes (this one as rank 0 and one spawned peer) join the same kind of gloo process group as
the engine's TP (``minimal_engine/features/tensor_parallel/comm.make_process_group``) and call
all-reduce back to back on a float32 tensor of each size. Rank 0 times each call as the engine's
``Comm.all_reduce`` does (until ``wait()`` returns). What this measures is gloo's own time per call
on this machine, including handing the CPU between the two processes, but not any waiting for a peer
that is still computing: the peer does nothing else. ``lab07_explain.comm_reading`` sets its median beside the median exchange of the engine's calls (the
time inside of the rank that arrived last, from every rank's record: course.labkit.tp_calls), median
against median; the difference is time that only appears while both processes compute.
"""
from __future__ import annotations

import datetime
import statistics
import time

import torch

TIMEOUT_S = 60.0


def _sizes_to_numel(sizes) -> list[int]:
    return [max(1, int(n) // 4) for n in sizes]


def _peer(port: int, sizes: tuple, calls: int, threads: int) -> None:
    """Rank 1: the same calls, in the same order, with nothing between them."""
    import torch.distributed as dist

    from minimal_engine.features.tensor_parallel.comm import make_process_group
    torch.set_num_threads(threads)
    store = dist.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    pg = make_process_group(store, 1, 2, torch.device("cpu"), TIMEOUT_S)
    for numel in _sizes_to_numel(sizes):
        t = torch.zeros(numel)
        for _ in range(calls):
            pg.allreduce([t]).wait()


def bare_allreduce_us(sizes=(1_280,), calls: int = 300, threads: int = 1, warmup: int = 20) -> dict:
    """Median and 90th percentile (µs) of one gloo all-reduce of each size in bytes, 2 processes."""
    import multiprocessing as mp

    import torch.distributed as dist

    from minimal_engine.features.tensor_parallel.comm import make_process_group
    sizes = tuple(int(n) for n in sizes)
    store = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=TIMEOUT_S),
                          wait_for_workers=False)
    peer = mp.get_context("spawn").Process(target=_peer, daemon=True, name="lab7-ping",
                                           args=(store.port, sizes, warmup + calls, threads))
    peer.start()
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    out = {}
    try:
        pg = make_process_group(store, 0, 2, torch.device("cpu"), TIMEOUT_S)
        for size, numel in zip(sizes, _sizes_to_numel(sizes)):
            t, times = torch.zeros(numel), []
            for i in range(warmup + calls):
                t0 = time.perf_counter()
                pg.allreduce([t]).wait()
                if i >= warmup:
                    times.append((time.perf_counter() - t0) * 1e6)
            times.sort()
            out[size] = {"median_us": statistics.median(times), "p90_us": times[int(0.9 * (len(times) - 1))],
                         "calls": calls, "threads": threads}
    finally:
        torch.set_num_threads(old)
        peer.join(TIMEOUT_S)
        if peer.is_alive():
            peer.terminate()
    return out


__all__ = ["bare_allreduce_us"]
