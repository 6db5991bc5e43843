"""Exercise 03 (chapter 3): attention_decode(q [H, D], k_cache [T, KVH, D], v_cache [T, KVH, D]) -> [H, D].

One decode token's attention over T cached positions with GQA (Query head h reads KV head h // (H // KVH)),
scaled dot-product (1 / sqrt(D)) and softmax over the positions. Graded against the computation the engine's
prefill path uses (torch's scaled_dot_product_attention with enable_gqa, model/attention.py) on random shapes
drawn here. (Plugging the learner's function into the engine's decode path is not done yet.)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course.exercises.kit import Case, Grader, call, failed_call_case


def reference(q, k, v):
    h, d = q.shape
    out = F.scaled_dot_product_attention(q[None, :, None, :], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                         scale=d ** -0.5, enable_gqa=h != k.shape[1])
    return out[0, :, 0, :]


def _case(fn, name, h, kvh, t, d, gen, timeout_s) -> Case:
    q = torch.randn(h, d, generator=gen)
    k, v = torch.randn(t, kvh, d, generator=gen), torch.randn(t, kvh, d, generator=gen)
    inp = f"q [{h}, {d}], k_cache/v_cache [{t}, {kvh}, {d}]"
    exp = reference(q, k, v)
    r = call(fn, q.clone(), k.clone(), v.clone(), timeout_s=timeout_s)
    if not r.ok:
        return failed_call_case(name, inp, f"形 [{h}, {d}] の Tensor", r)
    got = r.value
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != (h, d):
        shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        return Case(name, inp, f"形 [{h}, {d}]", str(shape), False, f"戻り値は形 [{h}, {d}]（[H, D]）の Tensor にしてください")
    err = (got.float() - exp).abs().max().item()
    if err <= 1e-4:
        return Case(name, inp, f"最大誤差 ≤ 1e-4", f"最大誤差 {err:.2e}", True, "OK")
    g = h // kvh
    tiled = reference(q, k.repeat(1, g, 1), v.repeat(1, g, 1)) if kvh > 1 and g > 1 else None
    unscaled = F.scaled_dot_product_attention(q[None, :, None, :], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                              scale=1.0, enable_gqa=g > 1)[0, :, 0, :]
    if tiled is not None and (got.float() - tiled).abs().max().item() <= 1e-4:
        msg = "Query ヘッドと KV ヘッドの対応が違います。Query ヘッド h は KV ヘッド h // (H // KVH) を使います（repeat ではなく repeat_interleave）"
    elif (got.float() - unscaled).abs().max().item() <= 1e-4:
        msg = "スコアを 1/√D でスケールしていません"
    else:
        msg = "値が違います。softmax は T 個の位置の方向（スコアの最後の次元）でとってください"
    return Case(name, inp, "最大誤差 ≤ 1e-4", f"最大誤差 {err:.2e}", False, msg)


def check(fn, ctx: dict) -> list[Case]:
    t = ctx.get("timeout_s", 10.0)
    gen = torch.Generator().manual_seed(ctx.get("seed", 3))
    return [_case(fn, "GQA なし（H = KVH）", 4, 4, 7, 8, gen, t),
            _case(fn, "GQA（H = 8, KVH = 2）", 8, 2, 13, 16, gen, t),
            _case(fn, "位置が1つだけ", 4, 2, 1, 8, gen, t),
            _case(fn, "既定モデルに近い形（H = 8, KVH = 4, D = 64）", 8, 4, 40, 64, gen, t)]


GRADER = Grader(
    id="03_attention_decode", chapter=3, title_ja="Decode の Attention（GQA）",
    check=check,
    hints=["スコア = q・k ÷ √D を T 個の位置について計算し、softmax をとって v を重み付きで足します。",
           "GQA では、Query ヘッド h は KV ヘッド h // (H // KVH) の K と V を使います。",
           "k = k_cache.repeat_interleave(H // KVH, dim=1) で [T, H, D] にそろえると、einsum('hd,thd->ht') で書けます。"])
