"""Exercise 01 (chapter 1): request_metrics(arrival_s, token_times_s) -> {ttft, tpot, itl, e2el}.

vLLM's benchmark definitions, as the engine's RequestMetrics (minimal_engine/engine/metrics.py):
TTFT = first token - arrival; E2EL = last token - arrival; ITL = the gaps between consecutive tokens;
TPOT = (E2EL - TTFT) / (n - 1) over tokens 2..n, and None for a single-token request (undefined there:
RequestMetrics.tpot returns None and the run summary leaves such requests out of the TPOT statistics).
Graded on hand cases, on random timestamps compared with RequestMetrics, which the learner's code
cannot look up (the timestamps are drawn here), and on three real requests of the default model: their
timestamps go to the learner's function and the answer must equal what the engine's RequestMetrics reports.
``itl`` may be any sequence of the values (a list, a tuple, a numpy array such as ``np.diff(token_times_s)``);
numbers may be numpy scalars.
"""
from __future__ import annotations

import math
import random

from course.exercises.kit import Case, Grader, call, failed_call_case
from minimal_engine.engine.sequence import RequestMetrics

KEYS = ("ttft", "tpot", "itl", "e2el")


def reference(arrival: float, times: list[float]) -> dict:
    m = RequestMetrics(arrival_time=arrival, first_token_time=times[0], token_times=list(times))
    return {"ttft": m.ttft, "tpot": m.tpot, "itl": [b - a for a, b in zip(times, times[1:])], "e2el": m.e2e_latency}


def _as_list(a):
    """A sequence of values as a list (a numpy array, a tuple, a range: the values are what is graded);
    anything else (a number, None, a dict, a string, a generator) as it is."""
    if a is None or isinstance(a, (str, bytes, dict, list)) or not hasattr(a, "__len__"):
        return a
    try:
        return a.tolist() if hasattr(a, "tolist") else list(a)
    except TypeError:      # a 0-d array has __len__ but no length
        return a


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(b, list):
        return isinstance(a, (list, tuple)) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    try:
        return math.isclose(float(a), b, rel_tol=1e-9, abs_tol=1e-9)
    except (TypeError, ValueError):
        return False


def _rounded(a, b) -> bool:
    """Whether ``a`` differs from ``b`` only as a rounded value would: within 0.1 ms, or ``b`` rounded to 1 to 6
    decimals (3 is milliseconds: blind reading 2026-12-07d ch01 #6 got definition messages for those)."""
    if isinstance(b, list):
        return (isinstance(a, (list, tuple)) and len(a) == len(b)
                and all(_close(x, y) or _rounded(x, y) for x, y in zip(a, b)))
    try:
        x = float(a)
        return b is not None and (math.isclose(x, b, rel_tol=0, abs_tol=1e-4)
                                  or any(math.isclose(x, round(b, k), rel_tol=0, abs_tol=1e-12) for k in range(1, 7)))
    except (TypeError, ValueError):
        return False


def _known_slips(arrival: float, times: list[float]) -> dict:
    """Common wrong formulas per key. One of them can equal a rounded right value: in the hand case 「到着が 0 でない」
    (E2EL - TTFT) / n is 0.1 = round(tpot, 1) (blind reading reviews10 ch01 #3); such a value gets the definition
    message, not the rounding one."""
    n, ttft, e2el = len(times), times[0] - arrival, times[-1] - arrival
    return {"tpot": [(e2el - ttft) / n, e2el / n, e2el / max(n - 1, 1)], "e2el": [times[-1] - times[0]]}


def _slipped(got: dict, arrival: float, times: list[float]) -> bool:
    """Whether a returned value equals one of the common wrong formulas of its key."""
    for k, values in _known_slips(arrival, times).items():
        try:
            if got[k] is not None and any(math.isclose(float(got[k]), v, rel_tol=1e-9, abs_tol=1e-9) for v in values):
                return True
        except (TypeError, ValueError):
            continue
    return False


def _milliseconds(a, b) -> bool:
    """Whether ``a`` is ``b`` in milliseconds (every value 1000 times the one in seconds)."""
    if isinstance(b, list):
        return isinstance(a, (list, tuple)) and len(a) == len(b) and all(_milliseconds(x, y) for x, y in zip(a, b))
    try:
        return b is not None and b != 0 and math.isclose(float(a), 1000 * b, rel_tol=1e-6)
    except (TypeError, ValueError):
        return False


def _itl_msg(got, exp: list) -> str:
    if not isinstance(got, (list, tuple)):
        return (f"itl が list ではありません（{type(got).__name__}）。連続する2トークンの間隔を、長さ n − 1 の list"
                "（または numpy 配列、tuple）で返してください")
    if len(got) != len(exp):
        return f"itl の長さが違います（{len(got)} 個。連続する2トークンの間隔なので、長さは n − 1 = {len(exp)} です）"
    return "itl の値が違います（長さ n − 1 は合っています。間隔は token_times_s[i + 1] − token_times_s[i] です）"


def _fmt(d) -> str:
    if not isinstance(d, dict):
        return repr(d)
    def f(v):
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(f(x) for x in v) + "]"
        return "None" if v is None else (f"{v:.4g}" if isinstance(v, (int, float)) else repr(v))
    return "{" + ", ".join(f"{k}: {f(d[k])}" for k in KEYS if k in d) + "}"


def _case(fn, name: str, arrival: float, times: list[float], timeout_s: float, exp: dict | None = None,
          inp: str | None = None) -> Case:
    inp = inp or f"arrival_s={arrival:g}, token_times_s={[round(t, 4) for t in times]}"
    exp = exp or reference(arrival, times)
    r = call(fn, arrival, list(times), timeout_s=timeout_s)
    if not r.ok:
        return failed_call_case(name, inp, _fmt(exp), r)
    got = r.value
    if not isinstance(got, dict) or set(KEYS) - set(got):
        return Case(name, inp, _fmt(exp), _fmt(got), False,
                    f"戻り値はキー {', '.join(KEYS)} を持つ dict にしてください")
    got = {**got, "itl": _as_list(got["itl"])}       # numpy arrays and tuples are graded on their values
    wrong = [k for k in KEYS if not _close(got[k], exp[k])]
    if not wrong:
        return Case(name, inp, _fmt(exp), _fmt(got), True, "OK")
    msgs = {"ttft": "ttft が違います（到着から最初のトークンまでです）",
            "tpot": ("tpot が違います（1トークンだけのときは None です）" if len(times) == 1 else
                     "tpot が違います（2トークン目から最後までの平均で、(E2EL − TTFT) ÷ (n − 1) です）"),
            "itl": _itl_msg(got["itl"], exp["itl"]),
            "e2el": "e2el が違います（到着から最後のトークンまでです）"}
    if all(_milliseconds(got[k], exp[k]) for k in wrong):
        msgs = {k: f"{k} がミリ秒になっています（1000 倍の値です。秒で返してください）" for k in KEYS}
    elif all(_rounded(got[k], exp[k]) for k in wrong) and not _slipped(got, arrival, times):
        msgs = {k: f"{k} の値が丸められています（秒のまま、丸めずに返してください）" for k in KEYS}
    return Case(name, inp, _fmt(exp), _fmt(got), False, " / ".join(msgs[k] for k in wrong))


def check(fn, ctx: dict) -> list[Case]:
    t = ctx.get("timeout_s", 5.0)
    cases = [_case(fn, "3トークン（手計算できる例）", 0.0, [0.5, 0.7, 1.0], t),
             _case(fn, "到着が 0 でない", 10.0, [10.2, 10.3, 10.45, 10.6], t),
             _case(fn, "1トークンだけ", 2.0, [2.25], t),
             _case(fn, "間隔がばらばら", 1.0, [1.8, 1.81, 2.5, 2.51, 2.52], t)]
    rng = random.Random(ctx.get("seed", 27))
    for k in range(3):   # random requests the learner's code cannot know in advance
        arrival = rng.uniform(0, 100)
        times, now = [], arrival + rng.uniform(0.05, 2.0)
        for _ in range(rng.randint(2, 12)):
            times.append(now)
            now += rng.uniform(0.005, 0.2)
        cases.append(_case(fn, f"ランダムなリクエスト {k + 1}（RequestMetrics と比較）", arrival, times, t))
    if ctx.get("engine") is False or not all(c.passed for c in cases):
        return cases
    for i, m in enumerate(engine_requests()):     # the engine's own timestamps and its own RequestMetrics
        cases.append(_engine_case(fn, i, m, t))
    return cases


def engine_requests() -> list:
    """RequestMetrics of three real requests: the default model generating (greedy, 8 tokens, two at once)."""
    from minimal_engine import LLM, SamplingParams
    llm = LLM(max_num_seqs=2, max_model_len=128)
    outs = llm.generate(["吾輩は猫である。", "名前はまだ無い。", "どこで生れたか"],
                        SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
    return [o.metrics for o in outs]


def _engine_case(fn, i: int, m, timeout_s: float) -> Case:
    """The learner's function on a real request's timestamps against what the engine itself reports."""
    exp = {"ttft": m.ttft, "tpot": m.tpot, "itl": [b - a for a, b in zip(m.token_times, m.token_times[1:])],
           "e2el": m.e2e_latency}
    return _case(fn, f"エンジンの実際のリクエスト {i + 1}（エンジンの RequestMetrics と比較）", m.arrival_time,
                 list(m.token_times), timeout_s, exp,
                 f"同梱モデルで生成した {len(m.token_times)} トークンの時刻（perf_counter の秒）")


GRADER = Grader(
    id="01_request_metrics", chapter=1, title_ja="リクエストの TTFT・TPOT・ITL・E2EL",
    check=check,
    hints=["TTFT と E2EL はどちらも「到着」から測ります。TPOT は最初のトークンを除いた平均です。",
           "tpot = (e2el − ttft) / (n − 1) です。n == 1 のときは割り算できないので None を返してください。",
           "itl は [token_times_s[i+1] − token_times_s[i] for i in range(n − 1)] です。"])
