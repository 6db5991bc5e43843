"""Lab 8's readings: the two acceptance figures, the draft's repetition loop (and its period
against k), diminishing returns in k, and why the speedup falls with concurrency on this CPU
(predictions decided by the run)::

    alpha_from_length(3.94, 4)                  # Leviathan's alpha for a measured mean length
    print(acceptance_reading(res))              # 提案の採用率 and 受理率 alpha, with definitions
    print(loop_reading(trace_rows))             # accepted drafts inside a repeated n-gram
    print(verdicts(concurrency_predictions(rows, k=4)))

The two acceptance figures (vLLM's accepted / proposed, Leviathan's alpha): see course.labkit.spec.
"""
from __future__ import annotations

import math

from course.labkit.predictions import UNDECIDED, Prediction
from course.labkit.spec import alpha_from_length, constant_alpha_gains
from course.labkit.spread import RETRY, decide, ratio_span
from minimal_engine.calculators.roofline import spec_tokens_per_step


def acceptance_reading(res: dict, method: str) -> str:
    """One method's two acceptance figures, each with its definition and the numbers it comes from."""
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
    already had (a repetition loop), and the acceptance in the steps that ended before the first repeat
    (accepted / proposed, which depends on k, and how many of those steps kept their first draft, which does not)."""
    out, flags = [], []
    for r in rows:
        for t in r["tokens"]:
            out.append(t)
            flags.append(_repeat(out, n))
    start = flags.index(True) if True in flags else len(out)
    accepted, in_loop, before, pos = 0, 0, [0, 0, 0, 0], 0  # before: [accepted, proposed, steps, first kept]
    loop_steps = loop_full = 0
    for r in rows:
        if r["drafts"] and pos + len(r["tokens"]) <= start:
            before[0] += r["accepted"]
            before[1] += len(r["drafts"])
            before[2] += 1
            before[3] += r["accepted"] >= 1
        elif r["drafts"] and pos >= start:
            loop_steps += 1
            loop_full += r["accepted"] == len(r["drafts"])
        accepted += r["accepted"]
        in_loop += sum(flags[pos:pos + r["accepted"]])
        pos += len(r["tokens"])
    return {"n": n, "accepted": accepted, "in_loop": in_loop, "before_accepted": before[0],
            "before_proposed": before[1], "before_steps": before[2], "before_first": before[3], "loop_steps": loop_steps, "loop_full": loop_full,
            "output": "".join(out)}


def loop_period(tokens: list, min_turns: int = 3, slack: float = 0.2) -> int | None:
    """The smallest period p such that the output's last ``min_turns`` x p tokens repeat with period p,
    up to ``slack`` of the comparisons (a loop like 涯を、自分の生 / 涯に、自分の生 has period 5 with one
    token alternating); None if the tail does not loop."""
    for p in range(1, len(tokens) // min_turns + 1):
        tail = tokens[-min_turns * p:]
        misses = sum(tail[i] != tail[i + p] for i in range(len(tail) - p))
        if misses <= int(slack * (len(tail) - p)):
            return p
    return None


def loop_reading(rows: list[dict], n: int = 4, k: int | None = None) -> str:
    s = loop_share(rows, n)
    b = s["before_accepted"] / s["before_proposed"] if s["before_proposed"] else float("nan")
    f = s["before_first"] / s["before_steps"] if s["before_steps"] else float("nan")
    text = (f"受理された下書き {s['accepted']} 個のうち {s['in_loop']} 個は、出力にすでにあった "
            f"{n} トークンの並びを繰り返す所でした。繰り返しが始まる前の下書きのあるステップ "
            f"{s['before_steps']} 回のうち、1つ目の下書きが受理されたのは {s['before_first']} 回"
            f"（{f:.2f}）です（提案の採用率は {s['before_accepted']} ÷ {s['before_proposed']} = {b:.2f} で、"
            f"こちらは k によって変わります。ステップ数が少ないので、どちらも目安です）。\n"
            f"出力の末尾: {s['output'][-40:]}")
    period = loop_period([t for r in rows for t in r["tokens"]])
    if period is None or k is None:
        return text
    text += (f"\n出力の末尾は約 {period} トークンの周期で繰り返しています。繰り返しの中の下書きのある"
             f"ステップ {s['loop_steps']} 回のうち {s['loop_full']} 回で、k = {k} 個全部が受理されました。")
    if (k + 1) % period == 0:
        return text + (f"k + 1 = {k + 1} が周期の倍数なので、どのステップも周期の同じ位置から始まります。"
                       "そこから k 個の下書きがすべて当たれば、毎回全部受理が続きます。この k の受理率 α は"
                       "周期と k の重なり方で決まる値で、ドラフトモデルの実力ではありません"
                       "（別の k では、同じ出力でも α が変わります）。")
    if k >= period:
        return text + (f"k = {k} は周期より長いので、下書きの列はほとんどのステップで、ドラフトが外す位置を"
                       "またぎます。その先の下書きは受理されず、forward のコストだけが増えます。")
    return text + (f"k + 1 = {k + 1} は周期の倍数ではないので、ステップの始まりは周期の中でずれていき、"
                   "ドラフトが外す位置がときどき下書きの中に入ります。")


def speedup_span(res: dict, method: str) -> tuple[float, float]:
    """The smallest and largest paired speedup (repeat i over no speculation's repeat i) of ``run_spec_lab``;
    a result without them (saved before the pairing) falls back to the cross ratios of the tok/s ranges."""
    x = res["methods"][method]
    if "speedup_min" in x:
        return x["speedup_min"], x["speedup_max"]
    return ratio_span(res["methods"]["none"], x, "tok_s")


def formula_prediction(pairs: list[tuple[float, float]], tol: float = 0.005, ranges: list | None = None) -> Prediction:
    """pairs: (the formula's speedup at the solved alpha and measured c, the measured speedup). c's denominator
    (a step timed apart from the run) and the verify step's time can push either way; the prefill pulls toward 1.
    ranges: per row ((prediction at the largest and smallest c), ``speedup_span``). A median above its prediction
    (beyond ``tol``): 予想と違う when even the highest prediction is below the lowest measured, else 判定できません."""
    ranges = ranges or [((p, p), (m, m)) for p, m in pairs]
    above = [i for i, (p, m) in enumerate(pairs) if p < m - tol]
    clear = any(ranges[i][0][1] < ranges[i][1][0] for i in above)
    rows = []
    for (p, m), ((pl, ph), (ml, mh)) in zip(pairs, ranges):
        spread = f"（予測 {pl:.2f}〜{ph:.2f}、実測 {ml:.2f}〜{mh:.2f}）" if (pl, ml) != (ph, mh) else ""
        rows.append(f"{p:.2f} / {m:.2f}{spread}")
    measured = "予測 / 実測 " + "、".join(rows)
    if above:
        measured += f"。実測の中央値が予測を上回った行: {len(above)} 行（{len(pairs)} 行中）"
    why = ("候補は3つで、この実行では分けられません。1つ目は c の分母です。c はターゲットの1ステップを速度比の実行とは別に"
           "測っています。速度比の実行の投機なしの TPOT より短く測れれば c は大きく出て、予測は下にずれます。"
           "2つ目は、検証のステップが Decode より短い k です（上の Linear 層の印字で「短い」の k）。"
           "3つ目は式にない Prefill です（速度比を 1 に近づけるので、1 より小さい行では実測を上げます）")
    return decide(not above, bool(above) and not clear, "式の予測は、どの行でも実測以上になる", measured,
                  why + "。k ごとに、Linear 層の印字の向きと比べてください",
                  why + "。繰り返しを増やすか、出力長を長くして受理の数を増やすと、幅が狭まります")


def step_fit(rows: list[dict]) -> dict:
    """Least squares of the no-speculation step time on the batch: step = fixed + per_token x batch. The step
    time is the baseline's TPOT (``base_tpot_ms``: each step gives every running request one token; the prefill
    is not in it) when the row has it, else concurrency / tok/s (which also spreads the prefill over the tokens)."""
    xs = [r["concurrency"] for r in rows]
    ys = [r["base_tpot_ms"] if r.get("base_tpot_ms") else 1000 * r["concurrency"] / r["base_tok_s"] for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    a = my - b * mx
    worst = max(abs(a + b * x - y) / y for x, y in zip(xs, ys))
    return {"fixed_ms": a, "per_token_ms": b, "step_ms": ys, "worst_error": worst}


def concurrency_predictions(rows: list[dict], k: int) -> list[Prediction]:
    """Rows: concurrency, base_tok_s and ngram_speedup. The CPU mechanism: a fixed time per step (Python and the
    weight pass, which the fit alone cannot tell apart) that batching and speculation both amortise."""
    f = step_fit(rows)
    a, b = f["fixed_ms"], f["per_token_ms"]
    share1 = a / (a + b * rows[0]["concurrency"]) if a + b else float("nan")
    steps = "、".join(f"{r['concurrency']} → {t:.2f} ms" for r, t in zip(rows, f["step_ms"]))
    first, last = rows[0], rows[-1]
    return [
        Prediction("投機なしの1ステップの時間は「固定の時間＋トークンあたりの時間×バッチ」で表せ"
                   "（ずれ 15% 以内）、最初のバッチでは固定の時間が半分以上を占める",
                   f["worst_error"] <= 0.15 and share1 >= 0.5,
                   f"1ステップ{'（投機なしの TPOT）' if rows[0].get('base_tpot_ms') else ''} {steps}。固定 {a:.2f} ms、1トークン {b:.3f} ms、"
                   f"最初のバッチで固定の割合 {share1:.0%}、式とのずれ最大 {f['worst_error']:.0%}",
                   "固定の時間が小さい（速い CPU、スレッドが多い）か、負荷で時間がばらついた。"
                   "負荷の警告を確かめ、繰り返しを増やす"),
        Prediction(f"n-gram の速度比は、同時リクエスト数 {first['concurrency']} → "
                   f"{last['concurrency']} で下がる",
                   last["ngram_speedup"] < first["ngram_speedup"],
                   f"速度比 {first['ngram_speedup']:.2f} → {last['ngram_speedup']:.2f}",
                   "提案の採用率がバッチで上がった、または固定の時間が小さくバッチの効果が弱い"),
    ]


def over_length(res: dict, slack: float = 0.02, linear_ms: dict | None = None) -> list[str]:
    """Warnings for a speedup (median, or one repeat's ``speedup_max``) above the mean accepted length: only a
    verify step shorter than a decode step, or a slowed baseline repeat, gives it. A median TPOT ratio of three
    pairs above it too rules out the one slowed baseline (reviews11 ch08 #3). ``linear_ms``: the Linear pass."""
    out = []
    base = res["methods"].get("none", {})
    for x in res["methods"].values():
        s, length = x.get("speedup"), x.get("mean_accepted_length")
        if s is None or length is None or math.isnan(length):
            continue                              # the baseline has no drafts: its accepted length is NaN
        top = max(s, x.get("speedup_max", s))
        if top <= length * (1 + slack):
            continue
        b, k = res.get("concurrency", 1), res["k"]
        rows = (b, b * (k + 1))
        if s > length * (1 + slack):
            line = f"注意：{x['label']}（k = {k}）の速度比 {s:.2f} が平均受理長 {length:.2f} を超えています。"
        else:
            line = (f"注意：{x['label']}（k = {k}）の速度比は中央値 {s:.2f} ですが、繰り返しの1回の比 {top:.2f} が"
                    f"平均受理長 {length:.2f} を超えています。")
        if top > k + 1:
            line += f"1ステップで進むトークンは最大 k+1 = {k + 1} なので、この比は検証が Decode よりずっと短くないと出ません。"
        line += ("1ステップで進むのは平均受理長以下なので、こうなるのは、k+1 トークンの検証が1トークンの Decode より"
                 "短いときか、その回の投機なしの計測がほかの回より遅かったときです。")
        if linear_ms and all(r in linear_ms for r in rows):
            line += (f"Linear 層だけの時間は、同じ実行で {rows[0]} 行 {linear_ms[rows[0]]:.2f} ms、"
                     f"{rows[1]} 行 {linear_ms[rows[1]]:.2f} ms でした。")
        if "tok_s_min" in base and base["tok_s_min"] != base.get("tok_s_max"):
            line += (f"投機なしの tok/s は中央値 {base['tok_s']:.1f}、最小 {base['tok_s_min']:.1f}〜"
                     f"最大 {base['tok_s_max']:.1f} でした。")
        t = 1 / x["tpot_ratio"] if x.get("tpot_ratio") else float("nan")
        if res.get("repeats", 1) >= 3 and t > length * (1 + slack):   # a median of 3 pairs: one slow baseline can't move it
            out.append(line + f"Prefill を含まない TPOT の比の中央値 {t:.2f} も平均受理長を超えています。3回の対の比の"
                       "中央値は、投機なしの1回の遅れでは動きません。検証のステップが Decode のステップより短かったと"
                       "考えられます（このエンジンの CPU の Linear のカーネルは、1 行より数行で速いことがあります）。"
                       "バッチ 1 の速度比は、その分だけ大きく出ています。")
            continue
        out.append(line + "この実行では2つを分けられないので、範囲の上の端は読まず、測り直して確かめてください。")
    return out


class Slowed(Prediction):
    """判定できません because a speedup exceeds its mean accepted length (``held`` is None)."""

    def verdict(self) -> str:
        return (f"{UNDECIDED}：{self.text}（{self.basis}：{self.measured}）。速度比が平均受理長を超えた k があり、"
                f"投機なしの計測が遅れたか、検証が Decode より短かった疑いがあります。{self.otherwise}")


def k_gain_prediction(speedups: dict[int, float], lengths: dict[int, float] | None = None,
                      spans: dict[int, tuple] | None = None) -> Prediction:
    """speedups: k -> n-gram speedup (repetitive text, batch 1), three k or more: does the gain per added draft
    shrink? spans: k -> paired (min, max); undecided unless the gains' ranges decide. lengths: k -> mean accepted
    length (its gains, and a constant alpha's, are printed); a speedup above it: 判定できません."""
    ks = sorted(speedups)
    sp = {k: (spans or {}).get(k, (speedups[k], speedups[k])) for k in ks}
    gains = [(speedups[b] - speedups[a]) / (b - a) for a, b in zip(ks, ks[1:])]
    ranges = [((sp[b][0] - sp[a][1]) / (b - a), (sp[b][1] - sp[a][0]) / (b - a)) for a, b in zip(ks, ks[1:])]
    text = "、".join(f"k {a} → {b}: {g:+.3f}" for a, b, g in zip(ks, ks[1:], gains))
    odd = [k for k in ks if lengths and k in lengths and speedups[k] > lengths[k] * 1.02]
    note = ("。平均受理長を超えた速度比: "
            + "、".join(f"k {k} で {speedups[k]:.2f} > {lengths[k]:.2f}" for k in odd)) if odd else ""
    if lengths and all(k in lengths for k in ks):
        note += "。平均受理長の k 1 あたりの伸び " + "、".join(
            f"k {a} → {b}: {(lengths[b] - lengths[a]) / (b - a):+.3f}" for a, b in zip(ks, ks[1:]))
    note += _constant_alpha(ks, gains, lengths)
    held = len(gains) >= 2 and all(g2 < g1 for g1, g2 in zip(gains, gains[1:]))
    clear = len(gains) < 2 or all(r2[1] < r1[0] for r1, r2 in zip(ranges, ranges[1:])) or any(
        r2[0] > r1[1] for r1, r2 in zip(ranges, ranges[1:]))
    shown = "、".join(f"k={k} {speedups[k]:.2f}" + (f"（{sp[k][0]:.2f}〜{sp[k][1]:.2f}）" if sp[k][0] != sp[k][1] else "")
                      for k in ks)
    if odd:                   # a slowed baseline, not the repeats' spread: say so instead of spread.NOISE
        return Slowed("速度比の、k を 1 増やすあたりの伸びは、k が大きいほど小さくなる（伸びが逓減する）", None,
                      f"速度比 {shown}。k 1 あたりの伸び {text}" + note, RETRY)
    return decide(held, not clear,
                  "速度比の、k を 1 増やすあたりの伸びは、k が大きいほど小さくなる（伸びが逓減する）",
                  f"速度比 {shown}。k 1 あたりの伸び {text}" + note,
                  "速度比は負荷でばらつきます。負荷の警告を確かめ、繰り返しを増やしてください。"
                  "受理率 α が 1 に近いと、伸びはなかなか小さくなりません", RETRY)


def _constant_alpha(ks: list[int], gains: list[float], lengths: dict | None) -> str:
    """How much of the speedup's falloff in k a constant alpha explains (reviews11 ch08 #2)."""
    if not lengths or len(ks) < 3 or any(k not in lengths for k in ks) or gains[0] <= 0:
        return ""
    a, exp = constant_alpha_gains(ks, lengths[ks[0]])
    r_sp, r_ex = gains[-1] / gains[0], exp[-1] / exp[0]
    text = (f"。α を k={ks[0]} の {a:.3f} のまま一定とした平均受理長の伸び "
            + "、".join(f"k {c} → {b}: {e:+.3f}" for c, b, e in zip(ks, ks[1:], exp))
            + f"。伸びの縮み方は、速度比 {r_sp:.2f} 倍、α 一定の式 {r_ex:.2f} 倍")
    return text + ("。速度比の逓減の大部分は α^i 以外から来ています。候補は、検証の行数、出力長の端で下書きが切られること、"
                   "Prefill の割合、k とともに下がる α で、この実行では分けられません" if r_sp < 0.8 * r_ex
                   else "。速度比の逓減は、α^i の逓減で説明できる大きさです")


def weight_pass_prediction(linear_ms: dict[int, float], step_ms: float) -> Prediction:
    """linear_ms: rows -> one pass through every Linear layer; step_ms: the no-speculation step at the smallest
    batch. Expected: 4 rows cost under twice 1 row (rows hide behind the weight reads) and the pass is a quarter
    or more of the step. Either part can fail on a given CPU."""
    b0, b1 = sorted(linear_ms)[0], sorted(linear_ms)[1]
    t0, t1 = linear_ms[b0], linear_ms[b1]
    share = t0 / step_ms if step_ms else float("nan")
    return Prediction(f"Linear 層だけの時間は、{b0} 行 → {b1} 行で 2 倍未満しか増えず（重みを読む時間に"
                      f"行の演算が隠れる）、バッチ {b0} の1ステップの 1/4 以上を占める",
                      t1 < 2 * t0 and share >= 0.25,
                      "Linear 層だけ " + "、".join(f"{b} 行 {t:.2f} ms" for b, t in sorted(linear_ms.items()))
                      + f"。1ステップ {step_ms:.2f} ms のうち {share:.0%}、残り {step_ms - t0:.2f} ms は"
                      "アテンション・Python の処理・サンプリングなど",
                      "行を増やすと時間もほぼ比例して増えるなら、この CPU では行列積が演算で決まっています"
                      "（重みがキャッシュに収まる、または演算の遅い CPU）。割合が小さいなら、固定の時間の"
                      "大部分は Python の処理です。負荷の警告も確かめてください")


__all__ = ["acceptance_reading", "alpha_from_length", "concurrency_predictions", "k_gain_prediction", "loop_period",
           "weight_pass_prediction", "formula_prediction", "loop_reading", "speedup_span", "loop_share", "step_fit"]
