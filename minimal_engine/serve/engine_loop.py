"""EngineLoop: one background thread that owns the LLMEngine and serves every client of the server.

The engine is not thread-safe, so exactly one thread calls add_request, abort_request and step. Clients
(asyncio handlers in serve.py) never touch the engine: they put commands on a thread-safe queue

    submit(prompt_ids, params) -> (request_id, asyncio.Queue)      abort(request_id)

and read their own asyncio.Queue, into which the loop pushes ("output", RequestOutput) after every step that
gave the request a token, or ("error", (message, status)): 400 for a request the engine refused, 500 for
a failure of the server (a failed step: every request of the step fails; a request whose own sampling
failed: that request alone). The loop:

    while running:  take all commands (block only when idle) -> add / abort  ->  engine.step()  ->  push outputs
"""
from __future__ import annotations

import asyncio
import itertools
import queue
import threading


def engine_dead(engine) -> str | None:
    """Why the engine can never step again, or None: a tensor-parallel worker that died or failed leaves its
    error on the model (features/tensor_parallel/model.py), and every later step would fail the same way."""
    model = getattr(getattr(engine, "runner", None), "model", None)
    error = getattr(model, "error", None)
    if error is None:
        gone = [f"worker rank {r} is not running (exit code {p.exitcode})"
                for r, p in enumerate(getattr(model, "procs", []), start=1) if not p.is_alive()]
        error = "tensor parallelism failed: " + "; ".join(gone) if gone else None
    return error


class EngineLoop:
    def __init__(self, llm, on_step=None):
        """on_step(step_stats, outputs): called on the loop thread after every step (the server's /metrics)."""
        self.llm, self.engine = llm, llm.engine
        self.on_step = on_step
        self._commands: queue.Queue = queue.Queue()
        self.dead: str | None = None              # set when the engine can never step again (a worker died)
        self._streams: dict[str, tuple] = {}      # request id -> (event loop, asyncio.Queue); loop thread only
        self._ids = itertools.count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self.num_aborted = 0
        self.stats = self._snapshot()

    # ---- called from the asyncio side ------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._commands.put(None)
        self._thread.join(timeout)

    def submit(self, checked, arrival_time: float | None = None) -> tuple[str, asyncio.Queue]:
        """Queue a request checked by LLMEngine.check; its outputs arrive on the returned asyncio.Queue.
        arrival_time (time.perf_counter()): when the HTTP request came in, so TTFT includes parsing and
        tokenizing, as vLLM's front end counts it; by default, when the engine takes the request."""
        rid = f"req-{next(self._ids)}"
        q: asyncio.Queue = asyncio.Queue()
        self._commands.put(("add", rid, checked, asyncio.get_running_loop(), q, arrival_time))
        return rid, q

    def abort(self, request_id: str) -> None:
        """Abort a request (a client left); its KV blocks are freed by the loop. Unknown ids are ignored."""
        self._commands.put(("abort", request_id))

    # ---- the loop thread ---------------------------------------------------------------------------
    def _snapshot(self) -> dict:
        bm, sched = self.engine.block_manager, self.engine.scheduler
        return {"free_blocks": bm.num_free_blocks, "total_blocks": bm.num_blocks, "running": len(sched.running),
                "waiting": len(sched.waiting), "aborted": self.num_aborted}

    def _push(self, rid: str, item) -> None:
        loop, q = self._streams[rid]
        loop.call_soon_threadsafe(q.put_nowait, item)

    def _handle(self, cmd) -> None:
        if cmd[0] == "add":
            _, rid, checked, loop, q, arrival = cmd
            self._streams[rid] = (loop, q)
            try:
                self.engine.add_request(checked, request_id=rid, arrival_time=arrival)
            except (ValueError, TypeError) as e:
                self._push(rid, ("error", (str(e), 400)))
                del self._streams[rid]
        elif cmd[0] == "abort" and cmd[1] in self._streams:
            self.engine.abort_request(cmd[1])
            del self._streams[cmd[1]]
            self.num_aborted += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            idle = not self.engine.has_unfinished_requests()
            try:
                cmd = self._commands.get(timeout=0.5) if idle else self._commands.get_nowait()
                while cmd is not None:
                    self._handle(cmd)
                    cmd = self._commands.get_nowait()
            except queue.Empty:
                pass
            if self.engine.has_unfinished_requests():
                try:
                    outputs = self.engine.step()
                except Exception as e:        # a failing step must not kill the server: fail those requests
                    self.dead = engine_dead(self.engine)   # ...unless the engine itself is gone (vLLM's EngineDeadError)
                    for rid in list(self._streams):
                        self.engine.abort_request(rid)
                        self._push(rid, ("error", (f"engine step failed: {type(e).__name__}: {e}", 500)))
                    self._streams.clear()
                    outputs = []
                else:
                    if self.on_step is not None:
                        self.on_step(self.engine.last_step, outputs)
                for out in outputs:
                    if out.request_id in self._streams:
                        item = ("error", (out.error, 500)) if out.error else ("output", out)
                        self._push(out.request_id, item)
                        if out.finished:
                            del self._streams[out.request_id]
            elif self.dead is None:           # idle: a dead worker shows on /health now, not only
                self.dead = engine_dead(self.engine)   # after a request fails on it (round 3, L15)
            self.stats = self._snapshot()     # one new dict each time: readers never see a half-update
        for rid in list(self._streams):       # stopped: no client may wait forever
            self.engine.abort_request(rid)
            self._push(rid, ("error", ("the server is shutting down", 503)))
        self._streams.clear()
