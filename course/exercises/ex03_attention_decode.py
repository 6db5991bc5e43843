"""Exercise 03 (chapter 3): attention_decode(q [H, D], k_cache [T, KVH, D], v_cache [T, KVH, D]) -> [H, D].

One decode token's attention over T cached positions with GQA (Query head h reads KV head h // (H // KVH)),
scaled dot-product (1 / sqrt(D)) and softmax over the positions. Graded against the computation the engine's
prefill path uses (torch's scaled_dot_product_attention with enable_gqa, model/attention.py) on random shapes
drawn here. Then the engine generates with the learner's function as its decode attention
(LLM(decode_attention=fn): every decode row of every step goes through it, model/attention.py's "custom" mode):
greedy tokens of several prompts decoded together must equal the unmodified engine's.
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
    kg, vg = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)             # [T, H, D]
    over_heads = torch.einsum("ht,thd->hd", (torch.einsum("hd,thd->ht", q, kg) * d ** -0.5).softmax(0), vg)
    if tiled is not None and (got.float() - tiled).abs().max().item() <= 1e-4:
        msg = "Query ヘッドと KV ヘッドの対応が違います。Query ヘッド h は KV ヘッド h // (H // KVH) を使います（repeat ではなく repeat_interleave）"
    elif (got.float() - unscaled).abs().max().item() <= 1e-4:
        msg = "スコアを 1/√D でスケールしていません"
    elif h > 1 and (got.float() - over_heads).abs().max().item() <= 1e-4:
        msg = "softmax をヘッドの方向でとっています。softmax は T 個の位置の方向（スコアの最後の次元）でとってください"
    else:
        msg = ("値が違います。スコアのスケール（1/√D、D はヘッド次元）、softmax をとる次元（T 個の位置の方向）、"
               "Query ヘッドと KV ヘッドの対応（h // (H // KVH)）を確かめてください")
    return Case(name, inp, "最大誤差 ≤ 1e-4", f"最大誤差 {err:.2e}", False, msg)


ENGINE_PROMPTS = ["吾輩は猫である。", "名前はまだ無い。どこで生れたかとんと", "何でも薄暗いじめじめした所で"]


def engine_tokens(decode_attention) -> list[list[int]]:
    """Greedy tokens of the default model (float32) with this decode attention (None: the engine's own)."""
    from minimal_engine import LLM, SamplingParams
    llm = LLM(dtype="float32", max_num_seqs=4, max_model_len=128, decode_attention=decode_attention)
    outs = llm.generate(ENGINE_PROMPTS, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True), use_tqdm=False)
    return [o.token_ids for o in outs]


def check(fn, ctx: dict) -> list[Case]:
    t = ctx.get("timeout_s", 10.0)
    gen = torch.Generator().manual_seed(ctx.get("seed", 3))
    cases = [_case(fn, "GQA なし（H = KVH）", 4, 4, 7, 8, gen, t),
             _case(fn, "GQA（H = 8, KVH = 2）", 8, 2, 13, 16, gen, t),
             _case(fn, "位置が1つだけ", 4, 2, 1, 8, gen, t),
             _case(fn, "ヘッド次元 64 の GQA（H = 8, KVH = 4, D = 64）", 8, 4, 40, 64, gen, t)]
    if ctx.get("engine") is False or not all(c.passed for c in cases):
        return cases
    name = "エンジンの Decode で使う（同梱モデル、3 プロンプトを一緒に 12 トークン）"
    inp = "LLM(decode_attention=あなたの関数)"
    base = engine_tokens(None)
    r = call(engine_tokens, fn, timeout_s=max(t, 120.0))
    if not r.ok:
        return cases + [failed_call_case(name, inp, "組み込みの Attention と同じトークン列", r)]
    same = r.value == base
    cases.append(Case(name, inp, "組み込みの Attention と同じトークン列", "同じ" if same else "違う", same,
                      "OK" if same else "エンジンの中で使うと、生成されるトークン列が変わりました"))
    return cases


GRADER = Grader(
    id="03_attention_decode", chapter=3, title_ja="Decode の Attention（GQA）",
    check=check,
    hints=["スコア = q・k ÷ √D を T 個の位置について計算し、softmax をとって v を重み付きで足します。",
           "GQA では、Query ヘッド h は KV ヘッド h // (H // KVH) の K と V を使います。",
           "k = k_cache.repeat_interleave(H // KVH, dim=1) で [T, H, D] にそろえると、einsum('hd,thd->ht') で書けます。"])
