"""Disaggregated prefill and decode (chapter 9): two engines in two processes, one stream for the client.

    with DisaggregatedLLM(max_num_seqs=8) as llm:          # decode engine here, prefill engine in a child process
        outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=32))
        outs[0].metrics.kv_transfer_bytes, outs[0].metrics.kv_transfer_s, outs[0].metrics.ttft

Why: in one engine, a long prompt's prefill shares a step with the decodes of everyone else, and that step is
long (chapter 9's interference). Splitting the two phases onto different engines (DistServe, Splitwise,
Mooncake; vLLM's disaggregated prefill, llm-d, Dynamo) keeps decode steps short, at the price of moving each
request's KV cache from the prefill engine to the decode engine once.

How a request flows (this file, prefill_worker.py, kv_connector.py and two small hooks in the core):

    client --add_request--> [parent] --("add", ids, params)--> [child: prefill LLMEngine, max_tokens=1]
        prefill engine computes the prompt and samples the first token; before it frees the request's blocks,
        its finish listener (engine/llm_engine.py) copies them out (extract_kv_blocks) and the connector sends them
    [parent: decode LLMEngine] <--KV blocks + first token-- connector
        the decode engine allocates its own blocks (Scheduler.admit_prefilled), writes the KV into them
        (inject_kv_blocks), records the first token and then decodes as usual; the client sees one stream.

Greedy tokens are those of a single engine (tests/disagg/test_disagg.py); seeded sampling too (the generator state
travels with the KV). Not here: n > 1, logprobs, prefix caching. A decode-side preemption recomputes locally.
Processes: the prefill engine is a `spawn`ed daemon process. close() (or `with`) stops it; it exits when the
parent dies, and an error in it reaches the parent as a RuntimeError with its traceback, not a hang.
"""
from __future__ import annotations

import functools
import itertools
import multiprocessing as mp
import queue
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass

import torch

from minimal_engine.disagg.kv_connector import PipeKVConnector, inject_kv_blocks, receive_loop, transfer_summary
from minimal_engine.disagg.prefill_worker import IDLE_POLL_S, prefill_main
from minimal_engine.llm import LLM
from minimal_engine.processes import main_guard_hint, stop_processes
from minimal_engine.sampling_params import SamplingParams
from minimal_engine.engine.requests import CheckedPrompt
from minimal_engine.engine.sequence import RequestMetrics

ENGINE_ARGS = {"block_size", "num_kv_blocks", "max_num_seqs", "max_num_batched_tokens", "max_model_len", "seed",
               "kv_cache_memory", "cuda_graphs"}


@dataclass
class DisaggMetrics(RequestMetrics):
    """RequestMetrics (TTFT counts until the first token reaches the decode side) plus the hand-off."""

    kv_transfer_bytes: int = 0          # KV blocks moved, all layers, K and V
    kv_transfer_s: float = 0.0          # copy out of the prefill pool + the pipe (until received)
    prefill_done_time: float | None = None   # when the prefill engine sampled the first token


def _ask_to_close(control) -> None:
    control.send(("close",))


class DisaggregatedLLM:
    """A prefill engine (child process) and a decode engine (this process) behind LLM's interface.

    generate(prompts, sampling_params) returns the RequestOutputs LLM.generate returns, with DisaggMetrics.
    add_request / step / has_unfinished_requests / abort_request drive it step by step, as LLMEngine.
    Engine arguments (block_size, num_kv_blocks, max_num_seqs, max_num_batched_tokens, max_model_len, seed, ...)
    apply to both engines; `prefill_threads` sets the child's torch threads (default: this process's)."""

    def __init__(self, model=None, dtype=None, device=None, prefill_device=None, prefill_threads: int | None = None,
                 start_timeout: float = 120.0, **engine_args):
        if set(engine_args) - ENGINE_ARGS:
            raise ValueError(f"DisaggregatedLLM does not take {sorted(set(engine_args) - ENGINE_ARGS)}; "
                             f"engine arguments: {sorted(ENGINE_ARGS)}")
        self.llm = LLM(model, dtype=dtype, device=device, **engine_args)       # the decode engine
        self.engine = self.llm.engine
        threads = prefill_threads or torch.get_num_threads()
        ctx = mp.get_context("spawn")
        self._control, child_control = ctx.Pipe()
        kv_recv, kv_send = ctx.Pipe(duplex=False)
        kwargs = dict(engine_args, dtype=self.llm.dtype, device=prefill_device or device,
                      num_kv_blocks=engine_args.get("num_kv_blocks") or self.engine.block_manager.num_blocks)
        self._proc = ctx.Process(target=prefill_main, args=(model, kwargs, threads, child_control, kv_send),
                                 daemon=True, name="prefill-engine")
        self._proc.start()
        self.pid = self._proc.pid           # the prefill process (tests check that it goes away)
        child_control.close()
        kv_send.close()                     # only the child writes: EOF here when it dies
        self.connector = PipeKVConnector(kv_recv)
        self._finalizer = weakref.finalize(self, stop_processes, [self._proc], (self._control, kv_recv),
                                           functools.partial(_ask_to_close, self._control))
        self.prefill_num_blocks = self._wait_control("ready", start_timeout)
        self._inflight: dict[str, tuple] = {}      # request id -> (CheckedPrompt, arrival, hand-off key): not yet admitted
        self._keys = itertools.count()              # each add gets its own key: an aborted id added again never
                                                    # takes the old request's KV (the prefill side's request id)
        self._arrived: deque = deque()              # (hand-off key, kv, meta) received, waiting for decode blocks
        self._inbox: queue.Queue = queue.Queue()
        threading.Thread(target=receive_loop, args=(self.connector, self._inbox), daemon=True,
                         name="kv-receiver").start()
        self._ids = itertools.count()

    # ---- the child ------------------------------------------------------------------------------------
    def _wait_control(self, kind: str, timeout: float):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ready = self._control.poll(min(IDLE_POLL_S, max(0.0, deadline - time.monotonic())))
                got, value = self._control.recv() if ready else (None, None)
            except (EOFError, OSError):
                ready, got, value = True, "error", (f"the prefill process closed its pipe (exit code "
                                                    f"{self._proc.exitcode})" + main_guard_hint("DisaggregatedLLM"))
            if ready:
                if got == "error":
                    self.close()
                    raise RuntimeError(f"the prefill engine failed:\n{value}")
                if got == kind:
                    return value
            elif not self._proc.is_alive():
                self.close()
                raise RuntimeError(f"the prefill engine exited (code {self._proc.exitcode})" + main_guard_hint("DisaggregatedLLM"))
        self.close()
        raise TimeoutError(f"the prefill engine did not answer {kind!r} within {timeout:.0f} s")

    def prefill_stats(self, timeout: float = 30.0) -> dict:
        """The prefill engine's block counts (num_blocks, free_blocks) and whether it has unfinished requests."""
        self._control.send(("stats",))
        return self._wait_control("stats", timeout)

    def close(self) -> None:
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the step interface (as LLMEngine) ---------------------------------------------------------------
    def add_request(self, prompt, params: SamplingParams | None = None, request_id: str | None = None,
                    arrival_time: float | None = None) -> str:
        checked = prompt if isinstance(prompt, CheckedPrompt) else self.engine.check(prompt, params)
        ids, params = checked.token_ids, checked.params
        if (params.n != 1 or params.logprobs is not None or params.prompt_logprobs is not None
                or params.structured_outputs is not None):
            raise ValueError("DisaggregatedLLM supports n=1 without logprobs, prompt_logprobs or structured_outputs; "
                             "use LLM for those")
        rid = f"d{next(self._ids)}" if request_id is None else request_id
        if rid in self._inflight or rid in self.engine.seqs:
            raise ValueError(f"request id {rid!r} is already in use")
        if not self._proc.is_alive():
            raise RuntimeError(f"the prefill engine process is not running (exit code {self._proc.exitcode})")
        arrival = time.perf_counter() if arrival_time is None else arrival_time
        key = f"{rid}#{next(self._keys)}"
        self._inflight[rid] = (checked, arrival, key)
        self._send(("add", key, ids, params, arrival))
        return rid

    def _send(self, message) -> None:
        """A command to the prefill process; its death while we write is the documented RuntimeError."""
        try:
            self._control.send(message)
        except (BrokenPipeError, ConnectionError, EOFError, OSError) as e:
            self._proc.join(1.0)
            raise RuntimeError(f"the prefill engine process is not running (exit code {self._proc.exitcode}): "
                               f"{type(e).__name__} while sending it {message[0]!r}") from None

    def abort_request(self, request_id: str) -> None:
        entry = self._inflight.pop(request_id, None)
        if entry is not None:
            if self._proc.is_alive():        # a dead prefill engine holds nothing to abort: no write to its pipe
                try:
                    self._send(("abort", entry[2]))
                except RuntimeError:
                    pass
        else:
            self.engine.abort_request(request_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self._inflight) or self.engine.has_unfinished_requests()

    def step(self) -> list:
        """Take in the KV that has arrived, admit what fits, run one decode step. When only prefills are in
        flight, wait (at most IDLE_POLL_S) for the next hand-off instead of spinning."""
        idle = not self.engine.has_unfinished_requests() and not self._arrived
        self._receive(IDLE_POLL_S if idle and self._inflight else 0.0)
        outs = self._admit()
        if self.engine.has_unfinished_requests():
            outs += self.engine.step()
        return outs

    def _receive(self, timeout: float) -> None:
        try:
            item = self._inbox.get(timeout=timeout) if timeout else self._inbox.get_nowait()
            while item[0] != "error":
                self._arrived.append(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            return
        self._inbox.put(item)                            # the pipe has ended: every later call sees it too
        if self._inflight:
            raise RuntimeError(f"the prefill engine stopped (exit code {self._proc.exitcode}) with "
                               f"{len(self._inflight)} requests in flight: {item[2]}")

    def _admit(self) -> list:
        """Decode side of the hand-off: own blocks, the received KV written into them, the first token."""
        outs, bm, sched = [], self.engine.block_manager, self.engine.scheduler
        while self._arrived:
            key, kv, meta = self._arrived[0]
            rid = key.rsplit("#", 1)[0]
            if self._inflight.get(rid, (None, None, None))[2] != key:   # aborted while its prefill ran
                self._arrived.popleft()
                continue
            n = meta["num_computed"]
            if len(sched.running) >= self.engine.config.max_num_seqs or bm.blocks_needed(n) > bm.num_free_blocks:
                break                                        # wait until decodes finish and free blocks
            self._arrived.popleft()
            checked, arrival, _ = self._inflight.pop(rid)
            metrics = DisaggMetrics(arrival, first_scheduled_time=meta["first_scheduled_time"],
                                    num_prompt_tokens=len(checked.token_ids),
                                    kv_transfer_bytes=kv.nbytes,
                                    kv_transfer_s=meta["recv_done"] - meta["extract_start"],
                                    prefill_done_time=meta["prefill_done"])
            self.engine.add_request(checked, request_id=rid, arrival_time=arrival, metrics=metrics,
                                    generator_state=meta["generator_state"])
            seq = self.engine.seqs[rid]
            if not sched.admit_prefilled(seq, n):
                raise RuntimeError(f"request {rid}: no room for its KV although blocks were free")
            inject_kv_blocks(self.engine.runner, seq.block_table, kv)
            outs.append(self.engine.accept_prefilled(rid, meta["first_token"]))   # as if sampled
        return outs

    # ---- the offline API (as LLM.generate) ----------------------------------------------------------------
    def generate(self, prompts, sampling_params=None, use_tqdm: bool = False, timeout: float | None = None) -> list:
        """Run prompts to completion through both engines; outputs in prompt order. `timeout` (s) bounds the run."""
        checked = self.llm.check_prompts(prompts, sampling_params)
        ids, results = [], {}
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for c in checked:
                ids.append(self.add_request(c))
            while len(results) < len(ids):
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"generate did not finish within {timeout} s")
                for out in self.step():
                    if out.finished:
                        results[out.request_id] = out
        finally:
            for rid in ids:
                if rid not in results:
                    self.abort_request(rid)
        return [results[r] for r in ids]


__all__ = ["DisaggMetrics", "DisaggregatedLLM", "transfer_summary"]
