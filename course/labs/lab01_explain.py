"""Lab 1's readings (課題3〜6): what the measured numbers show, and the tasks' predictions decided by the
run (``course.labkit.predictions``)::

    print(sweep_reading(sweep, prompt_len=64, output_len=32))      # sweep = lab01.sweep_lab(...)
    print(verdicts(sweep_predictions(sweep["rows"])))
    print(first_gap_reading(together)); print(verdicts(late_long_predictions(together, late)))
    print(shape_reading(shapes)); print(verdicts(shape_predictions(shapes["rows"])))   # lab01_shapes

What the sweep measures is one burst: every request's prompt is prefilled, then all decode together.
So output tok/s = N x O / (T_prefill + T_decode), where T_prefill is the time until every request has
its first token: N x O / T_prefill is only an upper bound, reached if decoding took no time. The
scheduler gives each running request its decode token first and fills the rest of the step's budget
(``max_num_batched_tokens``) with prompt chunks, so above the budget the prefill takes more steps
than prompt tokens / budget (``prefill_steps``), and the requests prefilled first wait for the rest.
"""
from __future__ import annotations

import statistics

from course.labkit.predictions import Prediction
from course.runtime import MAX_NUM_SEQS
from minimal_engine.config import EngineConfig

STEP_BUDGET = EngineConfig.max_num_batched_tokens   # the lab's engine keeps the default (runtime)
SPIKE_SHARE, SPIKE_SHARE_TEXT = 0.25, "4分の1"   # 課題4: TPOT's rise against ITL max's rise
TPOT_SHARE = 4   # 課題3: TPOT grows by less than a quarter of the concurrency's factor (1/2 never failed)
PLATEAU = 1.25   # 課題5: with prompt 256, the sweep's last doubling gains less than this (nearly flat)
FALL = 0.1   # a TPOT this much shorter at a larger concurrency is more than the sweep's usual noise
BUSY = "ほかのプログラムが CPU を使っている（→ 負荷の警告を確かめ、繰り返しを増やして測り直す）"


# ---------------------------------------------------------------- 課題3 and 課題5: the sweep
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


def sweep_reading(sweep: dict, prompt_len: int, output_len: int, budget: int = STEP_BUDGET) -> str:
    """Per point of ``lab01.sweep_lab``'s result: the prefill's steps, its share of the burst's time, and
    output tok/s as N x O / (T_prefill + T_decode) with the upper bound N x O / T_prefill."""
    rows, runs = sweep["rows"], sweep["runs"]
    first, last = rows[0], rows[-1]
    lines = [f"同時 {first['concurrency']} → {last['concurrency']}: 1ステップ（TPOT）は "
             f"{first['tpot_ms']:.1f} → {last['tpot_ms']:.1f} ms"
             f"（{last['tpot_ms'] / first['tpot_ms']:.2f} 倍）、1ステップで作るトークンは "
             f"{last['concurrency'] / first['concurrency']:.0f} 倍"]
    for r in rows:
        n = r["concurrency"]
        times = [burst_times(x) for x in runs[n]]
        pre = statistics.median(t["prefill_ms"] for t in times)
        wall = statistics.median(t["wall_ms"] for t in times)
        counted = [t["steps"] for t in times if t["steps"] is not None]
        sim, decoded = prefill_steps(n, prompt_len, budget)
        steps = statistics.median_low(counted) if counted else sim
        why = ""
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


def sweep_predictions(rows: list[dict], prompt_len: int | None = None) -> list[Prediction]:
    """課題3 and 課題5's predictions, decided by a sweep's rows (doubling concurrencies)."""
    first, last = rows[0], rows[-1]
    grow = last["concurrency"] / first["concurrency"]
    tpot_ratio = last["tpot_ms"] / first["tpot_ms"]
    ttft_ratio = last["ttft_ms"] / first["ttft_ms"]
    tokens = ("" if prompt_len is None else f"、最初の Prefill ステップのプロンプト {first['concurrency'] * prompt_len:,}"
              f" → {min(last['concurrency'] * prompt_len, STEP_BUDGET):,} トークン")
    out = [Prediction(f"同時リクエスト数を {grow:.0f} 倍にしても、TPOT は {grow / TPOT_SHARE:.0f} 倍未満しか伸びない"
                      f"（人数に比例するなら {grow:.0f} 倍）",
                      tpot_ratio < grow / TPOT_SHARE,
                      f"TPOT {first['tpot_ms']:.1f} → {last['tpot_ms']:.1f} ms（{tpot_ratio:.2f} 倍）",
                      "1ステップの固定の時間に比べて計算が重い（大きなモデル、スレッドが少ない）。"
                      "モデルを既定に戻し、負荷の警告を確かめる"),
           Prediction("同時リクエスト数を増やすたびに TPOT は少しずつ長くなる（1割を超えて短くなる点がない）",
                      all(b["tpot_ms"] >= (1 - FALL) * a["tpot_ms"] for a, b in zip(rows, rows[1:])),
                      "TPOT " + " → ".join(f"{r['tpot_ms']:.1f}" for r in rows) + " ms",
                      "同時リクエスト数の少ない点を測ったときに、ほかのプログラムが CPU を使っていた"
                      "（→ 負荷の警告を確かめ、繰り返しを増やして測り直す）"),
           Prediction(f"同時リクエスト数を {grow:.0f} 倍にすると、TTFT は 2 倍以上に伸びる"
                      "（全員のプロンプトが同じ Prefill ステップに入り、そのステップが重くなる）",
                      ttft_ratio >= 2,
                      f"TTFT {first['ttft_ms']:.1f} → {last['ttft_ms']:.1f} ms（{ttft_ratio:.2f} 倍）{tokens}",
                      "このマシンでは Prefill の1ステップの固定の時間が大きく、トークンが増えても重くなりにくい"
                      "（GPU、コアが多い）。プロンプト長を増やして測り直す")]
    if len(rows) >= 3:
        gains = [b["tok_s"] / a["tok_s"] for a, b in zip(rows, rows[1:])]
        out.append(Prediction(
            "同時リクエスト数を倍にしたときの tok/s（出力）の伸びは、最初より最後のほうが小さい",
            gains[-1] < gains[0], "倍にするごとの伸び " + "、".join(f"{g:.2f} 倍" for g in gains),
            "スイープの点が少ない。スイープの一覧に大きな値を足す"))
    return out


def plateau_predictions(rows: list[dict], prompt_len: int) -> list[Prediction]:
    """課題5 on the longer-prompt sweep: its last doubling of concurrency gains less than PLATEAU x output tok/s
    (the burst's prefill takes most of the time, so tok/s flattens)."""
    a, b = rows[-2], rows[-1]
    gain = b["tok_s"] / a["tok_s"]
    return [Prediction(f"プロンプト {prompt_len} では、同時リクエスト数 {a['concurrency']} → {b['concurrency']} の"
                       f" tok/s（出力）の伸びが {PLATEAU} 倍未満（ほぼ頭打ち）", gain < PLATEAU,
                       f"tok/s（出力）{a['tok_s']:.1f} → {b['tok_s']:.1f}（{gain:.2f} 倍）",
                       "Prefill が所要時間に占める割合がまだ小さい（コアが多い、GPU）。プロンプト長か"
                       "同時リクエスト数を増やす。" + BUSY)]


# ---------------------------------------------------------------- 課題4: a late long prompt
def first_gaps(m: dict) -> dict:
    """From ``measure_lab``'s runs (requests that are not the late one): the first gap after each
    request's first token, the later gaps (medians, ms), and in how many runs the longest gap was a first one."""
    first, later, at_first = [], [], 0
    for run in m.get("runs", []):
        best = (0.0, False)
        for r in (x for x in run["requests"] if not x.get("late")):
            t = r["token_times_ms"]
            gaps = [b - a for a, b in zip(t, t[1:])]
            if gaps:
                first.append(gaps[0])
                later += gaps[1:]
                best = max(best, (max(gaps), max(gaps) == gaps[0]))
        at_first += best[1]
    if not first:
        return {}
    return {"first_ms": statistics.median(first), "later_ms": statistics.median(later) if later else float("nan"),
            "max_at_first": at_first, "runs": len(m["runs"])}


def first_gap_reading(m: dict) -> str:
    g = first_gaps(m)
    if not g:
        return ""
    return (f"Prefill 直後の最初のトークン間隔 {g['first_ms']:.1f} ms（中央値）、その後の間隔 {g['later_ms']:.1f} ms"
            f"（中央値）。ITL 最大が最初の間隔だった実行: {g['runs']} 回中 {g['max_at_first']} 回")


def late_long_predictions(together: dict, late: dict) -> list[Prediction]:
    """課題4's predictions, decided by two ``measure_lab`` results: all at once, and a late long prompt."""
    t_tpot, t_max = together["tpot_ms"], together["max_itl_ms"]
    l_tpot, l_max = late["tpot_ms"], late["max_itl_ms"]
    g = first_gaps(together)
    out_len = together.get("output_len", 32)
    rise, spike = l_tpot - t_tpot, l_max - t_tpot
    first = (f"いちばん長い間隔は Prefill 直後の最初の間隔でした（{g['first_ms']:.1f} ms、その後は "
             f"{g['later_ms']:.1f} ms）。最初の Decode ステップがこのマシンでは特に遅い。"
             if g and 2 * g["max_at_first"] > g["runs"] else "")
    return [
        Prediction("「一斉に」では ITL 最大が TPOT の 2 倍以内", t_max <= 2 * t_tpot,
                   f"ITL 最大 {t_max:.1f} ms、TPOT {t_tpot:.1f} ms", first + BUSY),
        Prediction("遅れて長いプロンプトが届くと、ITL 最大が「一斉に」の TPOT の 3 倍以上", l_max >= 3 * t_tpot,
                   f"ITL 最大 {l_max:.1f} ms、「一斉に」の TPOT {t_tpot:.1f} ms",
                   "このマシンでは長いプロンプトの Prefill が速い（コアが多い、GPU）。遅れて届く長さを増やす"),
        Prediction(f"TPOT の中央値の増え方は、ITL 最大の跳ね上がり（ITL 最大 − 「一斉に」の TPOT）の"
                   f"{SPIKE_SHARE_TEXT}未満にとどまる（1回の停止は、出力の間隔の数で割って薄められる）",
                   spike > 0 and rise < SPIKE_SHARE * spike,
                   f"TPOT {t_tpot:.1f} → {l_tpot:.1f} ms（{rise:+.1f} ms）、跳ね上がり {spike:.1f} ms"
                   f"（その {100 * rise / spike:.0f}%。停止を間隔の数で割ると {spike:.1f} ÷ {out_len - 1} = "
                   f"{spike / max(out_len - 1, 1):.1f} ms）" if spike > 0 else
                   f"TPOT {t_tpot:.1f} → {l_tpot:.1f} ms、ITL 最大 {l_max:.1f} ms（跳ね上がりなし）",
                   "①遅れたリクエストが加わった後の Decode の1ステップが大きく重くなった（CPU では文脈の長い"
                   "1件が別のグループになり、各層の Attention の呼び出しが1回増える。→ 遅れて届く長さを短くして"
                   "比べる）②" + BUSY),
    ]


# ---------------------------------------------------------------- the lesson: one decode step taken apart
def decode_split_reading(tpot_ms: float, step_bytes: float, bandwidth: float) -> str:
    """One request's decode step (batch 1) split as TPOT ~ (bytes read per step / bandwidth) + the rest, and
    which part is larger on this machine. The read time is the least the step's bytes can take at the
    measured bandwidth (weights that stay in the CPU's cache read faster still), so the rest is at least
    what is printed: Python, and the calls of many small operations in every layer."""
    read_ms = step_bytes / bandwidth * 1e3
    share = min(read_ms / tpot_ms, 1.0)
    head = (f"1ステップで読むバイト数 {step_bytes / 1e6:.0f} MB ÷ このマシンの帯域 {bandwidth / 1e9:.1f} GB/s ="
            f" 読むだけなら {read_ms:.1f} ms。TPOT {tpot_ms:.1f} ms のうち、重みなどを読む時間は {100 * share:.0f}%、"
            f"残り（Python の処理や小さな演算の呼び出しなど）は {100 * (1 - share):.0f}% です。")
    if share < 0.5:
        return head + ("このマシンでは、Decode の1ステップの半分以上が重みを読む時間以外の、ステップごとに"
                       "かかる時間です（GPU で大きなモデルを動かすと、逆に読む時間が主になります）。")
    return head + ("このマシンでは、重みを読む時間が Decode の1ステップの半分以上です"
                   "（GPU で大きなモデルを動かすときと同じ形です）。")


# ---------------------------------------------------------------- 課題6: model shapes
def shape_reading(res: dict) -> str:
    """``lab01_shapes.measure_shapes``'s rows: TPOT = (bytes of a step ÷ bandwidth) + the rest, per layer."""
    lines = [f"帯域（このマシンで測定、{res['threads']} スレッド）: {res['bandwidth'] / 1e9:.1f} GB/s"]
    for r in res["rows"]:
        rest = r["tpot_ms"] - r["read_ms"]
        lines.append(f"{r['label']}（{r['dtype']}）: {r['layers']} 層、{r['params'] / 1e6:.1f}M パラメータ、"
                     f"1ステップで読む {r['step_bytes'] / 1e6:.0f} MB → 帯域で読むだけなら {r['read_ms']:.1f} ms。"
                     f"TPOT {r['tpot_ms']:.1f} ms のうち残り {rest:.1f} ms（残り ÷ 層数 {rest / r['layers']:.2f} ms。"
                     f"1ステップに1回だけの時間も層数で割って入っています）")
    by = {r["model"]: r for r in res["rows"]}
    if all(m in by for m in PAIR):
        per_layer, per_step = layer_fit(by[PAIR[0]], by[PAIR[1]])
        lines.append(f"2つの形の残りの差から（1層あたりの時間が同じと仮定した目安。層の幅が違うので、負の値は"
                     f"その仮定が合わないしるし）: 1層あたり {per_layer:.2f} ms、層の数によらない1ステップの時間 "
                     f"{per_step:.2f} ms")
    return "\n".join(lines)


PAIR = ("synthetic:llama-125m", "synthetic:smollm2-135m")


def layer_fit(x: dict, y: dict) -> tuple[float, float]:
    """rest = per_step + layers x per_layer through two shapes' rests (TPOT - read time): (per_layer, per_step)."""
    rx, ry = (r["tpot_ms"] - r["read_ms"] for r in (x, y))
    per_layer = (ry - rx) / (y["layers"] - x["layers"])
    return per_layer, rx - x["layers"] * per_layer


def _pair(rows: list[dict], a: str, b: str) -> tuple[dict, dict]:
    by = {r["model"]: r for r in rows}
    return by[a], by[b]


def shape_predictions(rows: list[dict], a: str = PAIR[0], b: str = PAIR[1]) -> list[Prediction]:
    """課題6: the shape with more layers (b) has the longer TPOT, and less than half of the gap is the
    time to read its extra bytes at the measured bandwidth (the rest grows with the layers)."""
    x, y = _pair(rows, a, b)
    gap, read_gap = y["tpot_ms"] - x["tpot_ms"], y["read_ms"] - x["read_ms"]
    rest_x, rest_y = ((r["tpot_ms"] - r["read_ms"]) / r["layers"] for r in (x, y))
    width = (f"残り ÷ 層数が {x['label']} {rest_x:.2f} ms、{y['label']} {rest_y:.2f} ms で、層の多い形のほうが"
             f"大きく短い。残りの時間が層の数ほどには伸びていない。理由は2つ考えられる：細い層の計算が短い（層の幅に"
             f"応じた行列とベクトルの積が大きい。BF16 は CPU によっては FP32 より遅く計算される）か、層の数によらない"
             f"1ステップの時間（サンプリング、スケジューリングなど）が大きい（上の目安の行）") if rest_y < 0.6 * rest_x else ""
    reads = y["read_ms"] > 0.5 * y["tpot_ms"]
    return [
        Prediction(f"層の多い {y['label']}のほうが、{x['label']}より TPOT が長い", gap > 0.1 * x["tpot_ms"],
                   f"{x['label']} {x['layers']} 層 {x['tpot_ms']:.1f} ms、{y['label']} {y['layers']} 層 "
                   f"{y['tpot_ms']:.1f} ms",
                   width or ("このマシンでは層ごとの固定の時間が小さい（速い CPU、GPU）。"
                             "繰り返しを増やし、負荷の警告を確かめる")),
        Prediction("TPOT の差の半分以上は、読むバイト数の差ではなく、層の数とともに増える時間から来る",
                   gap > 0 and read_gap < 0.5 * gap,
                   f"TPOT の差 {gap:.1f} ms のうち、帯域で読む時間の差は {read_gap:.1f} ms",
                   ("このマシンでは帯域が狭く、重みを読む時間が TPOT の半分以上を占める（GPU で大きなモデルを"
                    "動かすときと同じ形）。TPOT の差はバイト数の差で決まります") if reads else
                   (width or "TPOT の差が小さく、揺れに埋もれている。" + BUSY)),
    ]


__all__ = ["BUSY", "FALL", "SPIKE_SHARE", "STEP_BUDGET", "burst_times", "decode_split_reading", "first_gap_reading", "first_gaps",
           "late_long_predictions", "layer_fit", "PAIR", "PLATEAU", "plateau_predictions", "TPOT_SHARE",
           "prefill_steps", "shape_predictions", "shape_reading", "sweep_predictions", "sweep_reading"]
