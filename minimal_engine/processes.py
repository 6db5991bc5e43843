"""Spawned worker processes (tensor parallelism, disaggregated prefill): how they are stopped, and the hint for the
mistake a plain script makes with them.

Workers start with multiprocessing's "spawn" (fork is unsafe with threads and CUDA), and a spawned process begins
by re-importing the parent's main script. A script that builds `LLM(tensor_parallel_size=2)` or a
`DisaggregatedLLM` at its top level makes the worker run that line again; Python then refuses to start processes
from a process that is still starting, the worker exits with code 1, and the parent only sees a worker that died.
Python's docs ("Safe importing of main module") and vLLM's ask for `if __name__ == "__main__":`; so do we.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

STOP_WAIT_S = 10.0           # how long stopped workers get to exit by themselves before they are terminated


def stop_processes(procs: list, conns: list, ask_to_stop, wait_s: float = STOP_WAIT_S) -> None:
    """Ask the workers to stop (ask_to_stop(), which sends each its stop message), wait a bounded time, then
    terminate and kill what is left, and close the pipes. Idempotent: used as a weakref finalizer by the TP
    workers (features/tensor_parallel/model.py) and the disaggregated prefill engine (disagg/llm.py)."""
    try:
        ask_to_stop()
    except (OSError, ValueError):       # a pipe already closed: the worker is gone or going
        pass
    deadline = time.monotonic() + wait_s
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
        for stop in (p.terminate, p.kill):
            if not p.is_alive():
                break
            stop()
            p.join(5)
    for c in conns:
        c.close()


def main_guard_hint(what: str) -> str:
    """A sentence to add to "worker exited while starting" when the main script may be the cause: it is a file
    (not a notebook, a REPL or `python -c`, which spawn does not re-import) whose source has no `__main__` test."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path or not str(path).endswith(".py"):
        return ""
    try:
        source = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    if "__main__" in source:
        return ""
    return (f"\nThe worker is a spawned process that first re-imports your script {path}; if the script creates "
            f"{what} at its top level, the worker runs that again and exits. Put that code under\n"
            f"    if __name__ == \"__main__\":\n"
            f"(Python's multiprocessing docs, 'Safe importing of main module'; vLLM asks the same).")
