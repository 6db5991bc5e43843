"""Chapter 3: the tensor shapes of one decode step, from a model config, and traced from a real engine step.

    rows = decode_shapes(cfg, context_len=100)       # [(stage, shape, FLOPs), ...] for one token
    traced = trace_decode_shapes(llm, prompt_ids)    # {module name: output shape} of a real decode step
    LLAMA_31_8B                                      # Llama-3.1-8B's shape as a ModelConfig (no weights)
"""
from __future__ import annotations

from minimal_engine.config import ModelConfig

# meta-llama/Llama-3.1-8B config.json (https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json):
# layers, heads, KV heads and head_dim agree with minimal_engine.calculators.datasheets.MODEL_SHAPES["Llama 3.1 8B"] (tested).
LLAMA_31_8B = ModelConfig(variant="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                          num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5,
                          rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=False,
                          torch_dtype="bfloat16",
                          rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})


def decode_shapes(cfg: ModelConfig, context_len: int) -> list[tuple[str, str, int]]:
    """(stage, output shape, FLOPs of that stage for the whole model) for ONE new token whose context, after
    this step, holds ``context_len`` tokens. Shapes are per layer where the stage is inside a layer."""
    d, h, kvh, dh, i, n = (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size,
                           cfg.num_layers)
    g, qkv = h // kvh, (h + 2 * kvh) * dh
    return [
        ("トークン ID", "[1]", 0),
        ("埋め込み（embed_tokens）", f"[1, {d}]", 0),
        ("RMSNorm（各層の入口）", f"[1, {d}]", 0),
        ("Q/K/V 射影（qkv_proj）", f"[1, {qkv}] → Q [1, {h}, {dh}]・K, V [1, {kvh}, {dh}]", 2 * d * qkv * n),
        ("RoPE（Q と K を回転）", f"Q [1, {h}, {dh}]・K [1, {kvh}, {dh}]", 0),
        ("K, V を KV キャッシュへ書く", f"各層 K, V [{kvh}, 1, {dh}] を書く（中身は [{kvh}, {context_len}, {dh}]）", 0),
        ("Attention スコア Q·Kᵀ", f"[{kvh}, {g}, {context_len}]（= {h} ヘッド × {context_len}）", 2 * h * dh * context_len * n),
        ("スコアで V を重み付け", f"[1, {h}, {dh}] → [1, {h * dh}]", 2 * h * dh * context_len * n),
        ("出力射影（o_proj）＋残差", f"[1, {d}]", 2 * h * dh * d * n),
        ("RMSNorm → gate_up_proj", f"[1, {2 * i}]", 2 * d * 2 * i * n),
        ("SwiGLU: silu(gate) × up", f"[1, {i}]", 0),
        ("down_proj ＋残差", f"[1, {d}]", 2 * i * d * n),
        ("最後の RMSNorm", f"[1, {d}]", 0),
        ("lm_head", f"[1, {cfg.vocab_size}]", 2 * d * cfg.vocab_size),
        ("サンプリング（貪欲法なら argmax）", "[1]", 0),
    ]


TRACED = ("embed_tokens", "layers.0.input_layernorm", "layers.0.self_attn.qkv_proj", "layers.0.self_attn.o_proj",
          "layers.0.mlp.gate_up_proj", "layers.0.mlp.down_proj", "norm", "lm_head")


def trace_decode_shapes(llm, prompt_ids: list[int]) -> dict[str, list[int]]:
    """Output shapes of the modules in TRACED during the LAST step of a 2-token greedy generation of
    ``prompt_ids`` on the engine (a decode step: one token). Hooks are removed afterwards."""
    from minimal_engine import SamplingParams
    model = llm.model
    modules = dict(model.named_modules())
    seen: dict[str, list[int]] = {}
    handles = [modules[name].register_forward_hook(lambda m, a, out, name=name: seen.__setitem__(name, list(out.shape)))
               for name in TRACED]
    try:
        llm.generate([prompt_ids], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True), use_tqdm=False)
    finally:
        for hd in handles:
            hd.remove()
    return seen


__all__ = ["LLAMA_31_8B", "TRACED", "decode_shapes", "trace_decode_shapes"]
