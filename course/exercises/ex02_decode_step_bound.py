"""Exercise 02 (chapter 2): decode_step_bound(weight_bytes, kv_bytes, flops, peak_flops, bandwidth) -> seconds.

The roofline lower bound of one decode step: max(FLOPs / peak FLOP/s, (weight + KV bytes) / bandwidth).
Graded on hand cases on both sides of the ridge point and on datasheet shapes: bytes and FLOPs from
``minimal_engine.calculators.roofline`` (decode_step_bytes, decode_step_flops) for a model, a GPU, and batch
sizes below and above the ridge, compared with the same formula computed here.
"""
from __future__ import annotations

import math

from course.exercises.kit import Case, Grader, call, failed_call_case
from minimal_engine.calculators import roofline


def reference(weight_bytes, kv_bytes, flops, peak_flops, bandwidth) -> float:
    return max(flops / peak_flops, (weight_bytes + kv_bytes) / bandwidth)


def _case(fn, name, args, timeout_s) -> Case:
    w, kv, f, peak, bw = args
    inp = f"weight_bytes={w:.4g}, kv_bytes={kv:.4g}, flops={f:.4g}, peak_flops={peak:.4g}, bandwidth={bw:.4g}"
    exp = reference(*args)
    r = call(fn, *args, timeout_s=timeout_s)
    if not r.ok:
        return failed_call_case(name, inp, f"{exp:.6g} 秒", r)
    got = r.value
    try:
        ok = math.isclose(float(got), exp, rel_tol=1e-9)
    except (TypeError, ValueError):
        return Case(name, inp, f"{exp:.6g} 秒", repr(got), False, "戻り値は秒を表す float にしてください")
    if ok:
        return Case(name, inp, f"{exp:.6g} 秒", f"{float(got):.6g} 秒", True, "OK")
    mem, comp = (w + kv) / bw, f / peak
    if math.isclose(float(got), mem + comp, rel_tol=1e-9):
        msg = "2つの時間を足しています。下限は大きいほう（max）です：演算とメモリの読み出しは重なって進みます"
    elif math.isclose(float(got), min(mem, comp), rel_tol=1e-9):
        msg = "小さいほうを返しています。遅いほう（max）が下限を決めます"
    elif math.isclose(float(got), max(comp, w / bw), rel_tol=1e-9):
        msg = "KV キャッシュの読み出し（kv_bytes）を忘れています。バイト数は重み＋KV です"
    elif math.isclose(float(got), max(comp, (w + kv) * bw), rel_tol=1e-6):
        msg = "バイト数を帯域で割ってください（掛けています）"
    else:
        msg = ("メモリ側（(weight_bytes + kv_bytes) ÷ bandwidth）と演算側（flops ÷ peak_flops）の大きいほうです"
               f"（この入力ではメモリ側 {mem:.4g} 秒、演算側 {comp:.4g} 秒）")
    return Case(name, inp, f"{exp:.6g} 秒", f"{float(got):.6g} 秒", False, msg)


def check(fn, ctx: dict) -> list[Case]:
    t = ctx.get("timeout_s", 5.0)
    cases = [_case(fn, "手計算：帯域律速の側", (2e9, 0.0, 4e9, 1e12, 1e11), t),
             _case(fn, "手計算：演算律速の側", (1e6, 1e6, 1e12, 1e12, 1e12), t),
             _case(fn, "KV キャッシュの読み出しが効く", (1e9, 3e9, 1e9, 1e14, 1e12), t)]
    model, gpu = ctx.get("model", "Llama 3.1 8B"), ctx.get("gpu", "H100")
    peak, bw = roofline.gpu_peak_flops(gpu), roofline.gpu_bandwidth(gpu)
    for batch in (1, 64, 1024):       # batch 1 is bandwidth-bound; a large batch passes the ridge point
        b = roofline.decode_step_bytes(model, batch=batch, context=1024)
        f = roofline.decode_step_flops(model, batch=batch, context=1024)
        cases.append(_case(fn, f"{model} on {gpu}、バッチ {batch}（データシートの値からの予測）",
                           (b["weight_bytes"], b["kv_bytes"], f, peak, bw), t))
    return cases


GRADER = Grader(
    id="02_decode_step_bound", chapter=2, title_ja="Decode 1ステップのルーフラインの下限",
    check=check,
    hints=["1ステップは、重みと KV キャッシュを読む時間と、演算の時間のどちらより短くもなりません。",
           "メモリ側は (weight_bytes + kv_bytes) / bandwidth、演算側は flops / peak_flops です。",
           "return max(flops / peak_flops, (weight_bytes + kv_bytes) / bandwidth) の形です。"])
