"""Reading a Hugging Face `config.json` into ModelConfig's fields (config.py); read after the core
path.

A config.json that asks for something this engine does not compute (an architecture it does
not know, an MLP bias, an activation other than SiLU) is refused with the field's name rather than
loaded and run wrong. A sliding attention window is kept in
`sliding_window`, and LLM refuses a max_model_len beyond it. Extra EOS ids come from
generation_config.json, as vLLM reads them (e.g. Llama 3 Instruct's <|eot_id|>).
"""
from __future__ import annotations

import json
from pathlib import Path

# config.json の "architectures" -> このエンジンでの変種名
SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}


def check_supported(cfg: dict) -> None:
    """Refuse fields whose values this engine does not implement (it would compute other tokens)."""
    act = cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))
    if act not in ("silu", "swish"):
        raise ValueError(f"config.json: hidden_act={act!r} is not supported: this engine's MLP is "
                         "SwiGLU (SiLU) only")
    if cfg.get("mlp_bias"):
        raise ValueError("config.json: mlp_bias=true is not supported: this engine's MLP has no "
                         "bias terms")


def active_sliding_window(cfg: dict) -> int | None:
    """The attention window if any layer uses one (Mistral's sliding_window; Qwen2/3 when
    use_sliding_window and a layer is at or beyond max_window_layers; any 'sliding_attention' in
    layer_types), else None."""
    window = cfg.get("sliding_window")
    if not window:
        return None
    if "sliding_attention" in (cfg.get("layer_types") or []):
        return window
    if "use_sliding_window" in cfg:          # Qwen2 / Qwen3: off unless asked for
        layers = cfg.get("num_hidden_layers", 0)
        used = cfg["use_sliding_window"] and cfg.get("max_window_layers", 0) < layers
        return window if used else None
    if cfg.get("layer_types"):               # every layer listed as full attention
        return None
    return window                            # Mistral: sliding_window set means every layer slides


def rope_fields(cfg: dict) -> tuple[float, dict | None]:
    """(rope_theta, rope_scaling or None for plain RoPE); transformers 5.x writes
    rope_parameters instead."""
    rope_scaling = cfg.get("rope_scaling")
    rope_theta = cfg.get("rope_theta")
    rope_params = cfg.get("rope_parameters")
    if isinstance(rope_params, dict):
        rope_theta = rope_theta or rope_params.get("rope_theta")
        if rope_params.get("rope_type", "default") != "default":
            rope_scaling = rope_scaling or rope_params
    if rope_scaling is not None and rope_scaling.get("rope_type",
                                                     rope_scaling.get("type")) in (None, "default"):
        rope_scaling = None
    return float(rope_theta or 10000.0), rope_scaling


def model_config_fields(cfg: dict) -> dict:
    """config.json's dict -> the keyword arguments of ModelConfig."""
    archs = cfg.get("architectures") or []
    arch = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
    if arch is None:
        raise ValueError(
            f"unsupported architecture {archs or cfg.get('model_type')!r}: this engine runs "
            f"{', '.join(sorted(SUPPORTED_ARCHITECTURES))}")
    variant = SUPPORTED_ARCHITECTURES[arch]
    check_supported(cfg)
    num_heads = cfg["num_attention_heads"]
    eos = cfg.get("eos_token_id")
    rope_theta, rope_scaling = rope_fields(cfg)
    return dict(
        variant=variant,
        vocab_size=cfg["vocab_size"],
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_layers=cfg["num_hidden_layers"],
        num_heads=num_heads,
        num_kv_heads=cfg.get("num_key_value_heads") or num_heads,
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // num_heads,
        rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        max_position_embeddings=cfg.get("max_position_embeddings", 2048),
        tie_word_embeddings=cfg.get("tie_word_embeddings", False),
        attention_bias=cfg.get("attention_bias", variant == "qwen2"),
        qk_norm=variant == "qwen3",
        eos_token_ids=[] if eos is None else ([eos] if isinstance(eos, int) else list(eos)),
        bos_token_id=cfg.get("bos_token_id"),
        torch_dtype=cfg.get("dtype") or cfg.get("torch_dtype"),
        sliding_window=active_sliding_window(cfg),
    )


def read_config_json(path: Path) -> dict:
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(
            f"{path} has no config.json: a model folder must be in Hugging Face format "
            "(config.json, *.safetensors, tokenizer files)")
    try:
        return json.loads(cfg_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{cfg_file} is not valid JSON: {e}") from None


def generation_eos(path: Path) -> list[int]:
    """Extra EOS ids from generation_config.json (as vLLM reads them)."""
    f = path / "generation_config.json"
    if not f.is_file():
        return []
    try:
        eos = json.loads(f.read_text(encoding="utf-8")).get("eos_token_id")
    except (json.JSONDecodeError, AttributeError):
        raise ValueError(f"{f} is not a valid JSON object") from None
    eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in eos):
        raise ValueError(f"{f}: eos_token_id must be an integer or a list of integers, got {eos!r}")
    return eos
