"""The exercise kit: cases, reports and a safe way to call a learner's function.

    case = Case(name="1トークンだけ", input="...", expected="...", got="...", passed=False, message="...")
    report = Report("01_request_metrics", passed=False, cases=[case], summary="...", attempt=1)
    result = call(fn, 1, 2, timeout_s=5)      # never raises: CallResult(value, error, status)

A grader (``Grader``) turns a learner's function into a list of ``Case``; ``grade`` in ``__init__.py`` adds the
hint for the attempt number and records the result. ``call`` reports a stub (NotImplementedError) as 未実装,
an exception with its type and message, and a call that runs past ``timeout_s`` as a timeout.

``grade`` runs a grader inside ``grading_deadline(seconds)``: one overall limit for every call of
the learner's function in that grading, so a slow function costs at most that long and a report
always comes back (each call gets what is left, at most its own timeout_s; past the limit, calls
return a timeout at once, naming the overall limit).
"""
from __future__ import annotations

import contextvars
import ctypes
import html
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

NOT_IMPLEMENTED = "未実装"
DEADLINE_S = 600.0      # one grading, all calls together (grade(..., deadline_s=...) changes it)
_DEADLINE: contextvars.ContextVar = contextvars.ContextVar("grading_deadline", default=None)


def check_seconds(seconds) -> float:
    """A grading's deadline_s: a positive number of seconds, else a ValueError saying so."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"deadline_s は正の秒数で指定してください（今は {seconds!r}）")
    return float(seconds)


@contextmanager
def grading_deadline(seconds: float):
    """Every call() inside shares one overall limit of `seconds` (see the module docstring)."""
    seconds = check_seconds(seconds)
    token = _DEADLINE.set((time.monotonic() + float(seconds), float(seconds)))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _overall_message(seconds: float) -> str:
    return (f"採点全体の制限時間（{seconds:g} 秒）を使い切ったので、ここで打ち切りました"
            "（あなたの関数の1回の呼び出しに時間がかかりすぎていないか確かめてください）")


@dataclass
class Case:
    name: str            # short Japanese description of the case
    input: str
    expected: str
    got: str
    passed: bool
    message: str         # Japanese: what was wrong (or "OK")
    hint: str = ""


@dataclass
class CallResult:
    value: object = None
    error: str | None = None          # Japanese description of what went wrong, None when it returned
    status: str = "ok"                # "ok" | "not_implemented" | "error" | "timeout"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class _Timeout(BaseException):
    """Raised by the alarm inside the learner's function (a BaseException, so `except Exception` cannot eat it)."""


def call(fn: Callable, *args, timeout_s: float = 10.0, **kwargs) -> CallResult:
    """fn(*args, **kwargs), never raising: the value, or what went wrong (stub, exception, timeout)."""
    if timeout_s <= 0:
        raise ValueError(f"timeout_s は正の秒数で指定してください（今は {timeout_s!r}）")
    overall = _DEADLINE.get()
    late = None                             # the message when the overall limit ends this call
    if overall is not None:
        left = overall[0] - time.monotonic()
        if left <= 0:
            return CallResult(None, _overall_message(overall[1]), "timeout")
        if left < timeout_s:
            timeout_s, late = left, _overall_message(overall[1])
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def alarm(signum, frame):
            raise _Timeout()
        old = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return CallResult(fn(*args, **kwargs))
        except _Timeout:
            return CallResult(None, late or _too_slow(timeout_s), "timeout")
        except NotImplementedError:
            return CallResult(None, NOT_IMPLEMENTED, "not_implemented")
        except Exception as e:   # noqa: BLE001 - the learner's error is the report
            return CallResult(None, _describe(e), "error")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    box: dict = {}

    def target():
        try:
            box["r"] = CallResult(fn(*args, **kwargs))
        except NotImplementedError:
            box["r"] = CallResult(None, NOT_IMPLEMENTED, "not_implemented")
        except Exception as e:   # noqa: BLE001
            box["r"] = CallResult(None, _describe(e), "error")
        except _Timeout:                    # stopped by _stop after the caller gave up
            pass
    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        _stop(t)
        return CallResult(None, late or _too_slow(timeout_s), "timeout")
    return box["r"]


def _stop(t: threading.Thread) -> None:
    """Raise _Timeout inside a learner's function that ran past its limit off the main thread, so a
    Python loop stops instead of spinning on in the background (attack round 3 L12). It lands at the
    function's next Python bytecode: a long call into C or torch finishes that call first."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(_Timeout))


def _too_slow(timeout_s: float) -> str:
    return f"{timeout_s:g} 秒以内に終わりませんでした（無限ループになっていませんか）"


def _describe(e: Exception) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f"（{tb[-1].lineno} 行目付近）" if tb else ""
    return f"例外 {type(e).__name__}: {e}{where}"


def failed_call_case(name: str, input: str, expected: str, result: CallResult) -> Case:
    """The case for a call that did not return."""
    msg = ("関数がまだ実装されていません（raise NotImplementedError のままです）" if result.status == "not_implemented"
           else result.error)
    return Case(name, input, expected, NOT_IMPLEMENTED if result.status == "not_implemented" else "—", False, msg)


@dataclass
class Grader:
    id: str
    chapter: int
    title_ja: str
    check: Callable                 # check(fn, ctx) -> list[Case]
    hints: list[str] = field(default_factory=list)   # general -> specific

    def hint(self, attempt: int) -> str:
        if not self.hints:
            return ""
        return self.hints[min(max(attempt, 1), len(self.hints)) - 1]


@dataclass(repr=False)
class Report:
    exercise_id: str
    passed: bool
    cases: list[Case]
    summary: str
    attempt: int = 1

    @property
    def not_implemented(self) -> bool:
        return any(c.got == NOT_IMPLEMENTED for c in self.cases)

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        lines = [self.summary, ""]
        for c in self.cases:
            lines.append(f"{'✓' if c.passed else '✗'} {c.name}")
            lines.append(f"    入力: {c.input}")
            lines.append(f"    期待: {c.expected}")
            lines.append(f"    あなたの関数: {c.got}")
            lines.append(f"    メッセージ: {c.message}")
            if c.hint:
                lines.append(f"    ヒント: {c.hint}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        e = html.escape
        # long inputs wrap inside their cell, so the message column keeps its width (a long list
        # of tuples once squeezed it to one character per line)
        code = "<td><code style='white-space:pre-wrap;word-break:break-all'>{}</code></td>".format
        rows = "".join(
            f"<tr><td>{'✓' if c.passed else '✗'}</td><td>{e(c.name)}</td>{code(e(c.input))}"
            f"{code(e(c.expected))}{code(e(c.got))}"
            f"<td style='min-width:16em'>{e(c.message)}"
            f"{'<br><b>ヒント:</b> ' + e(c.hint) if c.hint else ''}</td></tr>"
            for c in self.cases)
        return (f"<div class='exercise-report' data-passed='{str(self.passed).lower()}'><p><b>{e(self.summary)}</b></p>"
                "<table><tr><th>結果</th><th>ケース</th><th>入力</th><th>期待</th><th>あなたの関数</th>"
                f"<th>メッセージ</th></tr>{rows}</table></div>")


def summarize(grader: Grader, cases: list[Case], attempt: int) -> Report:
    """The report for these cases: passed when every case passed; the hint escalates with the attempt."""
    passed = bool(cases) and all(c.passed for c in cases)
    hint = grader.hint(attempt)
    for c in cases:
        if not c.passed and not c.hint and c.got != NOT_IMPLEMENTED:
            c.hint = hint
    n_ok = sum(c.passed for c in cases)
    if passed:
        summary = f"合格です（{grader.title_ja}）：{len(cases)} ケースすべて正解です。"
    elif any(c.got == NOT_IMPLEMENTED for c in cases):
        summary = f"未実装です（{grader.title_ja}）：関数の中の raise NotImplementedError を書き換えてから、もう一度実行してください。"
    else:
        summary = f"不合格です（{grader.title_ja}、{attempt} 回目）：{len(cases)} ケース中 {n_ok} ケースが正解です。"
    return Report(grader.id, passed, cases, summary, attempt)
