"""Lab 8's readings: the two acceptance figures, the draft's repetition loop, and why the
speedup falls with concurrency on this CPU (a prediction decided by the run)::

    alpha_from_length(3.94, 4)                  # Leviathan's alpha for a measured mean length
    print(acceptance_reading(res))              # 提案の採用率 and 受理率 alpha, with definitions
    print(loop_reading(trace_rows))             # accepted drafts inside a repeated n-gram
    print(verdicts(concurrency_predictions(rows, k=4)))

Two numbers are easy to confuse. vLLM's "acceptance rate" is accepted / proposed (here
提案の採用率); when every step proposes k drafts, mean accepted length = 1 + k x that share,
exactly. Leviathan et al. (2023)'s alpha is the probability that a draft is accepted given that
the drafts before it were: the formula (1 - alpha^(k+1)) / (1 - alpha) takes this alpha, never
the share. ``alpha_from_length`` solves the formula for the measured mean length.
"""
from __future__ import annotations

from course.labkit.predictions import Prediction
from course.labkit.spec import alpha_from_length
from minimal_engine.calculators.roofline import spec_tokens_per_step


def acceptance_reading(res: dict, method: str) -> str:
    """One method's two acceptance figures, each with its definition and the numbers it comes
    from."""
    x, k = res["methods"][method], res["k"]
    share, length = x["acceptance_rate"], x["mean_accepted_length"]
    alpha = alpha_from_length(length, k)
    first = x["acceptance_by_position"][0] if x["acceptance_by_position"] else float("nan")
    return (f"{x['label']}（k = {k}）\n"
            f"  提案の採用率 = 受理 ÷ 提案 = {x['accepted']} ÷ {x['proposed']} = {share:.3f}"
            f"（vLLM の acceptance rate）\n"
            f"  平均受理長 = {length:.2f}、1 + k × 提案の採用率 = {1 + k * share:.2f}"
            f"（各ステップが k 個提案すれば一致します）\n"
            f"  受理率 α（前の下書きが受理されたときに次が受理される確率）= {alpha:.3f}"
            f"（(1−α^(k+1))/(1−α) = {length:.2f} を解いた値）。1番目の下書きの受理 {first:.2f}\n"
            f"  採用率 {share:.3f} を α として式に入れると {spec_tokens_per_step(share, k):.2f}"
            f"（実測 {length:.2f} より小さいのは定義の違いです）")


def _repeat(tokens: list, n: int) -> bool:
    """Whether the last n tokens already occurred earlier in ``tokens``."""
    if len(tokens) <= n:
        return False
    tail = tokens[-n:]
    return any(tokens[i:i + n] == tail for i in range(len(tokens) - n))


def loop_share(rows: list[dict], n: int = 4) -> dict:
    """From ``lab08.trace_steps`` rows: how many accepted drafts complete an n-gram the output
    already had (a repetition loop), and the acceptance in the steps that ended before the first repeat."""
    out, flags = [], []
    for r in rows:
        for t in r["tokens"]:
            out.append(t)
            flags.append(_repeat(out, n))
    start = flags.index(True) if True in flags else len(out)
    accepted, in_loop, before, pos = 0, 0, [0, 0], 0       # before: [accepted, proposed]
    for r in rows:
        if r["drafts"] and pos + len(r["tokens"]) <= start:
            before[0] += r["accepted"]
            before[1] += len(r["drafts"])
        accepted += r["accepted"]
        in_loop += sum(flags[pos:pos + r["accepted"]])
        pos += len(r["tokens"])
    return {"n": n, "accepted": accepted, "in_loop": in_loop, "before_accepted": before[0],
            "before_proposed": before[1], "output": "".join(out)}


def loop_reading(rows: list[dict], n: int = 4) -> str:
    s = loop_share(rows, n)
    b = s["before_accepted"] / s["before_proposed"] if s["before_proposed"] else float("nan")
    return (f"受理された下書き {s['accepted']} 個のうち {s['in_loop']} 個は、出力にすでにあった "
            f"{n} トークンの並びを繰り返す所でした。繰り返しが始まる前の提案の採用率は "
            f"{s['before_accepted']} ÷ {s['before_proposed']} = {b:.2f} です。\n"
            f"出力の末尾: {s['output'][-40:]}")


def formula_prediction(pairs: list[tuple[float, float]], tol: float = 0.05) -> Prediction:
    """pairs: (the formula's speedup at alpha solved from the mean length and the measured c, the
    measured speedup). Both known gaps (a verify step slower than a decode step, c measured as the
    forward alone) push the prediction above the measurement."""
    below = sum(p < m - tol for p, m in pairs)
    return Prediction(f"式の予測は、どの行でも実測以上になる（差 {tol} 以内の下回りは除く）", below == 0,
                      "予測 / 実測 " + "、".join(f"{p:.2f} / {m:.2f}" for p, m in pairs),
                      "c は速度比とは別の時点に測った値なので、そのあいだに負荷が変わると合いません。"
                      "負荷の警告を確かめ、繰り返しを増やすか、出力長を長くして受理の数を増やしてください")


def break_even_prediction(label: str, alpha: float, break_even: float, speedup: float,
                          distilled: bool) -> Prediction:
    """The distilled draft's alpha is above the break-even alpha and it is faster than no
    speculation; the undistilled one's is below and it is slower."""
    side, pace = ("上回り", "速い") if distilled else ("下回り", "遅い")
    above = alpha > break_even
    return Prediction(f"{label}は、受理率 α が損益分岐の α を{side}、投機なしより{pace}",
                      above == distilled and (speedup > 1) == distilled,
                      f"受理率 α {alpha:.3f}、損益分岐の α {break_even:.3f}、速度比 {speedup:.2f}",
                      "c が負荷でばらついた（損益分岐は c で決まります）。負荷の警告を確かめ、"
                      "c の測定を繰り返してください")


def step_fit(rows: list[dict]) -> dict:
    """Least squares of the no-speculation step time (concurrency / tok/s) on the batch:
    step = fixed + per_token x batch."""
    xs = [r["concurrency"] for r in rows]
    ys = [1000 * r["concurrency"] / r["base_tok_s"] for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    a = my - b * mx
    worst = max(abs(a + b * x - y) / y for x, y in zip(xs, ys))
    return {"fixed_ms": a, "per_token_ms": b, "step_ms": ys, "worst_error": worst}


def concurrency_predictions(rows: list[dict], k: int) -> list[Prediction]:
    """Rows: concurrency, base_tok_s (no speculation) and ngram_speedup. The CPU mechanism: a fixed
    time per step, which both batching and speculation amortise, plus real per-token compute."""
    f = step_fit(rows)
    a, b = f["fixed_ms"], f["per_token_ms"]
    share1 = a / (a + b * rows[0]["concurrency"]) if a + b else float("nan")
    steps = "、".join(f"{r['concurrency']} → {t:.2f} ms" for r, t in zip(rows, f["step_ms"]))
    first, last = rows[0], rows[-1]
    return [
        Prediction("投機なしの1ステップの時間は「固定の時間＋トークンあたりの時間×バッチ」で表せ"
                   "（ずれ 15% 以内）、最初のバッチでは固定の時間が半分以上を占める",
                   f["worst_error"] <= 0.15 and share1 >= 0.5,
                   f"1ステップ {steps}。固定 {a:.2f} ms、1トークン {b:.3f} ms、"
                   f"最初のバッチで固定の割合 {share1:.0%}、式とのずれ最大 {f['worst_error']:.0%}",
                   "固定の時間が小さい（速い CPU、スレッドが多い）か、負荷で時間がばらついた。"
                   "負荷の警告を確かめ、繰り返しを増やす"),
        Prediction(f"n-gram の速度比は、同時リクエスト数 {first['concurrency']} → "
                   f"{last['concurrency']} で下がる",
                   last["ngram_speedup"] < first["ngram_speedup"],
                   f"速度比 {first['ngram_speedup']:.2f} → {last['ngram_speedup']:.2f}",
                   "提案の採用率がバッチで上がった、または固定の時間が小さくバッチの効果が弱い"),
    ]


__all__ = ["acceptance_reading", "alpha_from_length", "break_even_prediction",
           "concurrency_predictions",
           "formula_prediction", "loop_reading",
           "loop_share", "step_fit"]
