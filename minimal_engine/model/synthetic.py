"""Randomly initialised models of real shapes, for timing without any download. One exception:
"llama-125m" is an illustrative Llama-style shape (no published model has these sizes); the other three
copy the config.json of the models named below.

    LLM("synthetic:llama-125m")      # also: smollm2-135m, qwen3-0.6b, llama-3.2-1b

The weights are random (normal, std 0.02), so THE TEXT MEANS NOTHING: only the shape (layers, heads,
hidden size, vocabulary) is real, and the shape is what decides TTFT, TPOT and memory. The tokenizer is the
course's default tokenizer; ids beyond its vocabulary wrap around (id % its size) when turned into text, so
generation and detokenization never fail. These models have no end-of-sequence token: they always produce
max_tokens tokens.
"""
from __future__ import annotations

import torch

from minimal_engine.config import ModelConfig
from minimal_engine.model.loader import build_model, resolve_dtype

# hidden, intermediate, layers, heads, kv_heads, head_dim, vocab, tied, rope_theta, extra; sources: each
# model's config.json on the Hugging Face hub (HuggingFaceTB/SmolLM2-135M, Qwen/Qwen3-0.6B, meta-llama/Llama-3.2-1B).
# llama-125m has no source: an illustrative Llama-style shape of about 125M parameters.
SHAPES = {
    "llama-125m": dict(variant="llama", hidden_size=768, intermediate_size=2048, num_layers=12, num_heads=12,
                       num_kv_heads=4, head_dim=64, vocab_size=32000, tie_word_embeddings=False,
                       rope_theta=10000.0, max_position_embeddings=2048),
    "smollm2-135m": dict(variant="llama", hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
                         num_kv_heads=3, head_dim=64, vocab_size=49152, tie_word_embeddings=True,
                         rope_theta=100000.0, max_position_embeddings=8192, rms_norm_eps=1e-5),
    "qwen3-0.6b": dict(variant="qwen3", hidden_size=1024, intermediate_size=3072, num_layers=28, num_heads=16,
                       num_kv_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True, qk_norm=True,
                       rope_theta=1000000.0, max_position_embeddings=40960),
    "llama-3.2-1b": dict(variant="llama", hidden_size=2048, intermediate_size=8192, num_layers=16, num_heads=32,
                         num_kv_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                         rope_theta=500000.0, max_position_embeddings=131072, rms_norm_eps=1e-5,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
}


def synthetic_config(name: str) -> ModelConfig:
    if name not in SHAPES:
        raise ValueError(f"unknown synthetic shape {name!r}: choose one of {', '.join(SHAPES)}")
    return ModelConfig(**SHAPES[name], torch_dtype="bfloat16", synthetic=True)


def num_parameters(cfg: ModelConfig) -> int:
    """Parameters of a model of this shape (biases aside): layers, norms, embedding, lm_head unless tied."""
    from minimal_engine.param_counts import weight_counts
    w = weight_counts(cfg)
    qk_norms = cfg.num_layers * 2 * cfg.head_dim if cfg.qk_norm else 0
    return w["layers"] + w["norms"] + qk_norms + w["embedding"] + (0 if cfg.tie_word_embeddings else w["lm_head"])


def build_synthetic(name: str, dtype, device: torch.device, seed: int = 0):
    """-> (ModelConfig, model with random weights, tokenizer, dtype)."""
    from minimal_engine.config import DEFAULT_MODEL
    from minimal_engine.model.tokenizer import Tokenizer
    cfg = synthetic_config(name)
    dtype = resolve_dtype(dtype, device, cfg)
    model = build_model(cfg, dtype, device)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.fill_(1.0)
            elif pname.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=gen)
    return cfg, model, Tokenizer(DEFAULT_MODEL, wrap_ids=True), dtype
