"""Lab 10's explanations, printed from the run (第10章ラボの説明の数字は、すべてこの実行から出します).

    constants_rows(res)         # this machine's constants: value, measured / fitted / set, meaning
    prediction_lines(res)       # the errors as sentences (held-out TPOT, tok/s; TTFT at fit points)
    cost_line(res, usd, watts)  # $/M output tokens and tok/s/user, smallest to largest concurrency
    default_model_on_gpu(res)   # the default model on one GPU, two ways (予測)
    serving_overhead_lines(curves)   # ... which part of that curve a constant decides
    ttft_overhead_share(res)    # how much of the predicted batch-1 TTFT the fitted overheads make
    right_end_overhead(res)     # the batch-1 fixed time: layers x (layer + seq x 1), and seq's share
    tpot_slope_split(res)       # the TPOT growth, smallest to largest concurrency: roofline vs seq_overhead_us
    slope_verdict(split)        # which of the two made most of it, and why (a plain function of the numbers)
    extrapolation(res)          # refit without the largest concurrency and predict it (外挿)

A sentence that quotes a measured figure is printed by the notebook's cell, so re-executing the
notebook can never leave it stale. ``res`` is ``lab10.run_pareto_lab``'s result. The tasks' (課題)
predictions and their verdicts are in ``lab10_tasks``.
"""
from __future__ import annotations

from pathlib import Path

from minimal_engine.calculators.sim_step import DEFAULT_CONSTANTS
from minimal_engine.calculators.simulator import get_sim_model, simulate, simulate_batch
from minimal_engine.tools.sim_calibration import fit_machine_all, machine_table

DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[2] / "minimal_engine" / "default_model"


def constants_rows(res: dict) -> list[dict]:
    """The constants this machine enters the simulator with: 値, 決め方 (測定 / 当てはめ / 設定) and what each
    means physically, with the part of the curve it decides."""
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
    """How far the prediction is off, as sentences: TPOT and tok/s at the held-out concurrencies,
    TTFT (as predicted / measured) at the fit concurrencies."""
    t = res["table"]
    held = [r for r in t if r["split"] == "held-out"]
    fit = [r for r in t if r["split"] == "fit"]
    out = []
    if held:
        cs = "・".join(str(r["concurrency"]) for r in held)
        tp = [r["err_tpot_ms"] for r in held]
        tk = [r["err_tok_s"] for r in held]
        out.append(f"当てはめた2点の間（内挿）の同時 {cs} で、TPOT の誤差は {_span(tp)}、出力 tok/s の誤差は {_span(tk)} でした。")
    ratios = "、".join(f"同時 {r['concurrency']} で {r['pred_ttft_ms'] / r['ttft_ms']:.2f} 倍"
                      for r in fit)
    out.append(f"当てはめに使った同時リクエスト数での TTFT の予測は、実測に対して{ratios}です"
               f"（compute_eff = {res['spec']['compute_eff']:.2f}）。")
    tpot = "、".join(f"同時 {r['concurrency']} で {_pct(r['err_tpot_ms'])}" for r in fit)
    out.append(f"TPOT の誤差は、当てはめに使った点では{tpot}です（2点に直線を合わせるので、ほぼ 0 になります）。")
    return out


def _pct(x: float) -> str:
    """A signed percentage, "0%" (not "-0%") when it rounds to zero."""
    return "0%" if round(x * 100) == 0 else f"{x:+.0%}"


def _span(errs: list[float]) -> str:
    lo, hi = _pct(min(errs)), _pct(max(errs))
    return lo if lo == hi else f"{lo}〜{hi}"


def cost_line(res: dict, usd_per_hour: float, watts: float) -> str:
    """$/M output tokens (at ``usd_per_hour`` and ``watts``) and tok/s/user from the smallest to the
    largest concurrency of the run."""
    from course.labkit.measure import cost
    a, b = res["rows"][0], res["rows"][-1]
    ua, ub = (cost(usd_per_hour, watts, r["tok_s"], r["total_tok_s"])["usd_per_m_output_tokens"]
              for r in (a, b))
    return (f"同時 {a['concurrency']} → {b['concurrency']} で、$/M 出力トークンは ${ua:.3f} → ${ub:.3f}"
            f"（{ua / ub:.1f} 分の 1）、tok/s/user は {a['tok_s_per_user']:.0f} → "
            f"{b['tok_s_per_user']:.0f} です。")


def default_model_on_gpu(res: dict, gpu: str = "H100", dtype: str = "bf16") -> dict:
    """The default model on one ``gpu`` at this run's lengths and concurrencies (予測), two ways:
    ``batch``: all requests at once (``simulate_batch``, this lab's workload; no serving overhead),
    and ``served``: InferenceX's closed loop (``simulate``) with the fitted serving overhead
    ``request_overhead_ms x (1 - 1/C)``. Rows carry interactivity and output_tok_s_per_gpu."""
    kw = dict(weight_dtype=dtype, kv_dtype=dtype, input_len=res["prompt_len"],
              output_len=res["output_len"])
    model = DEFAULT_MODEL_DIR
    batch, served = [], []
    for c in res["concurrencies"]:
        b = simulate_batch(model, gpu, concurrency=c, **kw)
        batch.append({"concurrency": c, "interactivity": b["tok_s_per_user"],
                      "output_tok_s_per_gpu": b["tok_s"], "ttft_ms": b["ttft_ms"],
                      "tpot_ms": b["tpot_ms"]})
        s = simulate(model, gpu, num_gpus=1, tp=1, concurrency=c, **kw)
        served.append({k: s[k] for k in ("concurrency", "interactivity", "output_tok_s_per_gpu",
                                         "ttft_ms", "tpot_ms")})
    return {"gpu": gpu, "batch": batch, "served": served,
            "request_overhead_ms": DEFAULT_CONSTANTS.request_overhead_ms}


def serving_overhead_lines(curves: dict) -> list[str]:
    """What the fitted serving constant, not the GPU, does to the default model's curve (予測)."""
    out = []
    for b, s in zip(curves["batch"], curves["served"]):
        out.append(f"同時 {b['concurrency']:>2}: 全員同時 {b['output_tok_s_per_gpu']:>9,.0f} tok/s/GPU"
                   f"（TTFT {b['ttft_ms']:6.1f} ms）、閉ループ＋サービングの定数 {s['output_tok_s_per_gpu']:>9,.0f}"
                   f" tok/s/GPU（TTFT {s['ttft_ms']:6.1f} ms）")
    return out


def ttft_overhead_share(res: dict) -> dict:
    """The predicted TTFT at the run's smallest concurrency, with this machine's fitted constants
    and with the two per-step overheads set to 0: how much of the TTFT compute_eff does not
    decide."""
    kw = dict(weight_dtype=res.get("dtype", "fp32"), kv_dtype=res.get("dtype", "fp32"),
              input_len=res["prompt_len"], output_len=res["output_len"],
              concurrency=res["concurrencies"][0])
    full = simulate_batch(DEFAULT_MODEL_DIR, res["spec"], **kw)["ttft_ms"]
    bare = simulate_batch(DEFAULT_MODEL_DIR, {**res["spec"], "layer_overhead_us": 0,
                                              "seq_overhead_us": 0}, **kw)["ttft_ms"]
    return {"concurrency": kw["concurrency"], "ttft_ms": full, "overhead_ms": full - bare,
            "share": (full - bare) / full}


def serving_constant_lines(gpu: dict) -> list[str]:
    """Where the closed-loop curve's drop from the smallest concurrency comes from: the constant's
    formula request_overhead_ms x (1 - 1/C), printed for each concurrency of the curve."""
    r = gpu["request_overhead_ms"]
    return [f"同時 {s['concurrency']:>2}: 定数の分 {r:.1f} × (1 − 1/{s['concurrency']}) = "
            f"{r * (1 - 1 / s['concurrency']):5.1f} ms（TTFT の予測 {s['ttft_ms']:6.1f} ms のうち）"
            for s in gpu["served"]]


def right_end_overhead(res: dict) -> dict:
    """The fixed time the fitted overheads add to one decode step at the run's smallest concurrency C:
    layers x (layer_overhead_us + seq_overhead_us x C), and the part of it seq_overhead_us makes."""
    layers, s, c = get_sim_model(DEFAULT_MODEL_DIR).shape.layers, res["spec"], res["concurrencies"][0]
    layer_ms, seq_ms = layers * s["layer_overhead_us"] / 1e3, layers * s["seq_overhead_us"] * c / 1e3
    total = layer_ms + seq_ms
    line = (f"[右端の固定の時間] 同時 {c} の1ステップ: {layers} 層 × (layer_overhead_us {s['layer_overhead_us']:.0f}"
            f" + seq_overhead_us {s['seq_overhead_us']:.1f} × {c}) µs = {total:.2f} ms。うち seq_overhead_us の分は "
            f"{seq_ms:.2f} ms（{seq_ms / total if total else 0:.0%}）")
    return {"concurrency": c, "layers": layers, "layer_ms": layer_ms, "seq_ms": seq_ms, "total_ms": total,
            "seq_share": seq_ms / total if total else 0.0, "line": line}


def tpot_slope_split(res: dict) -> dict:
    """The predicted TPOT growth from the run's smallest to its largest concurrency, split into the roofline
    term (the simulator with both per-step overheads at 0) and the rest (seq_overhead_us x layers x dC),
    with the measured growth and the concurrency from which decode is compute-bound: 2 FLOP per parameter
    and request against the parameter's bytes, above the ridge GFLOP/s x compute_eff / (GB/s x memory_eff)."""
    s, dtype = res["spec"], res.get("dtype", "fp32")
    a, b = min(res["concurrencies"]), max(res["concurrencies"])
    kw = dict(weight_dtype=dtype, kv_dtype=dtype, input_len=res["prompt_len"], output_len=res["output_len"])
    bare = {**s, "layer_overhead_us": 0.0, "seq_overhead_us": 0.0}

    def tpot(spec: dict, c: int) -> float:
        return simulate_batch(DEFAULT_MODEL_DIR, spec, concurrency=c, **kw)["tpot_ms"]

    roof, pred = tpot(bare, b) - tpot(bare, a), tpot(s, b) - tpot(s, a)
    meas = {t["concurrency"]: t["tpot_ms"] for t in res["table"]}
    flops = s["flops_fp32" if dtype == "fp32" else "flops_bf16"]
    ridge = flops * s["compute_eff"] / (s["bandwidth"] * s["memory_eff"])       # FLOP per byte
    per_request = 2 / (4 if dtype == "fp32" else 2)                            # decode FLOP/B per request
    return {"from": a, "to": b, "pred_ms": pred, "measured_ms": meas[b] - meas[a], "roof_ms": roof,
            "seq_ms": pred - roof, "gflops": flops / 1e9, "compute_eff": s["compute_eff"],
            "gbs": s["bandwidth"] * s["memory_eff"] / 1e9, "ridge": ridge, "per_request": per_request,
            "c_compute": ridge / per_request, "dtype": dtype}


def slope_lines(sp: dict) -> list[str]:
    """The split as printed lines, then the verdict (``slope_verdict``)."""
    tot = sp["pred_ms"] or 1.0
    return [f"[TPOT の伸びの内訳] 同時 {sp['from']} → {sp['to']} で TPOT の予測は {sp['pred_ms']:+.1f} ms"
            f"（実測 {sp['measured_ms']:+.1f} ms）。うちルーフラインの項 {sp['roof_ms']:+.1f} ms（{sp['roof_ms'] / tot:.0%}）、"
            f"seq_overhead_us の項 {sp['seq_ms']:+.1f} ms（{sp['seq_ms'] / tot:.0%}）",
            f"[Decode が演算で決まる境目] 演算性能 {sp['gflops']:.0f} GFLOP/s × compute_eff {sp['compute_eff']:.2f}"
            f" ÷ 帯域 {sp['gbs']:.1f} GB/s = {sp['ridge']:.1f} FLOP/B。{sp['dtype']} の Decode は1リクエストあたり"
            f" {sp['per_request']:.1f} FLOP/B なので、同時 約 {sp['c_compute']:.1f} から上は演算で決まります",
            slope_verdict(sp)]


def slope_verdict(sp: dict) -> str:
    """Which term made most of the predicted TPOT growth, with the mechanism that can do it on a CPU."""
    head = f"[傾きを決めたもの] 同時 {sp['from']} → {sp['to']} の TPOT の伸びの大きい方は、"
    if sp["roof_ms"] >= sp["seq_ms"] and sp["c_compute"] >= sp["to"]:
        return (head + "ルーフラインの項でした。調べた範囲では Decode は帯域で決まるので、伸びたのは重みではなく、"
                "同時リクエスト数に比例して増える KV を読む時間です。")
    if sp["roof_ms"] >= sp["seq_ms"]:
        return (head + "ルーフラインの項でした。このマシンでは、演算性能と帯域の比が小さいので、まとめる数が増えると "
                "Decode が重みを読む時間ではなく行列積の計算で決まります。その先では1ステップの計算が同時リクエスト数に"
                "比例して伸び、傾きは測った GFLOP/s と compute_eff（TTFT で当てはめた値）で決まります。"
                "GPU では演算性能と帯域の比がずっと大きいので、この境目ははるかに大きな同時リクエスト数にあります。")
    where = ("調べた範囲では Decode はほぼ帯域で決まり、重みを1回読む時間はまとめる数によらないので"
             if sp["c_compute"] >= sp["to"] else "Decode が演算で決まる範囲もありますが、その伸びより")
    return (head + f"seq_overhead_us の項でした。{where}、リクエストごとに層ごとにかかる処理（Python で1リクエストずつ"
            "扱う分など）の積み重ねが伸びの大部分です。")


def extrapolation(res: dict) -> dict | None:
    """Refit the run's constants on its smallest and second-largest concurrency and predict the largest:
    a point outside the fitted range (外挿). The default fit's held-out points lie between its two fitted
    ends (内挿), so they test only the straight line's shape. None with fewer than 3 concurrencies."""
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
    f = {"err": r["err_tpot_ms"], "held": max(held), "end": b, "end_err": end_err, "threads": res.get("threads") or 1,
         "eff": res["spec"]["compute_eff"], "eff_refit": ext["spec"]["compute_eff"]}
    out.append(f"[外挿の材料] 外挿の TPOT の誤差 {_pct(f['err'])}、内挿のいちばん大きい誤差（絶対値）{f['held']:.0%}、"
               f"全体の当てはめでの同時 {b} の TPOT の誤差 {_pct(end_err)}、compute_eff は全体 {f['eff']:.2f}・"
               f"当てはめ直し {f['eff_refit']:.2f}、スレッド数 {f['threads']}")
    return out + [extrapolation_verdict(f)]


def extrapolation_verdict(f: dict) -> str:
    """Why the extrapolated TPOT missed, following the error's sign and the run's thread count.
    err = predicted / measured - 1: positive means the measured growth past the fitted range slowed."""
    head = f"[外挿の見立て] 外挿の TPOT の誤差（絶対値 {abs(f['err']):.0%}）は、内挿のいちばん大きい誤差（{f['held']:.0%}）"
    if abs(f["err"]) <= f["held"] + 0.02:                  # 2 points of margin: noise, rounding
        return head + "と同じくらいか、それ以下です。この実行では、直線の式が当てはめた範囲の外にもそのまま当てはまっています。"
    head += "より大きいです。"
    eff = (f"当てはめ直した compute_eff（{f['eff_refit']:.2f}、全体では {f['eff']:.2f}）も、ルーフラインの項の傾きを変えます。"
           if abs(f["eff_refit"] - f["eff"]) > 0.1 * f["eff"] else "")
    if f["err"] > 0:                                       # the measured growth slowed past the fitted range
        end = (f"直線の上の端の同時 {f['end']} は、全体の当てはめの直線より実測が遅め（誤差 {_pct(f['end_err'])}）なので、"
               "当てはめ直した直線はその分だけ急になり、その先を多めに予測します。計測の揺れ（⚠ の警告）がまず疑われます。"
               if f["end_err"] < -0.02 else "")
        return (head + f"予測が多すぎる向き（実測の伸びが同時 {f['end']} から先で緩やかになった）です。" + end + eff
                + "CPU でも、まとめる数が増えると行列積のカーネルが1回読んだ重みをより多くの行に使えて効率が上がり"
                "（compute_eff が一定でなくなり）、1リクエストあたりの時間が減ることがあります。")
    end = (f"直線の上の端の同時 {f['end']} は、全体の当てはめの直線より実測が速め（誤差 {_pct(f['end_err'])}）なので、"
           "当てはめ直した直線はその分だけ緩やかになっています。" if f["end_err"] > 0.02 else "")
    cores = ("、スレッドがほかのプログラムとコアを取り合ったり" if f["threads"] > 1 else "")
    return (head + f"予測が少なすぎる向き（実測の伸びが同時 {f['end']} から先で急になった）です。" + end + eff
            + f"CPU では、まとめる数が増えると KV や途中の行列がキャッシュに収まらなくなったり{cores}、"
            "計測中にほかのプログラムが動いたりして、1リクエストあたりの時間が増えることが考えられます。")


__all__ = ["constants_rows", "cost_line", "default_model_on_gpu", "extrapolation", "extrapolation_lines",
           "extrapolation_verdict", "prediction_lines", "right_end_overhead", "serving_constant_lines", "serving_overhead_lines",
           "slope_lines", "slope_verdict", "tpot_slope_split", "ttft_overhead_share"]
