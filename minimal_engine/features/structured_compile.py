"""CompileWorker: every constraint compiles first in a child process, within a time budget.

    worker = CompileWorker(budget_s=5.0)
    worker.configure(setup)               # tokenizer, llguidance's limits (GrammarBackend does it)
    worker.check(grammar_text, cancel)    # "" or why not; CompileBudgetExceeded, CompileCancelled

llguidance's compiler is native code: an input it cannot handle can crash the process that compiles
it, and a large grammar can take seconds. So GrammarBackend compiles nothing in its own process
until this child (structured_worker.py, run as a script) has compiled the same grammar and computed
its first mask within `budget_s`. When the child dies (SIGSEGV, abort), the constraint is refused
with the signal's name and a new child starts with the next constraint; when it runs past the
budget, or the client that asked has left (`cancel`), the child is killed the same way. One compile
at a time: a heavy constraint makes other constraints wait, never the requests without one."""
from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

WORKER_SCRIPT = Path(__file__).with_name("structured_worker.py")
START_TIMEOUT_S = 60.0      # a child that has not started by then (a very busy machine) is an error


class CompileCancelled(Exception):
    """The caller set `cancel` (its client left) before the child answered; nothing was compiled."""


class CompileBudgetExceeded(ValueError):
    """The child did not answer within the compile budget (it was killed)."""


def exit_text(code: int) -> str:
    """A child's exit code in words: 'signal SIGSEGV' or 'exit code 3'."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class CompileWorker:
    """A child process that compiles each constraint before the server's own llguidance does."""

    def __init__(self, budget_s: float = 5.0, argv: list[str] | None = None):
        """budget_s: the longest one compile (with its first mask) may take. argv: the child's
        command line (default: this Python running structured_worker.py)."""
        if not budget_s > 0:
            raise ValueError(f"budget_s must be a positive number of seconds, got {budget_s!r}")
        self.budget_s = budget_s
        self.argv = list(argv) if argv is not None else [sys.executable, str(WORKER_SCRIPT)]
        self._setup: str | None = None
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue | None = None    # the current child's stdout lines (None at EOF)
        self._lock = threading.Lock()             # one compile at a time
        self.starts = 0                           # children started so far (a crash costs one)

    def configure(self, setup: dict) -> None:
        """setup: {"tokenizer": tokenizer.json text, "n_vocab", "eos_token", "limits"} (the child's
        first line). GrammarBackend calls it once, at construction."""
        self._setup = json.dumps(setup)

    def check(self, grammar: str, cancel: threading.Event | None = None) -> str:
        """Compile `grammar` in the child: "" if it compiles and admits some output, else why."""
        with self._lock:
            lines = self._start()
            try:
                self._proc.stdin.write(json.dumps(grammar) + "\n")
                self._proc.stdin.flush()
            except OSError:                   # the child had died already: EOF comes below
                pass
            deadline = time.monotonic() + self.budget_s
            while True:
                if cancel is not None and cancel.is_set():
                    self._stop()
                    raise CompileCancelled
                left = deadline - time.monotonic()
                if left <= 0:
                    self._stop()
                    raise CompileBudgetExceeded(
                        f"the constraint did not compile within the compile budget of "
                        f"{self.budget_s:g} s; send a smaller or simpler constraint")
                try:
                    line = lines.get(timeout=min(left, 0.05))
                except queue.Empty:
                    continue
                if line is None:
                    code = self._stop()
                    return f"the grammar compiler crashed on this constraint ({exit_text(code)})"
                return json.loads(line)["error"]

    @property
    def running(self) -> bool:
        """Is a child process alive now?"""
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        with self._lock:
            self._stop()

    # ---- the child -------------------------------------------------------------------------------
    def _start(self) -> queue.Queue:
        """The running child's line queue; starts a child first when there is none."""
        if self._proc is not None and self._proc.poll() is None:
            return self._lines
        self._stop()
        if self._setup is None:
            raise ValueError("CompileWorker.configure(setup) must be called before check()")
        proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, encoding="utf-8")
        weakref.finalize(self, proc.kill)          # never outlive the worker (or the interpreter)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True,
                         name="grammar-compiler-reader").start()
        self._proc, self._lines = proc, lines
        self.starts += 1
        try:
            proc.stdin.write(self._setup + "\n")
            proc.stdin.flush()
            ready = lines.get(timeout=START_TIMEOUT_S)
        except (OSError, queue.Empty):
            ready = None
        if ready is None:
            code = self._stop()
            raise ValueError(f"structured_outputs: the grammar compiler process did not start "
                             f"({exit_text(code) if code is not None else 'no answer'}; "
                             f"command: {' '.join(self.argv)[:200]})")
        return lines

    def _stop(self) -> int | None:
        """Kill the child (if any); its exit code."""
        proc, self._proc, self._lines = self._proc, None, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        return code


def _read_lines(stream, lines: queue.Queue) -> None:
    """The reader thread: every line the child writes, then None at EOF (the child exited)."""
    try:
        for line in stream:
            lines.put(line)
    except (OSError, ValueError):
        pass
    lines.put(None)
