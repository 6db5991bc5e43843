"""Lab 1 課題3 and 課題5: the concurrency sweep read from its runs, and the tasks' predictions decided
against the repeats' spread (``course.labkit.spread``)::

    sweep = lab01.sweep_lab(prompt_len=64, output_len=32)
    print(sweep_reading(sweep, prompt_len=64, output_len=32))
    print(verdicts(sweep_predictions(sweep, prompt_len=64), sweep["load"]))
    print(verdicts(plateau_predictions(longer, 256, shorter=sweep, shorter_prompt=64), longer["load"], sweep["load"]))

What the sweep measures is one burst: every request's prompt is prefilled, then all decode together.
So output tok/s = N x O / (T_prefill + T_decode), where T_prefill is the time until every request has
its first token: N x O / T_prefill is only an upper bound, reached if decoding took no time. The
scheduler gives each running request its decode token first and fills the rest of the step's budget
(``max_num_batched_tokens``) with prompt chunks, so above the budget the prefill takes more steps
than prompt tokens / budget (``prefill_steps``), and the requests prefilled first wait for the rest.

Why the gain of a doubling shrinks, as the run shows it (``last_doubling``): with decode only, the gain is
the concurrency ratio over the TPOT ratio (a step's fixed time shared by more requests, while each
request's own work grows the step); with every prefill inside the wall time, a prefill that grows as fast
as N caps tok/s at the upper bound above. The measured gain is k x (1 / TPOT ratio) x the rest; where
the prefill's share of the wall time rose, the rest is its factor: the reading prints both factors and
names the smaller (the larger effect). A TPOT that grows nearly as fast as N leaves nothing shared (on
this CPU: per-request compute and K/V copies larger than the fixed time, or another program's load).
"""
from __future__ import annotations

import statistics

from course.labkit.predictions import Prediction
from course.labkit.spread import RETRY, decide, order, ratio_span, spread_text
from course.runtime import MAX_NUM_SEQS
from minimal_engine.config import EngineConfig

STEP_BUDGET = EngineConfig.max_num_batched_tokens   # the lab's engine keeps the default (runtime)
TPOT_SHARE = 4   # 課題3: TPOT grows by less than a quarter of the concurrency's factor (1/2 never failed)
PLATEAU = 1.25   # 課題5: with prompt 256, the sweep's last doubling gains less than this (nearly flat)
PREFILL_MOST = 0.5   # 課題5: the plateau comes from the prefill when it is at least half of the wall time
FALL = 0.1   # a TPOT this much shorter at a larger concurrency contradicts 課題3 (when beyond the noise)
SHARED_GONE = 0.75   # TPOT grew by at least this share of the concurrency ratio: little of the step is shared
BUSY = "ほかのプログラムが CPU を使っている（→ 負荷の警告を確かめ、繰り返しを増やして測り直す）"


def prefill_steps(n: int, prompt_len: int, budget: int = STEP_BUDGET, max_seqs: int = MAX_NUM_SEQS) -> tuple[int, int]:
    """Steps until all ``n`` prompts (arriving at once) are prefilled, as the scheduler runs them: each
    step first gives every running request its next decode token (or its next prompt chunk), then admits
    waiting prompts into what is left of ``budget``. Returns (steps, decode tokens those steps took)."""
    left, running, waiting, steps, decoded = [prompt_len] * n, [], list(range(n)), 0, 0
    while any(left):
        steps, b = steps + 1, budget
        for i in running:
            if b <= 0:
                break
            k = 1 if left[i] == 0 else min(left[i], b)
            decoded += left[i] == 0
            left[i] -= 0 if left[i] == 0 else k
            b -= k
        while waiting and b > 0 and len(running) < max_seqs:
            i = waiting.pop(0)
            k = min(left[i], b)
            left[i], b = left[i] - k, b - k
            running.append(i)
    return steps, decoded


def burst_times(run: dict) -> dict:
    """One run of a burst: ``prefill_ms`` (start to the last request's first token), ``wall_ms`` (to the
    last token) and ``steps`` (engine steps until that first token; None for a server, which has none)."""
    prefill = max(r["first_token_ms"] for r in run["requests"])
    wall = max(r["token_times_ms"][-1] for r in run["requests"])
    marks = [i for i, s in enumerate(run.get("steps") or []) if s.get("first_tokens")]
    return {"prefill_ms": prefill, "wall_ms": wall, "steps": marks[-1] + 1 if marks else None}


def phases(sweep: dict) -> dict[int, dict]:
    """Per concurrency, the medians over the runs of ``prefill_ms`` and ``wall_ms`` (``burst_times``);
    a sweep may carry them as ``phases`` (tests, or numbers read back from a saved reading)."""
    if "phases" in sweep:
        return sweep["phases"]
    out = {}
    for n, runs in (sweep.get("runs") or {}).items():
        times = [burst_times(x) for x in runs]
        out[n] = {k: statistics.median(t[k] for t in times) for k in ("prefill_ms", "wall_ms")}
    return out


def sweep_reading(sweep: dict, prompt_len: int, output_len: int, budget: int = STEP_BUDGET) -> str:
    """Per point of ``lab01.sweep_lab``'s result: the repeats' ranges, the prefill's steps, its share of the
    burst's time, and output tok/s as N x O / (T_prefill + T_decode) with the upper bound N x O / T_prefill."""
    rows, runs = sweep["rows"], sweep["runs"]
    first, last = rows[0], rows[-1]
    lines = [f"同時 {first['concurrency']} → {last['concurrency']}: 1ステップ（TPOT）は "
             f"{first['tpot_ms']:.1f} → {last['tpot_ms']:.1f} ms"
             f"（{last['tpot_ms'] / first['tpot_ms']:.2f} 倍）、1ステップで作るトークンは "
             f"{last['concurrency'] / first['concurrency']:.0f} 倍。繰り返しの中央値（最小〜最大）:"]
    lines += [f"同時 {r['concurrency']:>2}: TTFT {spread_text(r, 'ttft_ms', ' ms')}、TPOT {spread_text(r, 'tpot_ms', ' ms')}、"
              f"tok/s（出力）{spread_text(r, 'tok_s')}" for r in rows]
    for r in rows:
        n = r["concurrency"]
        times = [burst_times(x) for x in runs[n]]
        pre = statistics.median(t["prefill_ms"] for t in times)
        wall = statistics.median(t["wall_ms"] for t in times)
        counted = [t["steps"] for t in times if t["steps"] is not None]
        sim, decoded = prefill_steps(n, prompt_len, budget)
        steps = statistics.median_low(counted) if counted else sim
        if steps > 1:
            why = (f"予算 {budget:,} トークンを超えるので Prefill は {steps} ステップに分かれます"
                   + (f"（2ステップ目からは、先に Prefill を終えたリクエストの Decode が予算を"
                      f"合わせて {decoded} トークン使います）" if decoded else ""))
        else:
            why = f"1ステップの予算 {budget:,} トークンに収まります"
        lines.append(f"同時 {n:>2}: プロンプトは合計 {n * prompt_len:,} トークンで、{why}。全員の最初のトークンまで"
                     f"（Prefill）{pre:.0f} ms は所要時間 {wall:.0f} ms の {100 * pre / wall:.0f}%、残り（Decode）"
                     f"{wall - pre:.0f} ms。tok/s（出力）= {n} × {output_len} ÷ {wall / 1000:.3f} s = "
                     f"{n * output_len / wall * 1000:.0f}（Decode に時間がかからなかった場合の上限は "
                     f"{n} × {output_len} ÷ {pre / 1000:.3f} s = {n * output_len / pre * 1000:.0f}）")
    return "\n".join(lines)


def last_doubling(rows: list[dict], ph: dict, prompt_len: int | None = None) -> tuple[str, str]:
    """The sweep's last step up in concurrency as the run shows it: (numbers, which effect made the gain).
    Where the last point's prefill splits into several steps (``prefill_steps``), the requests prefilled
    first wait for the rest, so their TPOT holds prefill time and the decode-only gain is not printed."""
    a, b = rows[-2], rows[-1]
    k, t = b["concurrency"] / a["concurrency"], b["tpot_ms"] / a["tpot_ms"]
    gain = b["tok_s"] / a["tok_s"]
    split = prefill_steps(b["concurrency"], prompt_len)[0] if prompt_len else 1
    text = (f"同時 {a['concurrency']} → {b['concurrency']}（人数 {k:.0f} 倍）で TPOT {a['tpot_ms']:.1f} → "
            f"{b['tpot_ms']:.1f} ms（{t:.2f} 倍。" + (f"Decode だけなら tok/s の伸びは {k:.0f} ÷ {t:.2f} = {k / t:.2f} 倍）"
            if split == 1 else f"同時 {b['concurrency']} では Prefill が {split} ステップに分かれ、先に Prefill を終えた"
            "リクエストの TPOT には残りの Prefill を待つ時間も入ります）"))
    pa, pb = ph.get(a["concurrency"]), ph.get(b["concurrency"])
    share = None
    if pa and pb:
        share = (pa["prefill_ms"] / pa["wall_ms"], pb["prefill_ms"] / pb["wall_ms"])
        text += f"、Prefill が所要時間に占める割合 {100 * share[0]:.0f}% → {100 * share[1]:.0f}%"
    if split > 1:
        why = (f"伸びを抑えたのは Prefill です：全員の Prefill が所要時間に入り、{split} ステップに分かれた Prefill を"
               "待つ時間が TPOT も伸ばしています")
    elif t >= SHARED_GONE * k:
        why = ("伸びを止めたのは TPOT です：1ステップが人数とほぼ同じ割合で重くなり、分け合う得がほとんど残って"
               "いません（このマシンでは1件ごとの計算や K・V の写しが1ステップの固定の時間より大きくなったか、"
               "ほかのプログラムが CPU を使っていた。負荷の警告を確かめる）")
    elif share and share[1] - share[0] >= 0.05 and gain * t / k < 1:
        f_tpot, f_pre = 1 / t, gain * t / k
        bigger = "TPOT の伸び" if f_tpot < f_pre else "Prefill の割合の増加"
        why = (f"伸びを抑えた効果は2つです。TPOT の伸びが人数の比を × {f_tpot:.2f} にし、所要時間に占める Prefill の"
               f"割合の増加が残りの × {f_pre:.2f} にしました（測った伸び {gain:.2f} 倍 = {k / t:.2f} × {f_pre:.2f}）。"
               f"大きいのは {bigger}のほうです")
    else:
        why = "1ステップの固定の時間を分け合う得が、人数を増やすごとに小さくなっています（TPOT が少しずつ伸びる）"
    return text, why


def sweep_predictions(sweep: dict | list[dict], prompt_len: int | None = None) -> list[Prediction]:
    """課題3 and 課題5's predictions, decided by a sweep (``sweep_lab``'s result, or its rows) against the
    repeats' ranges: within the noise a verdict is 判定できません."""
    rows = sweep["rows"] if isinstance(sweep, dict) else sweep
    first, last = rows[0], rows[-1]
    grow = last["concurrency"] / first["concurrency"]
    tpot_ratio = last["tpot_ms"] / first["tpot_ms"]
    ttft_ratio = last["ttft_ms"] / first["ttft_ms"]
    tokens = ("" if prompt_len is None else f"、最初の Prefill ステップのプロンプト {first['concurrency'] * prompt_len:,}"
              f" → {min(last['concurrency'] * prompt_len, STEP_BUDGET):,} トークン")
    tpot_side = order(first, last, "tpot_ms", grow / TPOT_SHARE)
    falls = [(a, b) for a, b in zip(rows, rows[1:]) if b["tpot_ms"] < (1 - FALL) * a["tpot_ms"]]
    real_fall = any(order(a, b, "tpot_ms") < 0 for a, b in falls)
    ttft_side = order(first, last, "ttft_ms", 2)
    out = [decide(tpot_side < 0, tpot_side == 0,
                  f"同時リクエスト数を {grow:.0f} 倍にしても、TPOT は {grow / TPOT_SHARE:.0f} 倍未満しか伸びない"
                  f"（人数に比例するなら {grow:.0f} 倍）",
                  f"TPOT {spread_text(first, 'tpot_ms', ' ms')} → {spread_text(last, 'tpot_ms', ' ms')}（{tpot_ratio:.2f} 倍）",
                  "1ステップの固定の時間に比べて計算が重い（大きなモデル、スレッドが少ない）。"
                  "モデルを既定に戻し、負荷の警告を確かめる", RETRY),
           decide(not falls, bool(falls) and not real_fall,
                  "同時リクエスト数を増やしても、途中で TPOT が1割を超えて短くなる点はない（伸びたかどうかは判定しない）",
                  "TPOT " + " → ".join(spread_text(r, "tpot_ms", " ms") for r in rows),
                  "同時リクエスト数の少ない点を測ったときに、ほかのプログラムが CPU を使っていた"
                  "（→ 負荷の警告を確かめ、繰り返しを増やして測り直す）", RETRY),
           decide(ttft_side > 0, ttft_side == 0,
                  f"同時リクエスト数を {grow:.0f} 倍にすると、TTFT は 2 倍以上に伸びる"
                  "（全員のプロンプトが同じ Prefill ステップに入り、そのステップが重くなる）",
                  f"TTFT {spread_text(first, 'ttft_ms', ' ms')} → {spread_text(last, 'ttft_ms', ' ms')}（{ttft_ratio:.2f} 倍）{tokens}",
                  "このマシンでは Prefill の1ステップの固定の時間が大きく、トークンが増えても重くなりにくい"
                  "（GPU、コアが多い）。プロンプト長を増やして測り直す", RETRY)]
    if len(rows) >= 3:
        gains = [ratio_span(a, b, "tok_s") for a, b in zip(rows, rows[1:])]
        medians = [b["tok_s"] / a["tok_s"] for a, b in zip(rows, rows[1:])]
        (f0, f1), (l0, l1) = gains[0], gains[-1]
        numbers, why = last_doubling(rows, phases(sweep) if isinstance(sweep, dict) else {}, prompt_len)
        spans = "、".join(f"{m:.2f} 倍" + (f"（{lo:.2f}〜{hi:.2f}）" if lo != hi else "") for m, (lo, hi) in zip(medians, gains))
        held = l1 < f0
        out.append(decide(held, not held and l0 < f1,
                          "同時リクエスト数を倍にしたときの tok/s（出力）の伸びは、最初より最後のほうが小さい",
                          f"倍にするごとの伸び {spans}。{numbers}" + (f"。{why}" if held else ""),
                          "スイープの点が少ない。スイープの一覧に大きな値を足す", RETRY))
    return out


def lesson_sweep_predictions(rows: list[dict]) -> list[Prediction]:
    """Lesson 1 section 7's sweep (rows with median and min-max per concurrency), read as predictions so that
    a run that contradicts the prose says so (blind reading 2026-12-07d ch01 #1): output tok/s never falls
    beyond the repeats' ranges; from the first to the last point it rises and tok/s/user falls; TPOT never
    gets shorter by more than FALL beyond the ranges. A fall within the ranges is 判定できません."""
    first, last = rows[0], rows[-1]
    tok = [(a, b) for a, b in zip(rows, rows[1:]) if b["tok_s"] < a["tok_s"]]
    tpot = [(a, b) for a, b in zip(rows, rows[1:]) if b["tpot_ms"] < (1 - FALL) * a["tpot_ms"]]
    up, down = order(first, last, "tok_s"), order(first, last, "tok_s_per_user")
    why = ("①その点を測ったときに、ほかのプログラムが CPU を使っていた（上の ⚠ を確かめ、もう一度実行する）"
           "②このマシンでは、行列積の速さが行数（同時リクエスト数）によって前後する（第5章のラボで確かめます）。"
           "この実行では①と②を分けていません")
    span = lambda key, unit, fmt: " → ".join(spread_text(r, key, unit, fmt) for r in rows)   # noqa: E731
    return [
        decide(not tok, bool(tok) and not any(order(a, b, "tok_s") < 0 for a, b in tok),
               "同時リクエスト数を増やしても、出力 tok/s は下がらない",
               "出力 tok/s " + span("tok_s", "", "{:.0f}"), why, RETRY),
        decide(up > 0 and down < 0, up == 0 or down == 0,
               f"同時リクエスト数 {first['concurrency']} → {last['concurrency']} で、出力 tok/s は増え、tok/s/user は下がる",
               f"出力 tok/s {spread_text(first, 'tok_s', '', '{:.0f}')} → {spread_text(last, 'tok_s', '', '{:.0f}')}、"
               f"tok/s/user {spread_text(first, 'tok_s_per_user')} → {spread_text(last, 'tok_s_per_user')}", why, RETRY),
        decide(not tpot, bool(tpot) and not any(order(a, b, "tpot_ms") < 0 for a, b in tpot),
               "同時リクエスト数を増やしても、途中で TPOT が1割を超えて短くなる点はない",
               "TPOT " + span("tpot_ms", " ms", "{:.1f}"), why, RETRY),
    ]


def plateau_predictions(longer: dict, prompt_len: int, shorter: dict | None = None,
                        shorter_prompt: int | None = None, output_len: int = 32) -> list[Prediction]:
    """課題5 on the longer-prompt sweep: (1) its last doubling gains less than PLATEAU x output tok/s, beyond
    the noise; (2) the prefill made it (the upper bound N x O / T_prefill grows less than PLATEAU x and the
    prefill is at least PREFILL_MOST of the wall time); (3) with ``shorter``, it gains less than the shorter
    prompt's sweep at the same doubling (a longer prompt flattens sooner)."""
    rows = longer["rows"]
    a, b = rows[-2], rows[-1]
    g0, g1 = ratio_span(a, b, "tok_s")
    numbers, why = last_doubling(rows, phases(longer), prompt_len)
    step = f"同時リクエスト数 {a['concurrency']} → {b['concurrency']} "
    out = [decide(g1 < PLATEAU, g0 < PLATEAU <= g1,
                  f"プロンプト {prompt_len} では、{step}の tok/s（出力）の伸びが {PLATEAU} 倍未満（ほぼ頭打ち）",
                  f"tok/s（出力）{spread_text(a, 'tok_s')} → {spread_text(b, 'tok_s')}（{b['tok_s'] / a['tok_s']:.2f} 倍"
                  + (f"、{g0:.2f}〜{g1:.2f}" if g0 != g1 else "") + f"）。{numbers}",
                  "Prefill が所要時間に占める割合がまだ小さい（コアが多い、GPU）。プロンプト長か"
                  "同時リクエスト数を増やす。" + BUSY, RETRY)]
    pa, pb = phases(longer).get(a["concurrency"]), phases(longer).get(b["concurrency"])
    if pa and pb:
        bound = (b["concurrency"] / pb["prefill_ms"]) / (a["concurrency"] / pa["prefill_ms"])
        share = pb["prefill_ms"] / pb["wall_ms"]
        out.append(Prediction(
            f"プロンプト {prompt_len} では Prefill が tok/s（出力）を抑える：{step}で、Decode に時間がかからなかった場合の"
            f"上限（人数 × 出力長 ÷ Prefill の時間）の伸びが {PLATEAU} 倍未満で、Prefill が所要時間の半分以上",
            bound < PLATEAU and share >= PREFILL_MOST,
            f"上限 {a['concurrency'] * output_len / pa['prefill_ms'] * 1000:.0f} → "
            f"{b['concurrency'] * output_len / pb['prefill_ms'] * 1000:.0f}（{bound:.2f} 倍）、"
            f"同時 {b['concurrency']} の Prefill は所要時間の {100 * share:.0f}%",
            f"{why}。" + BUSY))
    if shorter is not None and shorter["rows"][-1]["concurrency"] == b["concurrency"]:
        sa, sb = shorter["rows"][-2], shorter["rows"][-1]
        s0, s1 = ratio_span(sa, sb, "tok_s")
        s_numbers, s_why = last_doubling(shorter["rows"], phases(shorter), shorter_prompt)
        out.append(decide(g1 < s0, g0 < s1 and not g1 < s0,
                          f"{step}の tok/s（出力）の伸びは、プロンプト {prompt_len} のほうがプロンプト {shorter_prompt}"
                          " より小さい（プロンプトが長いほど早く頭打ち）",
                          f"プロンプト {prompt_len}: {b['tok_s'] / a['tok_s']:.2f} 倍（{g0:.2f}〜{g1:.2f}）、プロンプト "
                          f"{shorter_prompt}: {sb['tok_s'] / sa['tok_s']:.2f} 倍（{s0:.2f}〜{s1:.2f}）",
                          f"プロンプト {shorter_prompt} のスイープの最後の倍では、{s_numbers}。{s_why}", RETRY))
    return out


__all__ = ["BUSY", "FALL", "PLATEAU", "PREFILL_MOST", "SHARED_GONE", "STEP_BUDGET", "TPOT_SHARE", "burst_times",
           "last_doubling", "lesson_sweep_predictions", "phases", "plateau_predictions", "prefill_steps", "sweep_predictions", "sweep_reading"]
