"""Tensor parallelism (chapter 7): one model split across N processes that act as one.

    llm = LLM(tensor_parallel_size=2)          # rank 0 = this process, rank 1 = a spawned worker
    llm.generate(...)                          # same greedy tokens as tensor_parallel_size=1 (float32)
    llm.engine.comm_stats                      # all-reduces, bytes and seconds so far (and per step)
    llm.close()                                # workers stop (also on garbage collection and interpreter exit)

How the pieces fit:
  * Sharding rules (sharding.py): each rank keeps whole heads of qkv/o_proj and a slice of gate_up/
    down_proj; after o_proj and after down_proj an all-reduce sums the ranks' partial results. Embedding and
    lm_head are replicated (why: sharding.py's docstring).
  * The scheduler, block manager and sampler run ONCE, in this process (rank 0). Each step, rank 0 sends the
    step's inputs (token ids and the ForwardBatch, pickled, through a pipe) to every worker, then all ranks run
    the same forward pass on their own shard and meet at the all-reduces. Only rank 0 computes logits.
  * Each rank has its own KV pool holding only its KV heads; block tables are the same on every rank (one
    block manager), so the batch is sent head-agnostic (block numbers) and each worker maps it onto its heads.
  * Communication: torch.distributed process groups built as objects (gloo on the CPU, NCCL on CUDA: rank r
    uses cuda:r), not the global default group, so two TP engines can live in one process. The rendezvous is a
    TCPStore on 127.0.0.1 with a port the OS picks (port 0), so there is no port to collide.

Lifetime: workers are 'spawn'ed daemons (no fork of a process holding threads and tensors). They stop when
told (close), when the parent's pipe closes or the parent pid changes (parent died), and after an error in a
step, which they report through the pipe; the parent then raises a RuntimeError naming the rank and its error
instead of waiting forever (gloo also fails fast when a peer's socket closes; every wait has TIMEOUT_S).
A script that uses this must guard its top level with `if __name__ == "__main__":` ('spawn' re-imports it).
CUDA graphs are off under TP (the step goes through a pipe): LLM builds its EngineConfig with cuda_graphs=False. CPU threads: with T torch threads when the
LLM is built, each rank computes with max(1, T // N) (rank 0 only during its steps: the caller's setting stays).
"""
from __future__ import annotations

import datetime
import functools
import multiprocessing as mp
import pickle
import time
import weakref
import torch
from torch import nn

from minimal_engine.features.tensor_parallel.comm import Comm, for_workers, make_process_group
from minimal_engine.features.tensor_parallel.sharding import check_tp_size, head_ranges, shard_model
from minimal_engine.features.tensor_parallel.worker import worker_main
from minimal_engine.processes import main_guard_hint, stop_processes

TIMEOUT_S = 120.0            # startup and every collective: a dead or stuck peer surfaces as an error by then


def _ask_to_stop(conns) -> None:
    for c in conns:
        try:
            c.send_bytes(pickle.dumps(("stop", None)))
        except (OSError, ValueError):
            pass


class TensorParallelModel(nn.Module):
    """Rank 0's model: its shard, plus the workers it drives. ModelRunner calls it like the plain model."""

    def __init__(self, net: nn.Module, spec: tuple, tp_size: int, dtype: torch.dtype, device: torch.device,
                 config, num_blocks: int):
        super().__init__()
        cfg = net.config
        check_tp_size(cfg.num_heads, cfg.num_kv_heads, tp_size)
        if device.type == "cuda" and torch.cuda.device_count() < tp_size:
            raise ValueError(f"tensor_parallel_size={tp_size} needs {tp_size} CUDA GPUs (one per rank); "
                             f"{torch.cuda.device_count()} visible")
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"tensor parallelism runs on 'cpu' (gloo) or 'cuda' (NCCL), not {device.type!r}")
        import torch.distributed as dist
        self.tp_size, self.error = tp_size, None
        self.per_rank = per_rank = max(1, torch.get_num_threads() // tp_size)
        store = dist.TCPStore("127.0.0.1", 0, tp_size, True, timeout=datetime.timedelta(seconds=TIMEOUT_S),
                              wait_for_workers=False)
        ctx = mp.get_context("spawn")
        self.procs, self.conns = [], []
        for rank in range(1, tp_size):
            parent_end, child_end = ctx.Pipe()
            p = ctx.Process(target=worker_main, daemon=True, name=f"tp-worker-{rank}",
                            args=(rank, tp_size, store.port, spec, dtype, device.type, config, num_blocks,
                                  per_rank, child_end, mp.current_process().pid, TIMEOUT_S))
            p.start()
            child_end.close()                       # the worker holds the only other end: EOF when it dies
            self.procs.append(p)
            self.conns.append(parent_end)
        self._finalizer = weakref.finalize(self, stop_processes, self.procs, self.conns,
                                           functools.partial(_ask_to_stop, self.conns))
        self._wait_for("loaded")
        self.comm = Comm(make_process_group(store, 0, tp_size, device, TIMEOUT_S))
        self._store = store
        self.net = shard_model(net, 0, tp_size, self.comm)
        self.worker_threads = self._wait_for("ready")           # each worker says its torch thread count
        self.kv_heads0 = len(head_ranges(cfg.num_heads, cfg.num_kv_heads, tp_size, 0)[1])

    @property
    def config(self):
        return self.net.config

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _wait_for(self, what: str) -> list:
        """Wait for every worker to report `what`, a bounded time; a worker's error or death raises."""
        said, deadline = [], time.monotonic() + TIMEOUT_S
        for rank, (p, c) in enumerate(zip(self.procs, self.conns), start=1):
            while not c.poll(0.2):
                if not p.is_alive() or time.monotonic() > deadline:
                    self._fail(f"worker rank {rank} did not get {what!r} (exit code {p.exitcode})",
                               hint=main_guard_hint("LLM(tensor_parallel_size=...)"))
            try:
                kind, msg = pickle.loads(c.recv_bytes())
            except (EOFError, OSError):
                self._fail(f"worker rank {rank} exited while starting (exit code {p.exitcode})",
                           hint=main_guard_hint("LLM(tensor_parallel_size=...)"))
            if kind != what:
                self._fail(f"worker rank {rank} failed while starting: {msg}")
            said.append(msg)
        return said

    def _fail(self, message: str, cause: BaseException | None = None, hint: str = ""):
        """Collect what the workers said, stop them all, and raise one clear error (later steps raise it too)."""
        notes = []
        for rank, c in enumerate(self.conns, start=1):
            try:
                while c.poll(1.0):
                    kind, msg = pickle.loads(c.recv_bytes())
                    if kind == "error":
                        notes.append(msg)
            except (EOFError, OSError):
                pass
        time.sleep(0.2)                             # let a dying worker finish dying, for its exit code
        states = [f"worker rank {r}: " + ("running" if p.exitcode is None else f"exit code {p.exitcode}")
                  for r, p in enumerate(self.procs, start=1)]
        self.error = ("tensor parallelism failed: " + message + f" ({'; '.join(states)})" + hint
                      + "".join(f"\n--- {n}" for n in notes))
        self.close()
        raise RuntimeError(self.error) from cause

    def close(self) -> None:
        """Stop the workers (idempotent; also runs on garbage collection and at interpreter exit)."""
        self._finalizer()
        self.error = self.error or "the tensor-parallel workers were closed (llm.close())"

    def trace_calls(self, on: bool) -> list | None:
        """For measurements (lab 7): on=True starts recording every rank's all-reduce calls; on=False stops and
        returns one list per rank (rank 0 first) of (entry, exit, bytes), time.perf_counter seconds: the
        system-wide monotonic clock, so the ranks' times on one machine compare directly."""
        if on:
            self.comm.start_trace()
        msg = pickle.dumps(("trace", on))
        for c in self.conns:
            c.send_bytes(msg)
        if on:
            return None
        return [self.comm.stop_trace()] + self._wait_for("trace")

    def inject_failure(self, rank: int) -> None:
        """For tests: worker `rank` raises an error in its next step."""
        self.conns[rank - 1].send_bytes(pickle.dumps(("fail", None)))

    def forward(self, input_ids: torch.Tensor, batch, kv_caches: list) -> torch.Tensor:
        """input_ids [T] -> logits [S, vocab]: send the step to the workers, then run rank 0's shard."""
        if self.error:
            raise RuntimeError(self.error)
        for rank, p in enumerate(self.procs, start=1):
            if not p.is_alive():
                self._fail(f"worker rank {rank} is not running (exit code {p.exitcode})")
        t0 = time.perf_counter()
        msg = pickle.dumps(("step", (input_ids.cpu(), for_workers(batch))))
        for rank, c in enumerate(self.conns, start=1):
            try:
                c.send_bytes(msg)
            except OSError as e:
                self._fail(f"could not send the step to worker rank {rank}: {e}", e)
        self.comm.count_step(time.perf_counter() - t0)
        threads = torch.get_num_threads()
        torch.set_num_threads(self.per_rank)
        try:
            return self.net(input_ids, batch, kv_caches)
        except RuntimeError as e:                   # gloo/NCCL: a peer went away or timed out
            self._fail(f"an all-reduce failed on rank 0: {e}", e)
        except BaseException:                       # e.g. Ctrl-C mid-step: the ranks are out of step for good
            self.error = "a step was interrupted on rank 0; the workers were stopped: create a new LLM"
            self.close()
            raise
        finally:
            torch.set_num_threads(threads)
