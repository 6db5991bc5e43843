"""The simulator's step counts what the engine computes: the layers for every token, the lm_head
only for the rows that sample (each decode, a prompt once at the end of its last chunk), no FLOPs
for the embedding lookup."""
import json
from pathlib import Path

import pytest

from minimal_engine.calculators.sim_step import get_hardware, get_sim_model, step_time_s
from minimal_engine.calculators.simulator import simulate_batch

MODEL_DIR = Path(__file__).resolve().parents[2] / "minimal_engine" / "default_model"
FLOPS = 100e9                    # a compute-only machine: t_compute x FLOPS = the step's FLOPs
SPEC = {"name": "pc", "memory_gb": 16, "flops_bf16": FLOPS, "flops_fp32": FLOPS, "bandwidth": 1e15,
        "compute_eff": 1.0, "memory_eff": 1.0, "layer_overhead_us": 0.0, "max_batched_tokens": 2048}


def _engine_shapes():
    """Layer weights and lm_head weights counted from the default model's config.json, by hand."""
    c = json.loads((MODEL_DIR / "config.json").read_text())
    h, L, hd = c["hidden_size"], c["num_hidden_layers"], c["head_dim"]
    heads, kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
    attn = h * (heads + 2 * kv_heads) * hd + heads * hd * h
    layers = L * (attn + 3 * h * c["intermediate_size"])
    return layers, c["vocab_size"] * h, c


def _attention_flops(c, tokens, context):
    per_token = 4 * c["num_hidden_layers"] * c["num_attention_heads"] * c["head_dim"]
    return per_token * int(context) * tokens


def _flops(**kw):
    m, hw = get_sim_model(MODEL_DIR), get_hardware(SPEC)
    decodes = kw.pop("decodes", 0)
    step = step_time_s(m, hw, 1, decodes, 64, weight_dtype="fp32", kv_dtype="fp32", **kw)
    return step["t_compute"] * FLOPS


def test_a_prefill_counts_the_lm_head_once_per_request():
    layers, head, c = _engine_shapes()
    attn = _attention_flops(c, 1024, (1024 + 1) / 2)
    one = _flops(prefill_tokens=1024, prompt_len=1024, prefills=1)
    assert one == pytest.approx(2 * layers * 1024 + 2 * head * 1 + attn, rel=1e-9)
    attn16 = _attention_flops(c, 1024, (64 + 1) / 2)
    sixteen = _flops(prefill_tokens=1024, prompt_len=64, prefills=16)      # 16 prompts of 64 tokens
    assert sixteen == pytest.approx(2 * layers * 1024 + 2 * head * 16 + attn16, rel=1e-9)
    assert sixteen < 2 * (layers + head) * 1024 * 0.8   # not the lm_head for all 1,024 rows


def test_a_chunk_that_does_not_end_its_prompt_samples_nothing():
    layers, head, c = _engine_shapes()
    mid = _flops(prefill_tokens=512, prompt_len=1024, prefills=1, sampled_prompts=0)
    attn = _attention_flops(c, 512, (1024 + 1) / 2)
    assert mid == pytest.approx(2 * layers * 512 + attn, rel=1e-9)
    decode = _flops(decodes=8, prefill_tokens=0, prompt_len=64)        # every decode row samples
    assert decode == pytest.approx(2 * (layers + head) * 8 + _attention_flops(c, 8, 64), rel=1e-9)


def test_simulate_batch_samples_a_long_prompt_in_its_last_chunk_only():
    m, spec = get_sim_model(MODEL_DIR), {**SPEC, "max_batched_tokens": 64}
    hw = get_hardware(spec)
    run = simulate_batch(MODEL_DIR, spec, weight_dtype="fp32", kv_dtype="fp32", input_len=100,
                         output_len=2, concurrency=1)
    ctx = 100 + 2 / 2
    first = step_time_s(m, hw, 1, 0, ctx, 64, 100, "fp32", "fp32", 1, 0)["t"]   # no sample
    last = step_time_s(m, hw, 1, 0, ctx, 36, 100, "fp32", "fp32", 1, 1)["t"]    # samples
    assert run["ttft_ms"] == pytest.approx((first + last) * 1e3, rel=1e-9)
    default = step_time_s(m, hw, 1, 0, ctx, 64, 100, "fp32", "fp32", 1)["t"]    # samples
    assert first < default


def test_untied_embedding_is_a_lookup_not_a_matmul():
    from minimal_engine.calculators.sim_tables import SIM_MODELS
    llama, qwen = SIM_MODELS["llama-3.3-70b"], SIM_MODELS["qwen3-0.6b"]
    assert llama.embedding_params == llama.lm_head_params == 128256 * 8192 and not llama.tied
    assert qwen.tied and qwen.embedding_params == 0 and qwen.lm_head_params == 151936 * 1024
    hw = get_hardware("H100")
    step = step_time_s(llama, hw, 1, 0, 0, 1, 1, "bf16", "bf16")
    flops = step["t_compute"] * hw.flops["bf16"] * hw.constants.compute_eff
    want = 2 * (llama.shape.params - llama.embedding_params) + 4 * 80 * 64 * 128   # + attention
    assert flops == pytest.approx(want, rel=1e-9)
