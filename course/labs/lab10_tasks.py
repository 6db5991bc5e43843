"""Lab 10's tasks (課題1〜3): each prediction is checked by the run's numbers (course/labkit/predictions.py).

    task1_predictions(short, long)         # 課題1: prompt 64 vs 256 (measured runs), checked
    context_growth(short, long)            # 課題1: TPOT growth, measured vs the short run's constants
    prompt_extrapolation_line(short, long) # the prompt-64 constants predicting the prompt-256 run (外挿)
    paired_growth_lines(paired_growth(short, long, growth))   # both prompt lengths alternating: drift vs context
    task2_predictions(loose, strict)       # 課題2: TPOT 50 ms vs 20 ms cheapest tables (予測), checked
    task3_predictions(chat, summary)       # 課題3: 1k/1k vs 8k/1k cheapest tables (予測), checked
    task3_lines(best)                      # top rows and the limit (memory / SLO) that stopped each

tests/course/test_lab10_explain.py plants contradicting numbers and re-derives the saved verdicts.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from course.labkit.load import was_disturbed
from course.labkit.predictions import Prediction
from course.labkit.spread import decide, order, span
from minimal_engine.calculators.sim_tables import inferencex_cost_inputs
from minimal_engine.calculators.simulator import simulate
from minimal_engine.config import EngineConfig
from minimal_engine.tools.sim_calibration import machine_table

DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[2] / "minimal_engine" / "default_model"
TASK3_SLO = (2000, 50)                              # 課題3: TTFT ≤ 2 s, TPOT ≤ 50 ms (the lab's default SLO)
TASK3_WORKLOADS = ((1024, 1024), (8192, 1024))      # chat 1k/1k, then summaries 8k/1k
SIM = "シミュレーターの予測"                         # what 課題2・3's numbers are (Prediction.basis)
STEP_BUDGET = EngineConfig.max_num_batched_tokens   # tokens per engine step; the lab's engine keeps the default
EDGE = 0.05                                         # ms: half the 0.1 ms the growths are printed to


def limit_reason(row: dict, slo=TASK3_SLO, model="llama-3.3-70b") -> str:
    """Why the cheapest-table row stopped at its concurrency C (``lab10.cheapest_meeting_slo`` finds it to one
    request): memory (C is the most that fits) or the SLO (C + 1 fits but misses TTFT or TPOT; re-simulated)."""
    c = row["concurrency"]
    if c >= row["max_concurrency"]:
        return f"メモリ（{row['max_concurrency']} までしか入らない）"
    n = simulate(model, row["gpu"], num_gpus=row["num_gpus"], tp=row["tp"], weight_dtype=row["weight_dtype"],
                 kv_dtype=row["kv_dtype"], input_len=row["input_len"], output_len=row["output_len"],
                 concurrency=c + 1, **inferencex_cost_inputs(row["gpu"]))
    over = [k for k, v, lim in (("TTFT", n["ttft_ms"], slo[0]), ("TPOT", n["tpot_ms"], slo[1])) if v > lim]
    return f"SLO（同時 {c + 1} では {' と '.join(over)} が上限を超える）" if over else f"同時 {c + 1} より tok/s/GPU が多い"


def _span(errs: list[float]) -> str:
    """The range of signed percentages, "0%" (not "-0%") where one rounds to zero."""
    lo, hi = (("0%" if round(x * 100) == 0 else f"{x:+.0%}") for x in (min(errs), max(errs)))
    return lo if lo == hi else f"{lo}〜{hi}"


def _name(r: dict) -> str:
    return f"{r['gpu']} {r['weight_dtype'].upper()} TP{r['tp']}"


def context_growth(short: dict, long: dict, budget: int = STEP_BUDGET) -> list[dict]:
    """Per concurrency both runs measured: the measured TPOT of the short and the long-prompt run (medians, and
    the repeats' (min, max) as ``spans``), and the TPOT the short run's constants predict for each (the long
    run's prediction thus extrapolates to a longer context). The simulator's context terms are reading the KV
    bytes at the measured bandwidth, the attention FLOPs over the context (sim_step.step_time_s), and, like the
    engine, splitting the prompts into steps of at most ``budget`` tokens (``max_num_batched_tokens``): where
    concurrency x prompt exceeds it, the first requests' decode steps carry the rest of the prefill (``spills``),
    and that chunk's time enters the growth too."""
    t = {r["concurrency"]: r for r in machine_table(short["spec"], DEFAULT_MODEL_DIR, long["rows"], long["prompt_len"],
                                                    long["output_len"], long.get("dtype", "fp32"))}
    a = {r["concurrency"]: r for r in short["table"]}
    ra = {r["concurrency"]: r for r in short.get("rows", short["table"])}
    rb = {r["concurrency"]: r for r in long["rows"]}
    return [{"concurrency": c, "measured": (a[c]["tpot_ms"], t[c]["tpot_ms"]),
             "spans": (span(ra[c], "tpot_ms"), span(rb[c], "tpot_ms")),
             "predicted": (a[c]["pred_tpot_ms"], t[c]["pred_tpot_ms"]),
             "prefill_tokens": c * max(short["prompt_len"], long["prompt_len"]), "budget": budget,
             "spills": c * max(short["prompt_len"], long["prompt_len"]) > budget} for c in a if c in t]


def growth_side(r: dict) -> int:
    """+1 when the long run's TPOT exceeds the short run's plus the predicted growth beyond the repeats' ranges
    (the measured growth is larger than predicted), -1 when it is below beyond them, 0 within them."""
    (a0, a1), (b0, b1) = r["spans"]
    d = r["predicted"][1] - r["predicted"][0]
    lo = {"tpot_ms": r["measured"][0] + d, "tpot_ms_min": a0 + d, "tpot_ms_max": a1 + d}
    hi = {"tpot_ms": r["measured"][1], "tpot_ms_min": b0, "tpot_ms_max": b1}
    return order(lo, hi, "tpot_ms")


def _growth_text(r: dict) -> str:
    (a0, a1), (b0, b1) = r["spans"]
    return (f"同時 {r['concurrency']} 実測 {r['measured'][1] - r['measured'][0]:+.1f} ms"
            f"（{a0:.1f}〜{a1:.1f} → {b0:.1f}〜{b1:.1f}）・予測 {r['predicted'][1] - r['predicted'][0]:+.1f} ms")


def spill_line(g: list[dict]) -> str:
    """The concurrencies left out of the context check: their prefill spills into decode steps."""
    out = [r for r in g if r["spills"]]
    if not out:
        return ""
    each = "、".join(f"同時 {r['concurrency']}（{r['concurrency']} × {r['prefill_tokens'] // r['concurrency']} = "
                    f"{r['prefill_tokens']:,} トークン、伸び 実測 {r['measured'][1] - r['measured'][0]:+.1f} ms・予測 "
                    f"{r['predicted'][1] - r['predicted'][0]:+.1f} ms）" for r in out)
    return (f"[Prefill のはみ出し] {each}: 同時リクエスト数 × プロンプト長が1ステップのトークン数の上限"
            f"（max_num_batched_tokens = {out[0]['budget']:,}）を超えるので、Prefill が数ステップに分かれ、先に始まった"
            "リクエストの Decode のステップが残りの Prefill のチャンクを運びます。この点の TPOT の伸びにはそのチャンクの"
            "時間が入り（シミュレーターも同じ上限で Prefill を分けるので、予測にも入ります）、文脈の長さの分と分けられない"
            "ので、3つ目の判定から外しました。")


def task1_predictions(short: dict, long: dict, growth: list[dict] | None = None) -> list[Prediction]:
    """課題1: two runs (``lab10.run_pareto_lab``), the second with a longer prompt. Measured TTFT and output
    tok/s at the concurrencies both measured, and the TPOT growth the short run's constants predict against
    the measured growth (``context_growth``; each run's own refit would follow its measurements by
    construction, so it is not used)."""
    a = {t["concurrency"]: t for t in short["table"]}
    b = {t["concurrency"]: t for t in long["table"]}
    cs = [c for c in a if c in b]
    g = context_growth(short, long) if growth is None else growth

    def pairs(key, fmt):
        return "、".join(f"同時 {c} {a[c][key]:{fmt}} → {b[c][key]:{fmt}}" for c in cs)
    noise = ("差が計測の揺れ（ほかのプログラム、CPU のクロックの変化）に埋もれた可能性があります。"
             "ほかのプログラムを止め、繰り返しを増やして測り直してください。")
    kept = [r for r in g if not r["spills"]]
    sides = [growth_side(r) for r in kept]
    grows = "、".join(_growth_text(r) for r in kept) or "Prefill がはみ出さない同時リクエスト数がありません"
    third = ("短いプロンプトの定数のままの予測では、TPOT の伸び（KV を読む時間と Attention の計算の分）が実測の伸びより"
             "小さい。Prefill がはみ出さない同時リクエスト数で比べ、範囲を超えて小さい点が1つ以上あり、逆向きの点がなければ予想どおり")
    return [
        Prediction("プロンプトを長くすると、どの同時リクエスト数でも TTFT（実測）が伸びる",
                   all(b[c]["ttft_ms"] > a[c]["ttft_ms"] for c in cs), f"TTFT [ms] {pairs('ttft_ms', '.1f')}", noise),
        Prediction("同じ同時リクエスト数での出力 tok/s（実測）は、どの同時リクエスト数でも下がる",
                   all(b[c]["tok_s"] < a[c]["tok_s"] for c in cs), f"出力 tok/s {pairs('tok_s', '.1f')}",
                   "同時リクエスト数が小さいと Prefill が全体に占める割合が小さいので、" + noise),
        decide(1 in sides and -1 not in sides, not sides or all(x == 0 for x in sides), third,
               f"TPOT の伸びの中央値の差と、2つの実行の繰り返しの範囲: {grows}",
               "実測の伸びが予測より小さく、その差が繰り返しの範囲を超えた点がありました。2つの実行のあいだに負荷が変わった"
               "（長いプロンプトの実行の方が空いていた）か、このマシンでは文脈とともに増える処理（KV のコピーと"
               "Attention の計算）が予測の伸び（KV を読む時間と Attention の計算）より小さいか、"
               "のどちらかが考えられます。" + noise,
               "どの同時リクエスト数でも、実測の伸びと予測の伸びの差が繰り返しの範囲に収まりました。" + noise),
    ]


def paired_growth(short: dict, long: dict, growth: list[dict], repeats: int = 3, measure=None) -> list[dict]:
    """The measurement that separates the two candidates for task 1's growth (final reading 2026-12-07d ch10 #1):
    the two runs are minutes apart, so their TPOT difference holds the context's cost plus any change of the machine
    between them. Here the two prompt lengths alternate (short, long, short, ...) at the smallest and the largest
    concurrency whose prefill does not spill, ``repeats`` pairs each; a pair's difference cancels a slow period that
    hits both. ``measure``: ``course.labkit.measure.measure`` (tests plant one)."""
    if measure is None:
        from course.labkit.backends import local_backend
        from course.labkit.measure import measure as run
        backend = local_backend("default", long.get("device", "cpu"))

        def measure(prompt_len, c):
            return run(backend, prompt_len, long["output_len"], c, 1, threads=long.get("threads"))
    kept = [r for r in growth if not r["spills"]]
    out = []
    for r in sorted({kept[0]["concurrency"], kept[-1]["concurrency"]}) if kept else []:
        g = next(x for x in kept if x["concurrency"] == r)
        diffs, disturbed = [], False
        for _ in range(repeats):
            a, b = measure(short["prompt_len"], r), measure(long["prompt_len"], r)
            diffs.append(b["tpot_ms"] - a["tpot_ms"])
            disturbed |= was_disturbed(a.get("load"), b.get("load"))
        out.append({"concurrency": r, "paired": sorted(diffs), "separate": g["measured"][1] - g["measured"][0],
                    "predicted": g["predicted"][1] - g["predicted"][0], "disturbed": disturbed})
    return out


def paired_growth_lines(paired: list[dict]) -> list[str]:
    """Per concurrency: the growth of the two separate runs, the alternating pairs' (median, min-max), the prediction,
    and what the pairs decide (judged against their own min-max; 判定できません for a crowded pair)."""
    out = []
    for p in paired:
        d = p["paired"]
        lo, mid, hi = d[0], statistics.median(d), d[-1]
        line = (f"[交互に測った伸び] 同時 {p['concurrency']}: 別々の2つの実行の TPOT の伸び {p['separate']:+.1f} ms、"
                f"2つのプロンプト長を交互に {len(d)} 回ずつ測った伸び {mid:+.1f} ms（{lo:+.1f}〜{hi:+.1f}）、予測 {p['predicted']:+.1f} ms。")
        if p["disturbed"]:
            out.append(line + "判定できません：交互に測るあいだに、ほかのプログラムが CPU を使っていました。止めてから測り直してください。")
            continue
        line += ("別々の実行の伸びは交互に測った範囲の外です。その差は2つの実行のあいだのマシンの変化（ほかのプログラム、"
                 "CPU のクロック）で、文脈の長さの分ではありません。" if not lo - EDGE <= p["separate"] <= hi + EDGE else
                 "別々の実行の伸びは交互に測った範囲の中にあり、2つの実行のあいだの変化は見えません。")
        line += ("交互に測っても予測より大きいので、文脈とともに増える処理（K と V のコピー、Attention、キャッシュに収まらなくなった KV を読む時間）が予測の伸びより大きいと言えます。"
                 if lo > p["predicted"] + EDGE else "交互に測ると予測より小さくなりました。" if hi < p["predicted"] - EDGE else
                 "交互に測った伸びと予測の差は、その揺れの範囲に入ります。")
        out.append(line)
    return out


def prompt_extrapolation_line(short: dict, long: dict) -> str:
    """The short run's constants, unchanged, predicting the long run's measurements: a test outside
    the fitted conditions (外挿 to another prompt length), unlike the default fit's interpolation."""
    t = machine_table(short["spec"], DEFAULT_MODEL_DIR, long["rows"], long["prompt_len"], long["output_len"],
                      long.get("dtype", "fp32"))
    spans = "、".join(f"{name}の誤差 {_span([r[k] for r in t])}" for name, k in
                     (("TPOT ", "err_tpot_ms"), ("出力 tok/s ", "err_tok_s"), ("TTFT ", "err_ttft_ms")))
    return (f"プロンプト {short['prompt_len']} で当てはめた定数のまま、プロンプト {long['prompt_len']} の実測を予測すると"
            f"（外挿）: {spans}")


def task2_predictions(loose: list[dict], strict: list[dict]) -> list[Prediction]:
    """課題2: the cheapest-first tables (``lab10.cheapest_meeting_slo``) at TPOT ≤ 50 ms (``loose``) and
    ≤ 20 ms (``strict``), same workload and TTFT. A planted contradicting number turns the verdict (tests)."""
    why = ("シミュレーターの定数か料金の表が変わると、順位と差も変わります。"
           "表の「同時リクエスト数」と「TPOT」の列で、どの点が選ばれたかを確かめてください。")
    a, b = loose[0], strict[0]
    return [
        Prediction("TPOT の上限を厳しくすると、SLO を満たす構成の数が減る", len(strict) < len(loose),
                   f"{len(loose)} 構成 → {len(strict)} 構成", why, SIM),
        Prediction("いちばん安い構成の同時リクエスト数が小さくなる", b["concurrency"] < a["concurrency"],
                   f"{_name(a)} 同時 {a['concurrency']} → {_name(b)} 同時 {b['concurrency']}", why, SIM),
        Prediction("いちばん安い構成の $/M 出力トークンが上がる",
                   b["usd_per_m_output_tokens"] > a["usd_per_m_output_tokens"],
                   f"${a['usd_per_m_output_tokens']:.3f} → ${b['usd_per_m_output_tokens']:.3f}", why, SIM),
    ]


def task3_predictions(small: list[dict], large: list[dict]) -> list[Prediction]:
    """課題3: the cheapest-first tables (``lab10.cheapest_meeting_slo``) of 1k/1k (``small``) and 8k/1k
    (``large``) at the same SLO. A planted contradicting number turns the verdict (tests)."""
    why = ("シミュレーターの定数（docs/simulator.md の当てはめ）か料金の表（InferenceX のハイパースケーラー所有の値）が"
           "変わると、順位と差も変わります。下の各行の「止めた理由」で、どの上限で止まったかを確かめてください。")
    a, b = small[0], large[0]
    ratio = b["usd_per_m_output_tokens"] / a["usd_per_m_output_tokens"]

    def premium(best, top):
        tp2 = [r for r in best if (r["gpu"], r["weight_dtype"], r["tp"]) == (top["gpu"], top["weight_dtype"], 2)]
        return tp2[0]["usd_per_m_output_tokens"] / top["usd_per_m_output_tokens"] - 1 if tp2 else None
    pa, pb = premium(small, a), premium(large, b)
    gap = "、".join(f"{w} {'なし' if p is None else f'{p:+.0%}'}" for w, p in (("1k/1k", pa), ("8k/1k", pb)))
    return [
        Prediction("8k/1k では、いちばん安い構成の $/M 出力トークンが 1k/1k の3倍以上になる", ratio >= 3,
                   f"1k/1k {_name(a)} ${a['usd_per_m_output_tokens']:.3f}、8k/1k {_name(b)} "
                   f"${b['usd_per_m_output_tokens']:.3f}（{ratio:.1f} 倍）", why, SIM),
        Prediction("いちばん安い構成は TP1 のままで、同じ GPU・精度の TP2 の割高さは縮まる",
                   a["tp"] == 1 and b["tp"] == 1 and pa is not None and pb is not None and pb < pa,
                   f"いちばん安い構成 1k/1k {_name(a)}、8k/1k {_name(b)}。TP2 の割高さ {gap}", why, SIM),
        Prediction("いちばん安い構成の同時リクエスト数は、1k/1k の半分以下になる",
                   b["concurrency"] <= a["concurrency"] / 2,
                   f"1k/1k 同時 {a['concurrency']}、8k/1k 同時 {b['concurrency']}", why, SIM),
    ]


def task3_lines(best: list[dict], top: int = 3, slo=TASK3_SLO, model="llama-3.3-70b") -> list[str]:
    """The top rows of a cheapest-first table with the limit that stopped each (a string per row)."""
    return [f"{i}位 {_name(r)}: 同時 {r['concurrency']}、${r['usd_per_m_output_tokens']:.3f}/M 出力トークン、"
            f"止めた理由: {limit_reason(r, slo, model=model)}" for i, r in enumerate(best[:top], 1)]


__all__ = ["STEP_BUDGET", "TASK3_SLO", "TASK3_WORKLOADS", "context_growth", "growth_side", "limit_reason", "paired_growth",
           "paired_growth_lines",
           "prompt_extrapolation_line", "spill_line", "task1_predictions", "task2_predictions", "task3_lines", "task3_predictions"]
