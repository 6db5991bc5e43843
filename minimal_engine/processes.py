"""Spawned worker processes (tensor parallelism, disaggregated prefill): the hint for the mistake a plain script
makes with them.

Workers start with multiprocessing's "spawn" (fork is unsafe with threads and CUDA), and a spawned process begins
by re-importing the parent's main script. A script that builds `LLM(tensor_parallel_size=2)` or a
`DisaggregatedLLM` at its top level makes the worker run that line again; Python then refuses to start processes
from a process that is still starting, the worker exits with code 1, and the parent only sees a worker that died.
Python's docs ("Safe importing of main module") and vLLM's ask for `if __name__ == "__main__":`; so do we.
"""
from __future__ import annotations

import sys
from pathlib import Path


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
