"""Parameter counts of a ModelConfig, from calculators.flops's formulas: bench.roofline.step_cost,
lesson 3 and model.synthetic use them (no engine step does)."""
from __future__ import annotations

from minimal_engine.calculators.flops import attention_weight_count, mlp_weight_count
from minimal_engine.config import ModelConfig


def weight_counts(cfg: ModelConfig) -> dict:
    """Parameter counts: linear weights of the layers, norms, embedding table and lm_head
    (calculators.flops's formulas; bench.roofline.step_cost and model.synthetic use them)."""
    attn = attention_weight_count(cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
    mlp = mlp_weight_count(cfg.hidden_size, cfg.intermediate_size)
    embedding = cfg.vocab_size * cfg.hidden_size
    norms = (2 * cfg.num_layers + 1) * cfg.hidden_size
    return {"layers": cfg.num_layers * (attn + mlp), "norms": norms, "embedding": embedding,
            "lm_head": embedding}
