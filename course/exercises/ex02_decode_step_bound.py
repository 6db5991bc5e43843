"""Exercise 02 (chapter 2): decode_step_bound(weight_bytes, kv_bytes, flops, peak_flops, bandwidth) -> seconds.

The roofline lower bound of one decode step: max(FLOPs / peak FLOP/s, (weight + KV bytes) / bandwidth). The notebook
states the inputs and the output only; the hints escalate to the formula in words (blind reading reviews8 ch02 #8).
Graded on hand cases on both sides of the ridge point and on datasheet shapes: bytes and FLOPs from
``minimal_engine.calculators.roofline`` (decode_step_bytes, decode_step_flops) for a model, a GPU, and batch
sizes below and above the ridge (``DATASHEET_CASES``: each fits the GPU's memory), compared with the same formula
computed here; then on this machine: its
peaks measured (bench.roofline.measure_machine), the default model's decode steps at batch 1 and 8 timed, and
the learner's bound shown next to each measured step.
"""
from __future__ import annotations

import math
import numbers

from course.exercises.kit import Case, Grader, call, failed_call_case
from minimal_engine.calculators import roofline


# (batch, context) on the datasheet GPU. Llama 3.1 8B on one H100: batches 1 and 64 at context 1,024 are
# bandwidth-bound; batch 1,024 at context 64 is compute-bound (15.4 TFLOP / 989 TFLOP/s = 15.6 ms against
# (16.1 GB weights + 8.6 GB KV) / 3.35 TB/s = 7.4 ms) and fits its 80 GB (at context 1,024 its KV alone is 137 GB).
DATASHEET_CASES = ((1, 1024), (64, 1024), (1024, 64))
LOADED_RATIO = 10   # a measured step this many times its bound: machine load, not only fixed time
REL_TOL = 1e-6      # a correct formula computed in float32 (np.float32 inputs) lands within ~1e-7 of the float64
                    # answer: it passes (blind reading ch02, reviews6 #6); the hand cases' near misses differ by 2e-6


def reference(weight_bytes, kv_bytes, flops, peak_flops, bandwidth) -> float:
    return max(flops / peak_flops, (weight_bytes + kv_bytes) / bandwidth)


def _seconds(x: float, other: float) -> str:
    """x in seconds, with enough digits to differ from ``other`` when the two differ (1.000002 vs 1)."""
    for digits in range(6, 18):
        if f"{x:.{digits}g}" != f"{other:.{digits}g}" or x == other:
            return f"{x:.{digits}g} 秒"
    return f"{x!r} 秒"


def _case(fn, name, args, timeout_s) -> Case:
    w, kv, f, peak, bw = args
    inp = f"weight_bytes={w:.4g}, kv_bytes={kv:.4g}, flops={f:.4g}, peak_flops={peak:.4g}, bandwidth={bw:.4g}"
    exp = reference(*args)
    r = call(fn, *args, timeout_s=timeout_s)
    if not r.ok:
        return failed_call_case(name, inp, f"{exp:.6g} 秒", r)
    got = r.value
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        return Case(name, inp, f"{exp:.6g} 秒", repr(got), False,
                    f"戻り値は秒を表す float にしてください（{type(got).__name__} が返りました）")
    ok = math.isclose(float(got), exp, rel_tol=REL_TOL)
    if ok:
        return Case(name, inp, f"{exp:.6g} 秒", f"{float(got):.6g} 秒", True, "OK")
    exp_text, got_text = _seconds(exp, float(got)), _seconds(float(got), exp)
    mem, comp = (w + kv) / bw, f / peak
    if math.isclose(float(got), 1000 * exp, rel_tol=REL_TOL):
        msg = "ミリ秒で返しています（1000 倍）。秒で返してください"
    elif math.isclose(float(got), mem + comp, rel_tol=REL_TOL):
        msg = "2つの時間を足しています。下限は大きいほう（max）です：演算とメモリの読み出しは重なって進みます"
    elif math.isclose(float(got), min(mem, comp), rel_tol=REL_TOL):
        side = "メモリ側（(weight_bytes + kv_bytes) ÷ bandwidth）" if mem < comp else "演算側（flops ÷ peak_flops）"
        msg = (f"返した値は{side}の時間だけで、この入力ではそれが小さいほうです。片方だけを返したか、min を"
               "とったかです。下限は2つの時間の大きいほう（max）です")
    elif math.isclose(float(got), max(comp, w / bw), rel_tol=REL_TOL):
        msg = "KV キャッシュの読み出し（kv_bytes）を忘れています。バイト数は重み＋KV です"
    elif math.isclose(float(got), max(comp, (w + kv) * bw), rel_tol=REL_TOL):
        msg = "バイト数を帯域で割ってください（掛けています）"
    else:
        msg = ("メモリ側（(weight_bytes + kv_bytes) ÷ bandwidth）と演算側（flops ÷ peak_flops）の大きいほうです"
               f"（この入力ではメモリ側 {mem:.4g} 秒、演算側 {comp:.4g} 秒）")
    return Case(name, inp, exp_text, got_text, False, msg)


def check(fn, ctx: dict) -> list[Case]:
    t = ctx.get("timeout_s", 5.0)
    cases = [_case(fn, "手計算：帯域律速の側", (2e9, 0.0, 4e9, 1e12, 1e11), t),
             _case(fn, "手計算：演算律速の側", (1e6, 1e6, 1e12, 1e12, 1e12), t),
             _case(fn, "KV キャッシュの読み出しが効く", (1e9, 3e9, 1e9, 1e14, 1e12), t)]
    model, gpu = ctx.get("model", "Llama 3.1 8B"), ctx.get("gpu", "H100")
    peak, bw = roofline.gpu_peak_flops(gpu), roofline.gpu_bandwidth(gpu)
    for batch, context in DATASHEET_CASES:
        b = roofline.decode_step_bytes(model, batch=batch, context=context)
        f = roofline.decode_step_flops(model, batch=batch, context=context)
        cases.append(_case(fn, f"{model} on {gpu}、バッチ {batch}・文脈 {context}（データシートの値からの予測）",
                           (b["weight_bytes"], b["kv_bytes"], f, peak, bw), t))
    if ctx.get("engine") is False or not all(c.passed for c in cases):
        return cases
    r = call(measured_steps, timeout_s=max(t, 180.0))
    if not r.ok:
        return cases + [failed_call_case("このマシンで計測した Decode ステップ", "同梱モデル", "計測", r)]
    for row in r.value:
        cases.append(_measured_case(fn, row, t))
    return cases


def measured_steps(batches=(1, 8), context: int = 64) -> list[dict]:
    """This machine's peaks (bench.roofline.measure_machine, quick) and the default model's decode steps at each
    batch (median of 8 steps): bytes and FLOPs of the step (bench.roofline.step_cost) and the measured time."""
    import torch

    from minimal_engine import LLM
    from minimal_engine.bench.offline import decode_step_time
    from minimal_engine.bench.roofline import measure_machine, step_cost
    from course.labkit.peaks import with_model_peak
    llm = LLM(max_num_seqs=max(batches), max_model_len=256)
    # the engine's kernel on this model's own layer shapes where faster (a slower "peak" is no roof: peaks.py)
    machine = with_model_peak(measure_machine("cpu", quick=True), llm.model_config, llm.dtype)
    size = torch.finfo(llm.dtype).bits // 8
    rows = []
    for b in batches:
        cost = step_cost(llm.model_config, size, decode_contexts=[context + 2] * b)
        key = "flops_bf16" if size == 2 else "flops_fp32"
        rows.append({"batch": b, "args": (cost["weight_bytes"], cost["kv_bytes"], cost["flops"], machine[key],
                                          machine["bandwidth"]),
                     "measured_s": decode_step_time(llm, b, context, num_steps=8)["median_step_ms"] / 1000})
    return rows


def _measured_case(fn, row: dict, timeout_s: float) -> Case:
    """The learner's bound on this machine's measured peaks, next to the step time measured here."""
    case = _case(fn, f"このマシン：同梱モデルの Decode、バッチ {row['batch']}（計測と比べる）", row["args"], timeout_s)
    if case.passed:
        bound = reference(*row["args"])
        case.got += f"（計測 {row['measured_s'] * 1000:.2f} ms、下限の {row['measured_s'] / bound:.1f} 倍）"
        case.message = ("OK。計測したステップは下限より長くなりました。差の候補は、小さな演算や Python の処理など、"
                        "ルーフラインに入っていない固定の時間と、線形層の呼び出しとカーネルの実効速度（小さな行列では、"
                        "線形層だけを続けて呼んでも測った帯域ほど速くは読めません）です。どれがどれだけかは、レッスンと"
                        "ラボの「内訳」の行が測って分けます" + (f"。ただし下限の {row['measured_s'] / bound:.0f} 倍と大きいので、マシンが混んで"
                                         "いた分も入っているはずです（ほかのノートブックを止めて測り直してください）"
                                         if row["measured_s"] > LOADED_RATIO * bound else "")
                        if row["measured_s"] >= bound else
                        "OK。計測したステップが下限より短くなりました。測ったピークか帯域が、このマシンの本当の上限"
                        "ではありません。考えられるのは、重みの一部が CPU のキャッシュに収まって測った帯域より速く"
                        "読めたこと、ピークを測った瞬間だけマシンが混んでいたことです")
    return case


GRADER = Grader(
    id="02_decode_step_bound", chapter=2, title_ja="Decode 1ステップのルーフラインの下限",
    check=check,
    hints=["1ステップは、重みと KV キャッシュを読む時間と、演算の時間のどちらより短くもなりません。",
           "読む時間はバイト数を帯域（バイト/秒）で割り、演算の時間は FLOPs をピーク（FLOP/s）で割ります。"
           "1ステップが読むバイト数には、重みのほかに何が入るかを考えてください。",
           "2つの時間は重なって進むので、足すのではなく、遅いほうがステップの時間を決めます（レッスン第2章のルーフラインの節）。"])
