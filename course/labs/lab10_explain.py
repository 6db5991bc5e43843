"""Lab 10's explanations, printed from the run (第10章ラボの説明の数字は、すべてこの実行から出します).

    constants_rows(res) / prediction_lines(res)   # this machine's constants; the errors as sentences
    tpot_order_lines(res)       # a TPOT shorter at a larger concurrency, against the repeats' ranges
    cost_line(res, usd, watts)  # $/M output tokens and tok/s/user, smallest to largest concurrency
    ttft_overhead_share(res) / right_end_overhead(res)   # the fitted overheads' part of TTFT and of the batch-1 step
    tpot_slope_split(res) / slope_verdict(split)   # the TPOT growth: roofline vs seq_overhead_us; which made most
    extrapolation(res)          # refit without the largest concurrency and predict it (外挿)

Sentences quoting a measured figure are printed by the cell (never stale); ``res``: run_pareto_lab's; 課題: lab10_tasks.
A run other programs crowded (``res["load"]["disturbed"]``) prints its readings as 判定できません.
"""
from __future__ import annotations

from pathlib import Path

from course.labkit.load import was_disturbed
from course.labkit.predictions import DISTURBED, UNDECIDED
from minimal_engine.calculators.simulator import get_sim_model, simulate_batch
from minimal_engine.tools.sim_calibration import fit_machine, fit_machine_all, machine_table

DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[2] / "minimal_engine" / "default_model"
EFF_STEP = 0.05        # fit_machine_all searches compute_eff on this grid step (sim_calibration_machine.py)
SHARE_BAND = 10        # roofline share within 50 ± this many points: the two terms are the same size (undecided)


def disturbed(res: dict) -> bool: return was_disturbed(res.get("load"))   # crowded run (LoadWatch): 判定できません


def constants_rows(res: dict) -> list[dict]:
    """This machine's simulator constants: 値, 決め方 (測定 / 当てはめ / 設定), and what each means on the curve."""
    s, pk = res["spec"], res["peaks"]
    key = "flops_fp32" if res.get("dtype", "fp32") == "fp32" else "flops_bf16"
    return [
        {"定数": "演算性能", "値": f"{s[key] / 1e9:.0f} GFLOP/s（{key[6:]}）", "決め方": "測定",
         "意味": "第2章の方法で測った行列積の速さ。Prefill（TTFT）と、演算で決まる Decode の計算時間の分母です"},
        {"定数": "帯域", "値": f"{pk['bandwidth'] / 1e9:.1f} GB/s", "決め方": "測定",
         "意味": "重みと KV を読む速さ。ルーフラインの Decode の時間の分母です"},
        {"定数": "compute_eff", "値": f"{s['compute_eff']:.2f}", "決め方": "当てはめ（TTFT）",
         "意味": "エンジンの行列積（Prefill も Decode も）が、測った演算性能の何倍の速さで動いたか。1 を超えるのは、"
                 "エンジンの行列の形とカーネルが測定の行列積より速いときです。TTFT で当てはめますが、Decode が"
                 "演算で決まる大きな同時リクエスト数では TPOT の伸びも決めます"},
        {"定数": "layer_overhead_us", "値": f"{s['layer_overhead_us']:.0f} µs",
         "決め方": "当てはめ（TPOT）",
         "意味": "ルーフラインで説明できない、1ステップに層ごとにかかる時間（Python の処理、"
                 "行列積以外の小さな演算、計測中のほかのプログラムの影響をすべて含む残り）。同時リクエスト数に"
                 "よらない分で、同時 1 の TPOT（曲線の右端）のうちルーフラインで説明できない時間の大部分です"
                 "（同時 1 でも seq_overhead_us の1リクエスト分が加わります）"},
        {"定数": "seq_overhead_us", "値": f"{s['seq_overhead_us']:.1f} µs", "決め方": "当てはめ（TPOT）",
         "意味": "1ステップに層ごと・リクエストごとにかかる時間（リクエストを1つずつ扱う処理）。同時リクエスト数"
                 "とともに TPOT が伸びる傾きの一部です（残りはルーフラインの項。内訳は [TPOT の伸びの内訳] の行）"},
        {"定数": "memory_eff", "値": f"{s['memory_eff']:.2f}", "決め方": "設定",
         "意味": "測った帯域をそのまま使う（1.00）"},
        {"定数": "request_overhead_ms", "値": f"{s['request_overhead_ms']:.0f} ms", "決め方": "設定",
         "意味": "GPU 用の当てはめでは、公開点の TTFT のうち計算で説明できない残りに合わせた定数"
                 "（中身は測っていません）。このラボはエンジンを同じプロセスから呼び、HTTP もないので 0 です"},
    ]


def prediction_lines(res: dict) -> list[str]:
    """The errors as sentences: TPOT, tok/s at the held-out concurrencies; TTFT (predicted / measured) at the fit ones."""
    t = res["table"]
    held, fit, out = [r for r in t if r["split"] == "held-out"], [r for r in t if r["split"] == "fit"], []
    if held:
        cs = "・".join(str(r["concurrency"]) for r in held)
        tp, tk = [r["err_tpot_ms"] for r in held], [r["err_tok_s"] for r in held]
        out.append(f"当てはめた2点の間（内挿）の同時 {cs} で、TPOT の誤差は {_span(tp)}、出力 tok/s の誤差は {_span(tk)} でした。")
    ratios = "、".join(f"同時 {r['concurrency']} で {r['pred_ttft_ms'] / r['ttft_ms']:.2f} 倍" for r in fit)
    out.append(f"当てはめに使った同時リクエスト数での TTFT の予測は、実測に対して{ratios}です"
               f"（compute_eff = {res['spec']['compute_eff']:.2f}）。")
    tpot = "、".join(f"同時 {r['concurrency']} で {_pct(r['err_tpot_ms'])}" for r in fit)
    out.append(f"TPOT の誤差は、当てはめに使った点では{tpot}です（2点に直線を合わせるので、ほぼ 0 になります）。")
    return out


def _tpot_range(q: dict) -> str:
    return f"{q['tpot_ms']:.2f} ms（繰り返し {q.get('tpot_ms_min', q['tpot_ms']):.2f}〜{q.get('tpot_ms_max', q['tpot_ms']):.2f}）"


_ORDER_CAUSES = ("繰り返しの幅を超える差です。繰り返しは同時リクエスト数を順に回るので、初回だけの遅れではありません。同時 {big} の1ステップが、"
                 "行の少ない同時 {small} より全体として短い時間で終わったことになります。候補は2つあり、この実行では確かめていません。"
                 "(1) CPU の行列積のライブラリは行数でカーネルを選び分けます。{small} 行の行列積が {big} 行より遅い経路を通ったのかもしれません。"
                 "(2) エンジンの Decode は文脈の長さでリクエストをグループに分け、グループごとに Attention を呼びます。1つだけのグループは"
                 "マスクなしの経路を通ります（minimal_engine/model/decode_groups.py）。同時 {small} と {big} では、グループの数や経路が違うことがあります。")
def tpot_order_lines(res: dict) -> list[str]:
    """Where a concurrency's measured TPOT (median) is shorter than a smaller one's, against the repeats' ranges:
    within them it cannot be told from noise; beyond them it is a real effect of this machine (unless disturbed)."""
    rows, out = sorted(res["rows"], key=lambda r: r["concurrency"]), []
    for i, r in enumerate(rows):
        prev = max(rows[:i], key=lambda q: q["tpot_ms"], default=None)
        if prev is None or r["tpot_ms"] >= prev["tpot_ms"]:
            continue
        line = (f"[TPOT の順序] 同時 {r['concurrency']} の TPOT {_tpot_range(r)} は、同時 {prev['concurrency']} の "
                f"{_tpot_range(prev)} より {prev['tpot_ms'] - r['tpot_ms']:.2f} ms 短い。")
        if disturbed(res):
            out.append(line + f"{UNDECIDED}：{DISTURBED}。")
        elif res.get("repeats", 1) < 2:
            out.append(line + "繰り返しが1回なので、計測の揺れかどうかは判定できません。")
        elif r.get("tpot_ms_max", r["tpot_ms"]) >= prev.get("tpot_ms_min", prev["tpot_ms"]):
            out.append(line + "2つの繰り返しの幅が重なるので、計測の揺れと区別できません。")
        else:
            out.append(line + _ORDER_CAUSES.format(big=r["concurrency"], small=prev["concurrency"]))
    return out or ["[TPOT の順序] TPOT（中央値）は、同時リクエスト数とともに短くなることなく伸びました。"]


def _pct(x: float) -> str:      # a signed percentage, "0%" (not "-0%") when it rounds to zero
    return "0%" if round(x * 100) == 0 else f"{x:+.0%}"


def _span(errs: list[float]) -> str:
    lo, hi = _pct(min(errs)), _pct(max(errs))
    return lo if lo == hi else f"{lo}〜{hi}"


def cost_line(res: dict, usd_per_hour: float, watts: float) -> str:
    """$/M output tokens (at ``usd_per_hour``, ``watts``) and tok/s/user, the run's smallest to largest concurrency."""
    from course.labkit.measure import cost
    a, b = res["rows"][0], res["rows"][-1]
    ua, ub = (cost(usd_per_hour, watts, r["tok_s"], r["total_tok_s"])["usd_per_m_output_tokens"]
              for r in (a, b))
    return (f"同時 {a['concurrency']} → {b['concurrency']} で、$/M 出力トークンは ${ua:.3f} → ${ub:.3f}"
            f"（{ua / ub:.1f} 分の 1）、tok/s/user は {a['tok_s_per_user']:.0f} → "
            f"{b['tok_s_per_user']:.0f} です。")


def ttft_overhead_share(res: dict) -> dict:
    """The predicted TTFT at the run's smallest concurrency, fitted and with both per-step overheads at 0: the part of
    the TTFT compute_eff does not decide."""
    kw = dict(weight_dtype=res.get("dtype", "fp32"), kv_dtype=res.get("dtype", "fp32"), input_len=res["prompt_len"],
              output_len=res["output_len"], concurrency=res["concurrencies"][0])
    full = simulate_batch(DEFAULT_MODEL_DIR, res["spec"], **kw)["ttft_ms"]
    bare = simulate_batch(DEFAULT_MODEL_DIR, {**res["spec"], "layer_overhead_us": 0, "seq_overhead_us": 0}, **kw)["ttft_ms"]
    return {"concurrency": kw["concurrency"], "ttft_ms": full, "overhead_ms": full - bare, "share": (full - bare) / full}


def right_end_overhead(res: dict) -> dict:
    """The fitted overheads' fixed time in one decode step at the smallest concurrency C, and seq_overhead_us's part."""
    layers, s, c = get_sim_model(DEFAULT_MODEL_DIR).shape.layers, res["spec"], res["concurrencies"][0]
    layer_ms, seq_ms = layers * s["layer_overhead_us"] / 1e3, layers * s["seq_overhead_us"] * c / 1e3
    total = layer_ms + seq_ms
    line = (f"[右端の固定の時間] 同時 {c} の1ステップ: {layers} 層 × (layer_overhead_us {s['layer_overhead_us']:.0f}"
            f" + seq_overhead_us {s['seq_overhead_us']:.1f} × {c}) µs = {total:.2f} ms。うち seq_overhead_us の分は "
            f"{seq_ms:.2f} ms（{seq_ms / total if total else 0:.0%}）")
    return {"concurrency": c, "layers": layers, "layer_ms": layer_ms, "seq_ms": seq_ms, "total_ms": total,
            "seq_share": seq_ms / total if total else 0.0, "line": line}


def tpot_slope_split(res: dict) -> dict:
    """The predicted TPOT growth from the run's smallest to its largest concurrency, split into the roofline term (the
    simulator with both per-step overheads at 0) and the rest (seq_overhead_us x layers x dC), with the measured growth
    and the concurrency from which decode is compute-bound: 2 FLOP per parameter and request against the parameter's
    bytes, above the ridge GFLOP/s x compute_eff / (GB/s x memory_eff). The split is the fitted model's, not a
    measurement: seq_overhead_us is fitted to what the roofline term leaves of the measured TPOT, so ``near`` repeats
    it with compute_eff one fit step (EFF_STEP) lower and higher, overheads refitted: (compute_eff, share) pairs."""
    s, dtype = res["spec"], res.get("dtype", "fp32")
    a, b = min(res["concurrencies"]), max(res["concurrencies"])
    kw = dict(weight_dtype=dtype, kv_dtype=dtype, input_len=res["prompt_len"], output_len=res["output_len"])

    def tpot(spec: dict, c: int) -> float:
        return simulate_batch(DEFAULT_MODEL_DIR, spec, concurrency=c, **kw)["tpot_ms"]

    def split(spec: dict) -> tuple[float, float]:
        bare = {**spec, "layer_overhead_us": 0.0, "seq_overhead_us": 0.0}
        return tpot(bare, b) - tpot(bare, a), tpot(spec, b) - tpot(spec, a)

    (roof, pred), near = split(s), []
    for e in (s["compute_eff"] - EFF_STEP, s["compute_eff"] + EFF_STEP):
        if e > 0 and res.get("rows") and all("tpot_ms" in r for r in res["rows"]):
            r2, p2 = split(fit_machine({**s, "compute_eff": e}, DEFAULT_MODEL_DIR, res["rows"], res["prompt_len"],
                                       res["output_len"], dtype))
            near.append((e, r2 / p2 if p2 else 1.0))
    meas = {t["concurrency"]: t["tpot_ms"] for t in res["table"]}
    flops = s["flops_fp32" if dtype == "fp32" else "flops_bf16"]
    ridge = flops * s["compute_eff"] / (s["bandwidth"] * s["memory_eff"])       # FLOP per byte
    per_request = 2 / (4 if dtype == "fp32" else 2)                            # decode FLOP/B per request
    return {"from": a, "to": b, "pred_ms": pred, "measured_ms": meas[b] - meas[a], "roof_ms": roof,
            "seq_ms": pred - roof, "roof_share": roof / pred if pred else 1.0, "near": near,
            "gflops": flops / 1e9, "compute_eff": s["compute_eff"],
            "gbs": s["bandwidth"] * s["memory_eff"] / 1e9, "ridge": ridge, "per_request": per_request,
            "c_compute": ridge / per_request, "dtype": dtype, "disturbed": disturbed(res)}


def _near_text(sp: dict) -> str:
    return "、".join(f"{e:.2f} で {x:.0%}" for e, x in sp["near"])


def slope_lines(sp: dict) -> list[str]:    # the split as printed lines, then slope_verdict
    near = (f"。compute_eff を当てはめの刻み（{EFF_STEP}）だけ動かして当てはめ直すと、ルーフラインの項は"
            f" {_near_text(sp)}" if sp["near"] else "")
    return [f"[TPOT の伸びの内訳] 同時 {sp['from']} → {sp['to']} で TPOT の予測は {sp['pred_ms']:+.1f} ms"
            f"（実測 {sp['measured_ms']:+.1f} ms）。うちルーフラインの項 {sp['roof_ms']:+.1f} ms（{sp['roof_share']:.0%}）、"
            f"seq_overhead_us の項 {sp['seq_ms']:+.1f} ms（{1 - sp['roof_share']:.0%}）" + near,
            f"[Decode が演算で決まる境目] 演算性能 {sp['gflops']:.0f} GFLOP/s × compute_eff {sp['compute_eff']:.2f}"
            f" ÷ 帯域 {sp['gbs']:.1f} GB/s = {sp['ridge']:.1f} FLOP/B。{sp['dtype']} の Decode は1リクエストあたり"
            f" {sp['per_request']:.1f} FLOP/B なので、同時 約 {sp['c_compute']:.1f} から上は演算で決まります",
            slope_verdict(sp)]


def slope_verdict(sp: dict) -> str:
    """Which term made most of the predicted TPOT growth, with the mechanism that can do it on a CPU; 判定できない when
    the roofline share (printed whole percent) or one fit step of compute_eff (``near``) is within 50 ± SHARE_BAND
    or on the other side of 50; 判定できません for a disturbed run."""
    pct = [round(100 * sp["roof_share"])] + [round(100 * x) for _, x in sp.get("near", [])]
    head = (f"[傾きを決めたもの] 同時 {sp['from']} → {sp['to']} の TPOT の伸びを、当てはめたモデルで2つの項に分けると"
            "（分け方は当てはめによるもので、測定ではありません）、")
    if sp.get("disturbed"):
        return head + f"{UNDECIDED}：{DISTURBED}。"
    if any(abs(p - 50) <= SHARE_BAND for p in pct) or len({p > 50 for p in pct}) > 1:
        near = f"。compute_eff を当てはめの刻みだけ動かすと {_near_text(sp)}" if sp.get("near") else ""
        return (head + f"{UNDECIDED}：2つの項の大きさは近く、どちらが大きいとは言えません（ルーフラインの項 {pct[0]}%{near}。"
                f"半分 ± {SHARE_BAND} ポイントに入るか、大小が入れ替わる値があります）。"
                "seq_overhead_us の項は、実測の TPOT からルーフラインの項を引いた残りに当てはめた直線なので、"
                "ルーフラインの項の割合は compute_eff（TTFT で当てはめた値）しだいで動きます。この実行から言えるのは、"
                "どちらの項も伸びに効いている、ということまでです。")
    if pct[0] > 50 and sp["c_compute"] >= sp["to"]:
        return (head + "大きい方はルーフラインの項でした。調べた範囲では Decode は帯域で決まるので、伸びたのは重みではなく、"
                "同時リクエスト数に比例して増える KV を読む時間です。")
    if pct[0] > 50:
        return (head + "大きい方はルーフラインの項でした。このマシンでは、演算性能と帯域の比が小さいので、まとめる数が増えると "
                "Decode が重みを読む時間ではなく行列積の計算で決まります。その先では1ステップの計算が同時リクエスト数に"
                "比例して伸び、傾きは測った GFLOP/s と compute_eff（TTFT で当てはめた値）で決まります。"
                "GPU では演算性能と帯域の比がずっと大きいので、この境目ははるかに大きな同時リクエスト数にあります。")
    where = ("調べた範囲では Decode はほぼ帯域で決まり、重みを1回読む時間はまとめる数によらないので"
             if sp["c_compute"] >= sp["to"] else "Decode が演算で決まる範囲もありますが、その伸びより")
    return (head + f"大きい方は seq_overhead_us の項でした。{where}、リクエストごとに層ごとにかかる処理（Python で1リクエストずつ"
            "扱う分など）の積み重ねが伸びの大部分です。")


def extrapolation(res: dict) -> dict | None:
    """Refit on the smallest and second-largest concurrency and predict the largest, outside the fitted range (外挿;
    the default fit's held-out points lie inside it, 内挿). None with fewer than 3 concurrencies."""
    cs = sorted(res["concurrencies"])
    if len(cs) < 3:
        return None
    fit_on = (cs[0], cs[-2])
    bare = {**res["spec"], "compute_eff": 1.0, "layer_overhead_us": 0.0, "seq_overhead_us": 0.0}
    args = (DEFAULT_MODEL_DIR, res["rows"], res["prompt_len"], res["output_len"], res.get("dtype", "fp32"))
    spec = fit_machine_all(bare, *args, fit_on=fit_on)
    return {"fit_on": fit_on, "spec": spec, "row": machine_table(spec, *args, fit_on=fit_on)[-1]}


def extrapolation_lines(res: dict, ext: dict | None) -> list[str]:
    """The extrapolated point's errors, the facts that can explain them, and the verdict (computed)."""
    if ext is None:
        return ["同時リクエスト数が3つ以上ないので、外挿は試せません。"]
    r, (a, b) = ext["row"], ext["fit_on"]
    out = [f"同時 {a} と {b} だけで当てはめ直し、その外の同時 {r['concurrency']} を予測すると（外挿）、"
           f"TPOT の誤差は {_pct(r['err_tpot_ms'])}、出力 tok/s の誤差は {_pct(r['err_tok_s'])}、"
           f"TTFT の誤差は {_pct(r['err_ttft_ms'])} です。"]
    held = [abs(t["err_tpot_ms"]) for t in res["table"] if t["split"] == "held-out"]
    if not held:
        return out
    end_err = next(t["err_tpot_ms"] for t in res["table"] if t["concurrency"] == b)
    w = {q["concurrency"]: (q.get("tpot_ms_max", q["tpot_ms"]) - q.get("tpot_ms_min", q["tpot_ms"])) / q["tpot_ms"]
         for q in res["rows"]}                   # the repeats' (max - min) / median of each concurrency's TPOT
    f = {"err": r["err_tpot_ms"], "held": max(held), "end": b, "end_err": end_err, "threads": res.get("threads") or 1,
         "eff": res["spec"]["compute_eff"], "eff_refit": ext["spec"]["compute_eff"], "end_width": w[b],
         "last": r["concurrency"], "last_width": w[r["concurrency"]]}
    out.append(f"[外挿の材料] 外挿の TPOT の誤差 {_pct(f['err'])}、内挿のいちばん大きい誤差（絶対値）{f['held']:.0%}、"
               f"全体の当てはめでの同時 {b} の TPOT の誤差 {_pct(end_err)}、compute_eff は全体 {f['eff']:.2f}・"
               f"当てはめ直し {f['eff_refit']:.2f}、スレッド数 {f['threads']}、TPOT の繰り返しの幅（中央値に対する"
               f"最大 − 最小）同時 {b} で {f['end_width']:.0%}・同時 {f['last']} で {f['last_width']:.0%}")
    return out + [f"[外挿の見立て] {UNDECIDED}：{DISTURBED}。" if disturbed(res) else extrapolation_verdict(f)]


def extrapolation_verdict(f: dict) -> str:
    """Why the extrapolated TPOT missed (err = predicted / measured - 1), by its sign, the repeats' spread and threads."""
    head = f"[外挿の見立て] 外挿の TPOT の誤差（絶対値 {abs(f['err']):.0%}）は、内挿のいちばん大きい誤差（{f['held']:.0%}）"
    if abs(f["err"]) <= f["held"] + 0.02:                  # 2 points of margin: noise, rounding
        w = (f.get("end_width", 0), f.get("last_width", 0))       # the repeats' spread can hide a miss this small
        return head + "と同じくらいか、それ以下です。" + (f"ただし TPOT の繰り返しの幅（同時 {f['end']} で中央値の {w[0]:.0%}、同時 "
            f"{f['last']} で {w[1]:.0%}）が外挿の誤差より大きいので、揺れの範囲では外れは見えない、としか言えません。"
            if max(w) >= abs(f["err"]) else "この実行では、直線の式が当てはめた範囲の外にもそのまま当てはまっています。")
    head += "より大きいです。"
    end_noisy = f.get("end_width", 0) >= abs(f["end_err"]) > 0.02       # the refit's slope is its upper end's noise
    if end_noisy or f.get("last_width", 0) >= abs(f["err"]):
        which = (f"直線の上の端の同時 {f['end']} は全体の当てはめから {_pct(f['end_err'])} ずれていますが、その TPOT の繰り返しの"
                 f"幅（中央値の {f['end_width']:.0%}）はそれより大きいので、当てはめ直した直線の傾きはこの点の揺れで決まっています。"
                 if end_noisy else f"予測した同時 {f['last']} の TPOT の繰り返しの幅（中央値の {f['last_width']:.0%}）が、外挿の誤差より大きいです。")
        return (head + "判定できません：" + which + "外挿の誤差が式の外れなのか計測の揺れなのかは、この実行からは言えません。"
                "ほかのプログラムを止め、繰り返しを増やして測り直してください。")
    eff = (f"当てはめ直した compute_eff（{f['eff_refit']:.2f}、全体では {f['eff']:.2f}）も、ルーフラインの項の傾きを変えます。"
           if abs(f["eff_refit"] - f["eff"]) > 0.1 * f["eff"] else "")
    if f["err"] > 0:                                       # the measured growth slowed past the fitted range
        end = (f"直線の上の端の同時 {f['end']} は、全体の当てはめの直線より実測が遅め（誤差 {_pct(f['end_err'])}）なので、"
               "当てはめ直した直線はその分だけ急になり、その先を多めに予測します。計測の揺れ（⚠ の警告）がまず疑われます。"
               if f["end_err"] < -0.02 else "")
        return (head + f"予測が多すぎる向き（同時 {f['end']} から先の実測が、当てはめ直した直線の延長より下）です。" + end
                + eff + "CPU でも、まとめる数が増えると行列積のカーネルが1回読んだ重みをより多くの行に使えて効率が上がり"
                "（compute_eff が一定でなくなり）、1リクエストあたりの時間が減ることがあります（この実行では確かめていません）。")
    end = (f"直線の上の端の同時 {f['end']} は、全体の当てはめの直線より実測が速め（誤差 {_pct(f['end_err'])}）なので、"
           "当てはめ直した直線はその分だけ緩やかになっています。" if f["end_err"] > 0.02 else "")
    cores = ("、スレッドがほかのプログラムとコアを取り合ったり" if f["threads"] > 1 else "")
    return (head + f"予測が少なすぎる向き（実測の伸びが同時 {f['end']} から先で急になった）です。" + end + eff
            + f"CPU では、まとめる数が増えると KV や途中の行列がキャッシュに収まらなくなったり{cores}、"
            "計測中にほかのプログラムが動いたりして、1リクエストあたりの時間が増えることが考えられます。")


__all__ = ["constants_rows", "cost_line", "disturbed", "extrapolation", "extrapolation_lines", "extrapolation_verdict", "prediction_lines",
           "right_end_overhead", "slope_lines", "slope_verdict", "tpot_order_lines", "tpot_slope_split", "ttft_overhead_share"]
