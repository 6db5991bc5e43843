"""Exercise 6 (chapter 6): quantize_int8_per_channel(w [out, in]) -> (q int8 [out, in], scale [out]), symmetric.

Hand and random matrices (rows with outliers, an all-zero row, and a BF16 matrix as the engine passes): types and shapes, scale[n] = max|w[n]| / 127 as a
float32 tensor (a bfloat16 / float16 scale is refused as the interface contract, the type quantize_int8 returns; the
engine casts the scale to the model dtype itself, so a BF16 scale would give the same engine weights), q in
[-127, 127] (gpt-fast's amax / 127.5 with -128 is told apart and named: the engine, and so the grader, uses
amax / 127), a per-column and a whole-tensor scale are named as such, and every row's round-trip error |q * scale - w|
at most scale[n] / 2 (beyond it: floor/trunc is named when q equals it, else, on the BF16 case, dividing in BF16; a
scale within 2^-8 of max / 127 on the BF16 case is named as computed in BF16), exact .5 quotients rounded to even as
torch.round (the small matrix's last row, scale 1; round-half-up is named),
and finally q equal to the engine's quantize_int8 and scale within 1e-6 relative of it (the engine case below needs
the same greedy tokens: an additive epsilon such as amax / 127 + 1e-8, 2.3e-6 to 2.8e-5 relative on the default
model's scales of 3.6e-4 to 4.3e-3, flipped 13,671 q values there and 4 of 32 tokens in the blind reading of
2026-12-07b; it is named). Then the engine runs with the
learner's quantizer (LLM(quantization="int8", quantizer=fn), the seam in features/quantization.py): its greedy tokens
must equal those of the engine's own INT8 quantizer, and the grader reports the first-token agreement with the
unquantized BF16 engine and the measured weight bytes (features.quantization.weight_bytes).
"""
from __future__ import annotations

import torch

from course.exercises.checks import case, failed_call, run
from course.exercises.kit import Grader

PROMPTS = ["吾輩は猫である。", "東京の", "むかしむかし、", "今日は天気が"]


def _matrices():
    g = torch.Generator().manual_seed(6)
    small = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [100.0, 1.0, -1.0],
                          [127.0, 0.5, -2.5]])         # scale 1: exact .5 quotients (torch.round: half to even)
    outl = torch.randn(16, 64, generator=g) * 0.02
    outl[3, 5], outl[11, 0] = 8.0, -5.0               # two rows with an outlier
    bf16 = (torch.randn(16, 64, generator=g) * 0.05).to(torch.bfloat16)   # the engine hands over BF16 weights
    return [("小さな行列（全部 0 の行を含む）", small), ("ランダム 32×128", torch.randn(32, 128, generator=g)),
            ("外れ値のある行", outl), ("BF16 のランダム 16×64（モデルの重みと同じ型）", bf16)]


def _judge(w, res):
    """'' when (q, scale) is right for w, else the Japanese reason."""
    if not (isinstance(res, tuple) and len(res) == 2):
        return "(q, scale) の2つを tuple で返してください。"
    q, scale = res
    if not isinstance(q, torch.Tensor) or q.dtype != torch.int8 or q.shape != w.shape:
        return f"q は w と同じ形 {list(w.shape)} の int8 のテンソルにしてください（.to(torch.int8)）。"
    if isinstance(scale, torch.Tensor) and scale.numel() == w.shape[1] != w.shape[0]:
        return (f"scale が {w.shape[1]} 個（列の数）です。列（入力）ごとではなく、行（出力チャネル）ごとに1つ、"
                f"{w.shape[0]} 個にしてください（amax(dim=1)）。")
    if not isinstance(scale, torch.Tensor) or scale.numel() != w.shape[0]:
        return f"scale は出力チャネル（行）ごとに1つ、{w.shape[0]} 個の値にしてください（テンソル全体で1つではありません）。"
    if scale.dtype in (torch.bfloat16, torch.float16):
        return ("scale は float32 で返してください。これはこの演習の取り決めで、エンジンの quantize_int8 と同じ型です。"
                "BF16 への変換はエンジンが自分で行う（受け取った scale を、あとでモデルの dtype にして持つ）ので、"
                "返す側で丸める必要はありません。採点は scale を max ÷ 127 と float32 の精度で比べます。")
    s = scale.detach().float().reshape(-1)
    if not bool(torch.isfinite(s).all() and (s > 0).all()):
        return "scale に 0・負・inf・nan があります。全部 0 の行でも、0 で割らないよう小さな正の値にしてください。"
    if int(q.min()) < -127:
        return ("対称な量子化では -128 は使いません。[-127, 127] に収めてください（gpt-fast は -128 も使いますが、"
                "この演習はエンジンの決め方で採点します）。")
    low = w.dtype in (torch.bfloat16, torch.float16)
    w = w.float()
    amax = w.abs().amax(1)
    nz = amax > 0
    if not torch.allclose(s[nz], amax[nz] / 127, rtol=1e-3):
        if torch.allclose(s[nz], amax[nz] / 127.5, rtol=1e-4):
            return ("scale が最大 ÷ 127.5 です（gpt-fast の決め方）。この演習はエンジンと同じ最大 ÷ 127 で、"
                    "q を [-127, 127] に収めます。")
        if torch.allclose(s, torch.full_like(s, float(w.abs().max()) / 127), rtol=1e-3):
            return ("テンソル全体で1つのスケール（全体の最大 ÷ 127）になっています。行ごとに w.abs().amax(dim=1) ÷ 127 を"
                    "使ってください（全体で1つだと、外れ値のない行まで粗くなります）。")
        if w.shape[0] == w.shape[1] and torch.allclose(s, w.abs().amax(0) / 127, rtol=1e-3):
            return "scale が列（入力）ごとの最大 ÷ 127 です。行（出力チャネル）ごとに amax(dim=1) を使ってください。"
        if low and torch.allclose(s[nz], amax[nz] / 127, rtol=2 ** -8):
            return ("scale を BF16 のまま計算しています（w を float にせずに割ると、最大 ÷ 127 が BF16 に丸められ、"
                    "相対で最大 2^-8 ずれます。あとで .float() にしても戻りません）。w = w.float() にしてから計算してください。")
        return "scale は各行の絶対値の最大 ÷ 127 です（行ごとに別のスケール。外れ値のある行だけが粗くなります）。"
    err = (q.float() * s[:, None] - w).abs().amax(1)
    if bool((err > s / 2 * 1.001 + 1e-7).any()):
        floor = torch.floor(w / s[:, None]).clamp(-127, 127)
        if bool((q.float() == floor).all() or (q.float() == torch.trunc(w / s[:, None]).clamp(-127, 127)).all()):
            return "丸めの誤差が scale / 2 を超える行があります。切り捨て（floor や int()）ではなく torch.round で丸めてください。"
        if low:
            return ("丸めの誤差が scale / 2 を超える行があります。w が BF16 のまま割ると、商が BF16 に丸められてずれます"
                    "（100 の近くでは 0.5 刻み）。w = w.float() にしてから割り、torch.round で丸めてください。")
        return "丸めの誤差が scale / 2 を超える行があります。w / scale を torch.round で最も近い整数に丸めてください。"
    from minimal_engine.features.quantization import quantize_int8
    q_ref, s_ref = quantize_int8(w)          # the engine's own rule; the engine case needs the same q and scale
    flips = int((q.to(torch.int8) != q_ref).sum())
    rel = float(((s - s_ref) / s_ref)[nz].abs().max()) if bool(nz.any()) else 0.0
    ratio = w / s_ref[:, None]
    tie = (ratio - torch.floor(ratio) == 0.5) & (q.to(torch.int8) != q_ref)
    away = bool((q.to(torch.int8).int().abs() > q_ref.int().abs())[tie].any())   # an additive eps only shrinks |q|
    if flips and int(tie.sum()) == flips and (rel == 0 or (rel <= 1e-6 and away)):   # only the ties differ
        return (f"w / scale がちょうど .5 になる値 {flips} 個の丸め方が、エンジンと違います。torch.round は .5 を偶数へ丸めます"
                "（0.5 → 0、-2.5 → -2。エンジンと同じ）。floor(x + 0.5) や四捨五入ではなく torch.round を使ってください。")
    if flips or rel > 1e-6:
        return (f"q が {flips} 個、エンジンの round(w / (最大 ÷ 127)) と違います（scale のずれは相対で最大 {rel:.1e}）。"
                "0 で割らないよう全部の行に小さな値（+ 1e-8 など）を足すと、丸めの境目に近い値の行き先が変わり、"
                "エンジンで生成するトークンも変わります。全部 0 の行だけを clamp_min で下から押さえ、ほかの行の scale は"
                "最大 ÷ 127 のままにしてください。")
    return ""


def _engine_run(quantizer):
    """Greedy tokens (4 prompts x 8 tokens) and linear-weight bytes of the default model in BF16, INT8 with the
    engine's quantizer and INT8 with the learner's."""
    from minimal_engine import LLM, SamplingParams
    from minimal_engine.features.quantization import weight_bytes
    params = SamplingParams(temperature=0, max_tokens=8)
    out = {}
    for name, kw in (("bf16", {}), ("engine", {"quantization": "int8"}),
                     ("learner", {"quantization": "int8", "quantizer": quantizer})):
        llm = LLM(dtype="bfloat16", **kw)
        outs = llm.generate(PROMPTS, params, use_tqdm=False)
        out[name] = ([list(o.token_ids) for o in outs],
                     weight_bytes(llm.model)["linear"])
        llm.close()
    return out


def _kind(res) -> str:
    """What came back, in a few words (a list or a tensor shown by type and size, not by its values)."""
    if isinstance(res, (list, tuple, dict)):
        return f"{type(res).__name__}（{len(res)} 要素）"
    shape = getattr(res, "shape", None)
    return f"{type(res).__name__} {list(shape)}" if shape is not None else type(res).__name__


def check(fn, ctx=None) -> list:
    out, all_ok = [], True
    for name, w in _matrices():
        ok, res, msg = run(fn, w.clone())
        if not ok:
            out.append(failed_call(name, f"w {list(w.shape)}", "(q int8, scale)", msg))
            all_ok = False
            continue
        why = _judge(w, res)
        all_ok &= not why
        got = (f"q {getattr(res[0], 'dtype', type(res[0]).__name__)} {list(getattr(res[0], 'shape', []))}, "
               f"scale {list(getattr(res[1], 'shape', []))}") if isinstance(res, tuple) and len(res) == 2 else _kind(res)
        out.append(case(name, f"w {list(w.shape)}", f"q int8 {list(w.shape)}, scale [{w.shape[0]}]、誤差 ≤ scale/2",
                        got, not why, why))
    if not all_ok or (isinstance(ctx, dict) and ctx.get("engine") is False):
        return out
    ok, res, msg = run(_engine_run, fn, timeout_s=180.0)
    if not ok:
        out.append(failed_call("エンジンで生成", "LLM(quantization='int8', quantizer=あなたの関数)", "同じトークン", msg))
        return out
    same = res["learner"][0] == res["engine"][0]
    first = sum(a[0] == b[0] for a, b in zip(res["learner"][0], res["bf16"][0]))
    mb = lambda b: f"{b / 2**20:.2f} MiB"       # noqa: E731
    out.append(case("エンジンで生成（貪欲法、4 プロンプト × 8 トークン）", "LLM(dtype='bfloat16', quantization='int8', quantizer=…)",
                    "エンジンの INT8 と同じトークン", "同じ" if same else "違う", same,
                    ("エンジン自身の量子化と違うトークンになりました。丸めの方法（torch.round）と、scale が最大 ÷ 127 そのもの"
                     "か（全部の行に小さな値を足していないか）を確かめてください。")))
    out.append(case("BF16 との比較（計測）", f"{len(PROMPTS)} プロンプト",
                    f"BF16 の線形層 {mb(res['bf16'][1])}（BF16 では lm_head が埋め込みと共有なので入らず、"
                    "INT8 では lm_head も INT8 の線形層として入ります）",
                    f"最初のトークンの一致 {first}/{len(PROMPTS)}、線形層 {mb(res['learner'][1])}",
                    res["learner"][1] == res["engine"][1], "重みの大きさがエンジンの INT8 と違います。"))
    return out


GRADER = Grader(id="06_quantize_int8", chapter=6, title_ja="重みを INT8 に量子化する（出力チャネルごと）", check=check, hints=[
    "行（出力チャネル）ごとにスケールを1つ決め、その行の値をスケールで割って整数に丸めます。",
    "scale[n] = max|w[n, :]| / 127（全部 0 の行は小さな正の値で下から押さえる）、q = round(w / scale) を [-127, 127] に収めて int8 にします。",
    "w = w.float(); scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127; "
    "q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)",
])
