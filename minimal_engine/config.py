"""Configuration: what the model looks like (ModelConfig) and how the engine runs it (EngineConfig).

ModelConfig is read from a Hugging Face `config.json`; EngineConfig holds the knobs a user passes to
`LLM(...)`. Both check their values when they are built, so a bad setting fails early with a message
that says what is allowed. A config.json that asks for something this engine does not compute (an MLP
bias, an activation other than SiLU) is refused with the field's name rather than loaded and run wrong;
a sliding attention window is kept in `sliding_window` and LLM refuses a max_model_len beyond it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from minimal_engine.calculators.flops import attention_weight_count, mlp_weight_count
from minimal_engine.calculators.kv import kv_bytes_per_token_gqa

# 講座が同梱する小さな日本語モデル（model を指定しないときに使う）
DEFAULT_MODEL = Path(__file__).parent / "default_model"

# config.json の "architectures" -> このエンジンでの変種名
SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}


def check_supported(cfg: dict) -> None:
    """Refuse config.json fields whose values this engine does not implement (it would compute other tokens)."""
    act = cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))
    if act not in ("silu", "swish"):
        raise ValueError(f"config.json: hidden_act={act!r} is not supported: this engine's MLP is SwiGLU (SiLU) only")
    if cfg.get("mlp_bias"):
        raise ValueError("config.json: mlp_bias=true is not supported: this engine's MLP has no bias terms")


def active_sliding_window(cfg: dict) -> int | None:
    """The attention window if any layer uses one (Mistral's sliding_window; Qwen2/3 when use_sliding_window
    and a layer is at or beyond max_window_layers; any 'sliding_attention' in layer_types), else None."""
    window = cfg.get("sliding_window")
    if not window:
        return None
    if "sliding_attention" in (cfg.get("layer_types") or []):
        return window
    if "use_sliding_window" in cfg:          # Qwen2 / Qwen3: off unless asked for
        layers = cfg.get("num_hidden_layers", 0)
        return window if cfg["use_sliding_window"] and cfg.get("max_window_layers", 0) < layers else None
    if cfg.get("layer_types"):               # every layer listed as full attention
        return None
    return window                            # Mistral: sliding_window set means every layer slides


def generation_eos(path: Path) -> list[int]:
    """Extra EOS ids from generation_config.json (as vLLM reads them): e.g. Llama 3 Instruct's <|eot_id|>."""
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


@dataclass
class ModelConfig:
    """The shape of a Llama-family model, parsed from config.json."""

    variant: str                      # "llama" | "qwen2" | "qwen3"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int                    # query heads
    num_kv_heads: int                 # key/value heads (GQA: fewer than query heads)
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # e.g. Llama 3.x {"rope_type": "llama3", ...}
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False      # Qwen2: bias on q/k/v projections
    qk_norm: bool = False             # Qwen3: RMSNorm on each head of q and k
    eos_token_ids: list[int] = field(default_factory=list)
    bos_token_id: int | None = None
    torch_dtype: str | None = None
    synthetic: bool = False           # random weights of a named shape (synthetic.py): no EOS token
    sliding_window: int | None = None  # an active sliding attention window (Mistral, Qwen2 with use_sliding_window)

    @classmethod
    def from_dict(cls, cfg: dict) -> "ModelConfig":
        archs = cfg.get("architectures") or []
        arch = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
        if arch is None:
            raise ValueError(
                f"unsupported architecture {archs or cfg.get('model_type')!r}: this engine runs "
                f"{', '.join(sorted(SUPPORTED_ARCHITECTURES))}")
        variant = SUPPORTED_ARCHITECTURES[arch]
        check_supported(cfg)
        num_heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // num_heads
        eos = cfg.get("eos_token_id")
        eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        rope_scaling = cfg.get("rope_scaling")
        rope_theta = cfg.get("rope_theta")
        rope_params = cfg.get("rope_parameters")  # transformers 5.x writes this instead
        if isinstance(rope_params, dict):
            rope_theta = rope_theta or rope_params.get("rope_theta")
            if rope_params.get("rope_type", "default") != "default":
                rope_scaling = rope_scaling or rope_params
        if rope_scaling is not None and rope_scaling.get("rope_type", rope_scaling.get("type")) in (None, "default"):
            rope_scaling = None
        return cls(
            variant=variant,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=cfg.get("num_key_value_heads") or num_heads,
            head_dim=head_dim,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope_theta or 10000.0),
            rope_scaling=rope_scaling,
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            attention_bias=cfg.get("attention_bias", variant == "qwen2"),
            qk_norm=variant == "qwen3",
            eos_token_ids=eos,
            bos_token_id=cfg.get("bos_token_id"),
            torch_dtype=cfg.get("dtype") or cfg.get("torch_dtype"),
            sliding_window=active_sliding_window(cfg),
        )

    @classmethod
    def from_folder(cls, path: str | Path) -> "ModelConfig":
        path = Path(path)
        cfg_file = path / "config.json"
        if not cfg_file.is_file():
            raise FileNotFoundError(
                f"{path} has no config.json: a model folder must be in Hugging Face format "
                "(config.json, *.safetensors, tokenizer files)")
        try:
            cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{cfg_file} is not valid JSON: {e}") from None
        mc = cls.from_dict(cfg)
        mc.eos_token_ids = mc.eos_token_ids + [t for t in generation_eos(path) if t not in mc.eos_token_ids]
        return mc

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K and V for every layer: 2 x layers x kv_heads x head_dim x bytes (``calculators.kv``'s formula)."""
        return kv_bytes_per_token_gqa(self.num_layers, self.num_kv_heads, self.head_dim, dtype_bytes)


def weight_counts(cfg: ModelConfig) -> dict:
    """Parameter counts: linear weights of the layers, norms, embedding table and lm_head (``calculators.flops``'s
    formulas; ``bench.roofline.step_cost`` and ``model.synthetic`` use them)."""
    attn = attention_weight_count(cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
    mlp = mlp_weight_count(cfg.hidden_size, cfg.intermediate_size)
    return {"layers": cfg.num_layers * (attn + mlp), "norms": (2 * cfg.num_layers + 1) * cfg.hidden_size,
            "embedding": cfg.vocab_size * cfg.hidden_size, "lm_head": cfg.vocab_size * cfg.hidden_size}


# The option vocabulary: what LLM(quantization=..., kv_cache_dtype=...) accepts (features/quantization.py and
# engine/kv_cache.py implement them).
QUANTIZATION_METHODS = (None, "int8")
KV_CACHE_DTYPES = ("auto", "fp8", "int8")


def check_quantization(value) -> None:
    if value not in QUANTIZATION_METHODS:
        raise ValueError(f"quantization must be None (no quantization) or 'int8' (weight-only INT8, per output "
                         f"channel), got {value!r}")


def check_kv_cache_dtype(value) -> None:
    if value not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype must be 'auto' (the model dtype), 'fp8' (float8 e4m3 with a scale per "
                         f"KV head) or 'int8' (int8 with a scale per KV head), got {value!r}")


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs: KV pool size, batch limits, context length. Frozen: an engine's settings are
    fixed when it is built (a different setting is a new engine, `dataclasses.replace(config, ...)`)."""

    block_size: int = 16              # tokens per KV block
    num_kv_blocks: int | None = None  # None: sized from kv_cache_memory
    kv_cache_memory: int | None = None  # bytes for the KV pool when num_kv_blocks is None
    max_num_seqs: int = 64            # at most this many requests in one step
    max_num_batched_tokens: int = 2048  # at most this many tokens (prefill + decode) in one step
    max_model_len: int | None = None  # prompt + output limit; None: the model's max positions
    cuda_graphs: bool | None = None   # decode steps as CUDA graphs; None: on for CUDA, off elsewhere (cuda_graphs.py)
    enable_prefix_caching: bool = False  # reuse cached KV blocks of equal prompt prefixes (prefix_cache.py)
    batching: str = "continuous"      # "continuous" | "static" (groups of max_num_seqs run to completion)
    quantization: str | None = None   # None | "int8": weight-only INT8 per output channel (quantization.py)
    kv_cache_dtype: str = "auto"      # "auto" (model dtype) | "fp8" | "int8": one byte per KV value (engine/kv_cache.py)
    attention_backend: str | None = None  # decode rows: "paged" | "gathered"; None: by device (model_runner.py)

    def __post_init__(self):
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.num_kv_blocks is not None and (not isinstance(self.num_kv_blocks, int) or self.num_kv_blocks < 1):
            raise ValueError(f"num_kv_blocks must be a positive integer or None, got {self.num_kv_blocks!r}")
        if self.max_model_len is not None and (not isinstance(self.max_model_len, int) or self.max_model_len < 2):
            raise ValueError(f"max_model_len must be an integer >= 2 or None, got {self.max_model_len!r}")
        if self.cuda_graphs not in (None, True, False):
            raise ValueError(f"cuda_graphs must be None (auto), True or False, got {self.cuda_graphs!r}")
        if not isinstance(self.enable_prefix_caching, bool):
            raise ValueError(f"enable_prefix_caching must be True or False, got {self.enable_prefix_caching!r}")
        if self.batching not in ("continuous", "static"):
            raise ValueError(f"batching must be 'continuous' or 'static', got {self.batching!r}")
        check_quantization(self.quantization)
        check_kv_cache_dtype(self.kv_cache_dtype)
        if self.attention_backend not in (None, "paged", "gathered"):
            raise ValueError(f"attention_backend must be None (by device), 'paged' (block tables read in place) "
                             f"or 'gathered' (contexts copied out in groups), got {self.attention_backend!r}")
