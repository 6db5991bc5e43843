"""A grammar compiler child with faults, for the tests: run as a script in place of
minimal_engine/features/structured_worker.py (CompileWorker(argv=[python, this file])).

A grammar whose text contains "abort_here" ends the child with os.abort() (as a native crash in
llguidance would: SIGABRT), "exit_here" with os._exit(3), and "slow_here" sleeps 60 s before
compiling. Anything else compiles as the real worker does."""
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "minimal_engine" / "features"))
import structured_worker  # noqa: E402  (the worker script itself: no torch, no package import)


def compile_with_faults(tokenizer, grammar, limits):
    if "abort_here" in grammar:
        os.abort()
    if "exit_here" in grammar:
        os._exit(3)
    if "slow_here" in grammar:
        time.sleep(60)
    return structured_worker.compile_check(tokenizer, grammar, limits)


if __name__ == "__main__":
    structured_worker.main(compile_with_faults)
