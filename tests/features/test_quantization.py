"""Chapter 6: weight-only INT8 (quantization.py), a one-byte KV pool (engine/kv_cache.py) and the quality measure
(evaluate.py).

What is asserted, honestly: quantization changes numbers, so tokens may change. INT8 weights and the one-byte KV
formats are checked against error bounds that follow from their scales; greedy tokens with each setting are
checked to agree with bf16 at a high rate on the default model (not to be identical); the KV pool doubles its
blocks; nothing leaks; prefix caching still reuses (quantized) blocks; quality numbers come out ordered sensibly.
"""
import pytest
import torch
from torch import nn

from minimal_engine import LLM, SamplingParams
from minimal_engine.engine.kv_cache import QMAX, QuantizedKVPool, dequantize_kv, quantize_kv
from minimal_engine.features.quantization import (INT8PACK_MAX_ROWS, Int8Linear, int8pack_supported, quantize_int8,
                                         quantize_model, weight_bytes)

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
PROMPTS = ["吾輩は猫である。", "山路を登りながら、こう考えた。", "東京の空は", "むかしむかし、ある村に"]


def test_int8_weights_error_is_bounded_by_half_a_step():
    torch.manual_seed(0)
    w = torch.randn(96, 80) * torch.linspace(0.01, 3, 96)[:, None]     # output channels of very different sizes
    w_q, scale = quantize_int8(w)
    assert w_q.dtype == torch.int8 and w_q.abs().max() <= 127 and scale.shape == (96,)
    assert torch.equal(w_q.abs().amax(1), torch.full((96,), 127, dtype=torch.int8))  # each row uses its full range
    err = (w_q.float() * scale[:, None] - w).abs()
    assert (err <= scale[:, None] / 2 + 1e-6).all()                      # rounding: at most half a step per weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_linear_close_to_float_and_int8pack_equals_fallback(dtype):
    torch.manual_seed(1)
    lin = nn.Linear(64, 48, bias=True).to(dtype)
    x = torch.randn(5, 7, 64, dtype=dtype)
    fallback = Int8Linear(lin, use_int8pack=False)
    y_ref = lin(x).float()
    y_fb = fallback(x).float()
    # |x . (W - W_q s)| <= sum_k |x_k| * s_n / 2 for each output n (plus the dtype's own rounding)
    bound = x.float().abs().sum(-1, keepdim=True) * fallback.scales.float() / 2
    tol = 1e-4 if dtype == torch.float32 else 0.05 * y_ref.abs().max().item()
    assert ((y_fb - y_ref).abs() <= bound + tol).all()
    assert y_fb.shape == (5, 7, 48)
    if int8pack_supported(torch.device("cpu"), dtype):
        packed = Int8Linear(lin, use_int8pack=True)
        assert packed.use_int8pack and Int8Linear(lin).use_int8pack      # the CPU default uses the kernel
        assert x.reshape(-1, 64).shape[0] > INT8PACK_MAX_ROWS             # 35 rows: the dequantize path
        y_pk = torch.stack([packed(r).float() for r in x])               # 7 rows each: the int8 kernel
        assert torch.allclose(y_pk, y_fb, rtol=1e-2 if dtype == torch.bfloat16 else 1e-5,
                              atol=0.02 if dtype == torch.bfloat16 else 1e-5)


def test_quantize_model_replaces_every_linear_and_shrinks_the_weights():
    net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
    before = weight_bytes(net)["linear"]
    quantize_model(net, "int8")
    assert not any(isinstance(m, nn.Linear) for m in net.modules())
    after = weight_bytes(net)["linear"]
    assert after == 32 * 64 + 64 * 16 + 4 * (64 + 16)                 # int8 weights + float32 scales
    assert before == 4 * (32 * 64 + 64 * 16)


def test_bad_values_are_refused():
    with pytest.raises(ValueError, match="quantization must be None .* 'int8'"):
        LLM(quantization="int4")
    with pytest.raises(ValueError, match="kv_cache_dtype must be 'auto'.*'fp8'.*'int8'"):
        LLM(kv_cache_dtype="fp16")
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        LLM(kv_cache_dtype=None)


@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_kv_round_trip_error_bound(kind):
    torch.manual_seed(2)
    x = torch.randn(4, 40, 64) * torch.tensor([0.5, 1.0, 2.0, 4.0])[:, None, None]      # [KVH, T, Dh]
    scale = x.abs().amax(dim=(1, 2)) * 1.5 / QMAX[kind]                                  # [KVH], as calibrated
    q = quantize_kv(x, scale[:, None, None], kind)
    assert q.element_size() == 1
    y = dequantize_kv(q, scale[:, None, None], kind, torch.float32)
    s = scale[:, None, None]
    if kind == "int8":
        bound = s / 2                                     # uniform steps of one scale
    else:                                                 # e4m3: 3 mantissa bits -> half a step is 2^-4 relative
        bound = torch.maximum(x.abs() * 2.0 ** -4, s * 2.0 ** -10)
    assert ((y - x).abs() <= bound + 1e-6).all()


def test_quantized_pool_reads_blocks_like_the_plain_pool():
    from minimal_engine.model.attention import gather_blocks
    torch.manual_seed(3)
    kvh, blocks, bs, dh = 2, 6, 4, 8
    plain = torch.zeros(kvh, blocks * bs, dh)
    pool = QuantizedKVPool(kvh, blocks * bs, dh, "int8", torch.float32, "cpu")
    pool.scale = torch.tensor([0.01, 0.02])
    slots = torch.tensor([5, 6, 13, 20])
    src = torch.randn(kvh, 4, dh) * 0.5
    plain.index_copy_(1, slots, src)
    pool.index_copy_(1, slots, src)
    tables = torch.tensor([[1, 3], [1, 5]])                        # two requests' blocks, each for both heads
    got, want = gather_blocks(pool, tables, bs), gather_blocks(plain, tables, bs)
    assert got.shape == want.shape == (2 * kvh * 2 * bs, dh)
    assert torch.allclose(got, want, atol=0.02 / 2 + 1e-6)
    assert torch.equal(pool.dequantized()[:, slots], dequantize_kv(pool.data[:, slots], pool.scale[:, None, None],
                                                                   "int8", torch.float32))


@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_one_byte_kv_doubles_the_blocks_for_the_same_memory(kind):
    per_block_bf16 = 2 * 6 * 5 * 64 * 2 * 16                        # K+V x layers x KV heads x Dh x 2 bytes x 16
    mem = per_block_bf16 * 40
    bf16 = LLM(dtype="bfloat16", kv_cache_memory=mem)
    one = LLM(dtype="bfloat16", kv_cache_memory=mem, kv_cache_dtype=kind)
    assert bf16.engine.runner.num_blocks == 40 and one.engine.runner.num_blocks == 80
    per_block = [r.kv_cache_bytes / (r.num_blocks + 1) for r in (bf16.engine.runner, one.engine.runner)]  # + scratch
    assert per_block == [per_block_bf16, per_block_bf16 / 2]            # one byte per value: half the bytes per block
    k0 = one.engine.runner.kv_caches[0][0]
    assert isinstance(k0, QuantizedKVPool) and k0.data.element_size() == 1
    assert (k0.scale > 0).all() and k0.scale.shape == (5,)           # calibrated, one scale per KV head


@pytest.fixture(scope="module")
def bf16_tokens():
    llm = LLM(dtype="bfloat16", kv_cache_memory=1 << 24)
    return [o.token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]


def agreement(a, b):
    return sum(x == y for ta, tb in zip(a, b) for x, y in zip(ta, tb)) / sum(map(len, a))


@pytest.mark.parametrize("kw", [dict(quantization="int8"), dict(kv_cache_dtype="fp8"), dict(kv_cache_dtype="int8"),
                                dict(quantization="int8", kv_cache_dtype="int8")])
def test_greedy_tokens_mostly_agree_with_bf16_and_no_block_leaks(bf16_tokens, kw):
    """Quantization may change a token (and then the rest of that output follows another path), so this asserts a
    high position-wise agreement over 4 x 24 greedy tokens, not identity; and that every KV block comes back."""
    llm = LLM(dtype="bfloat16", kv_cache_memory=1 << 24, max_num_batched_tokens=8, **kw)  # chunked prefill reads the pool
    toks = [o.token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]
    assert all(len(t) == 24 for t in toks)
    assert agreement(toks, bf16_tokens) >= 0.75, (kw, toks, bf16_tokens)
    assert sum(t[:4] == b[:4] for t, b in zip(toks, bf16_tokens)) >= 3       # the first tokens: nearly always equal
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks


def test_kv_is_really_stored_in_one_byte_and_read_back():
    """The pool holds the quantized bytes of what attention wrote: dequantized, they are close to the K/V of a
    bf16 run of the same prompt (so the quantized path is the one being used, not a silent float copy)."""
    ref = LLM(dtype="float32", kv_cache_memory=1 << 22)
    q8 = LLM(dtype="float32", kv_cache_memory=1 << 22, kv_cache_dtype="int8")
    sp = SamplingParams(temperature=0, max_tokens=1)
    ref.generate(["吾輩は猫である。名前はまだ無い。"], sp, use_tqdm=False)
    q8.generate(["吾輩は猫である。名前はまだ無い。"], sp, use_tqdm=False)
    k_ref = ref.engine.runner.kv_caches[2][0][:, :8]                  # layer 2, K, the first 8 slots (block 0, 1)
    pool = q8.engine.runner.kv_caches[2][0]
    k_q = pool.dequantized()[:, :8]
    step = pool.scale[:, None, None]
    assert pool.data.dtype == torch.int8 and (pool.data[:, :8] != 0).any()
    assert ((k_q - k_ref).abs() <= step / 2 + 1e-4).all()


@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_prefix_caching_with_quantized_kv(kind):
    """A second prompt sharing a prefix reuses the cached (quantized) blocks, and gives the same tokens as
    when it runs without the prefix cache on the same KV format (the cached bytes are the same bytes)."""
    base = "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。何でも薄暗いじめじめした所で"
    prompts = [base + "ニャーニャー泣いていた", base + "事だけは記憶している"]
    on = LLM(dtype="bfloat16", kv_cache_memory=1 << 23, kv_cache_dtype=kind, enable_prefix_caching=True)
    off = LLM(dtype="bfloat16", kv_cache_memory=1 << 23, kv_cache_dtype=kind)
    on.generate(prompts[:1], GREEDY, use_tqdm=False)
    with_cache = on.generate(prompts[1:], GREEDY, use_tqdm=False)[0].token_ids
    assert on.engine.block_manager.prefix_cache_stats()["hits"] > 0
    without = off.generate(prompts[1:], GREEDY, use_tqdm=False)[0].token_ids
    assert agreement([with_cache], [without]) >= 0.75
    assert with_cache[:4] == without[:4]
    bm = on.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks


def test_evaluation_numbers_are_computed_and_ordered_sensibly():
    from minimal_engine.tools.evaluate import evaluate_settings, heldout_texts
    texts = heldout_texts(700)
    assert sum(map(len, texts)) == 700
    rows = evaluate_settings([dict(dtype="float32"), dict(dtype="bfloat16"), dict(dtype="bfloat16", quantization="int8"),
                              dict(dtype="bfloat16", kv_cache_dtype="fp8"), dict(dtype="bfloat16", kv_cache_dtype="int8")],
                             texts=texts)
    f32, bf16, w8, kv8, kvi8 = rows
    assert f32["top1_agreement"] == 1.0 and f32["reference"] == "float32"
    assert all(r["tokens"] == f32["tokens"] > 300 for r in rows)
    assert 2.0 < f32["nats_per_char"] < 4.5                          # the model card reports ~2.9 on all held-out works
    for r in rows[1:]:
        assert abs(r["nats_per_char"] - f32["nats_per_char"]) < 0.05, r   # a small change, not a broken model
        assert r["top1_agreement"] >= 0.9, r
    assert w8["weight_bytes"] < bf16["weight_bytes"] < f32["weight_bytes"]


def test_evaluation_matches_the_training_scripts_measure():
    """The engine path gives the same nats/char as train.model_nats_per_char (transformers, float32 here) on the
    same text and windows: the evaluation is the training script's measure, computed through the engine."""
    import numpy as np
    from transformers import AutoModelForCausalLM

    from minimal_engine.tools import train
    from minimal_engine.tools.evaluate import evaluate_settings, heldout_texts
    from minimal_engine.llm import DEFAULT_MODEL
    texts = heldout_texts(400)
    row = evaluate_settings([dict(dtype="float32")], texts=texts, window=128)[0]
    hf = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, dtype=torch.float32)
    from tokenizers import Tokenizer
    ids, mask = train.encode_stream(Tokenizer.from_file(str(DEFAULT_MODEL / "tokenizer.json")), texts)
    ref = train.model_nats_per_char(hf, ids, mask, sum(map(len, texts)), seq_len=128)   # bf16 autocast inside
    assert isinstance(ids, np.ndarray)
    assert abs(row["nats_per_char"] - ref) < 0.02, (row["nats_per_char"], ref)
