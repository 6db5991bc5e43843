"""Tensor parallelism (chapter 7): one model split across N processes that act as one.

    llm = LLM(tensor_parallel_size=2)          # rank 0 = this process, rank 1 = a spawned worker
    llm.generate(...)                          # same greedy tokens as tensor_parallel_size=1 (float32)
    llm.engine.comm_stats                      # all-reduces, bytes and seconds so far (and per step)
    llm.close()                                # workers stop (also on garbage collection and interpreter exit)

How the pieces fit:
  * Sharding rules (models/sharding.py): each rank keeps whole heads of qkv/o_proj and a slice of gate_up/
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
CUDA graphs are turned off under TP (the step goes through a pipe). CPU threads: with T torch threads when the
LLM is built, each rank computes with max(1, T // N) (rank 0 only during its steps: the caller's setting stays).
"""
from __future__ import annotations

import datetime
import multiprocessing as mp
import pickle
import time
import weakref
from dataclasses import replace

import torch
from torch import nn

from minimal_engine.features.tensor_parallel.sharding import check_tp_size, head_ranges, shard_model
from minimal_engine.processes import main_guard_hint

TIMEOUT_S = 120.0            # startup and every collective: a dead or stuck peer surfaces as an error by then


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

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        self.pg.allreduce([t]).wait()                                   # in place: t = sum over ranks
        if t.is_cuda:
            torch.cuda.synchronize(t.device)                            # so that the time is the transfer's
        self.seconds += time.perf_counter() - t0
        self.all_reduces += 1
        self.bytes += t.numel() * t.element_size()
        return t

    def stats(self) -> dict:
        per = max(1, self.steps)
        return dict(steps=self.steps, all_reduces=self.all_reduces, bytes=self.bytes, seconds=self.seconds,
                    send_seconds=self.send_seconds, all_reduces_per_step=self.all_reduces / per,
                    bytes_per_step=self.bytes / per, ms_per_step=1000 * (self.seconds + self.send_seconds) / per)


def head_agnostic(batch, kv_heads: int):
    """Rank 0's ForwardBatch -> the same on the CPU with block numbers instead of (head, block) rows and no
    logits rows (only rank 0 samples)."""
    def blocks(rows, lead):                                         # rows ordered (request, head, block)
        return None if rows is None else rows.view(lead, kv_heads, -1)[:, 0].cpu()   # head 0 row = block number
    cpu = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in vars(batch).items()}
    cpu["decode_rows"] = blocks(batch.decode_rows, max(batch.num_decodes, 1))                  # [D, W]
    cpu["prefills"] = [replace(c, rows=blocks(c.rows, 1)) for c in batch.prefills]           # [1, blocks]
    cpu["logits_indices"] = batch.logits_indices[:0].cpu()
    return type(batch)(**cpu)


def rows_for_heads(batch, kv_heads: int, pool_blocks: int, device: torch.device):
    """The inverse of head_agnostic for a rank with kv_heads heads: block numbers -> this pool's rows."""
    heads = torch.arange(kv_heads)[None, :, None] * pool_blocks                  # [1, KVH, 1]

    def rows(blocks):
        return None if blocks is None else (heads + blocks[:, None, :]).flatten().to(device)
    fields = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in vars(batch).items()}
    fields["decode_rows"] = rows(batch.decode_rows)
    fields["prefills"] = [replace(c, rows=rows(c.rows)) for c in batch.prefills]
    return type(batch)(**fields)


def _stop_workers(procs, conns) -> None:
    """Ask every worker to stop, wait a bounded time, then terminate and kill what is left."""
    for c in conns:
        try:
            c.send_bytes(pickle.dumps(("stop", None)))
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 10
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
        if p.is_alive():
            p.terminate()
            p.join(5)
        if p.is_alive():
            p.kill()
            p.join(5)
    for c in conns:
        c.close()


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
        config.cuda_graphs = False
        store = dist.TCPStore("127.0.0.1", 0, tp_size, True, timeout=datetime.timedelta(seconds=TIMEOUT_S),
                              wait_for_workers=False)
        ctx = mp.get_context("spawn")
        self.procs, self.conns = [], []
        from minimal_engine.features.tensor_parallel.worker import worker_main
        for rank in range(1, tp_size):
            parent_end, child_end = ctx.Pipe()
            p = ctx.Process(target=worker_main, daemon=True, name=f"tp-worker-{rank}",
                            args=(rank, tp_size, store.port, spec, dtype, device.type, config, num_blocks,
                                  per_rank, child_end, mp.current_process().pid, TIMEOUT_S))
            p.start()
            child_end.close()                       # the worker holds the only other end: EOF when it dies
            self.procs.append(p)
            self.conns.append(parent_end)
        self._finalizer = weakref.finalize(self, _stop_workers, self.procs, self.conns)
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
        msg = pickle.dumps(("step", (input_ids.cpu(), head_agnostic(batch, self.kv_heads0))))
        for rank, c in enumerate(self.conns, start=1):
            try:
                c.send_bytes(msg)
            except OSError as e:
                self._fail(f"could not send the step to worker rank {rank}: {e}", e)
        self.comm.send_seconds += time.perf_counter() - t0
        self.comm.steps += 1
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
