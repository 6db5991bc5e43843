"""Configuration: what the model looks like (ModelConfig) and how the engine runs it (EngineConfig).

ModelConfig is read from a Hugging Face `config.json` (model/hf_config.py); EngineConfig holds the
knobs a user passes to `LLM(...)`. Both check their values when they are built (checks.py), so a bad
setting fails early with a message that says what is allowed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from minimal_engine.calculators.kv import kv_bytes_per_token_gqa
from minimal_engine.checks import check_engine_config
from minimal_engine.model.hf_config import generation_eos, model_config_fields, read_config_json

# 講座が同梱する小さな日本語モデル（model を指定しないときに使う）
DEFAULT_MODEL = Path(__file__).parent / "default_model"


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
    sliding_window: int | None = None  # an active sliding window (Mistral; Qwen2/3 if asked for)

    @classmethod
    def from_dict(cls, cfg: dict) -> ModelConfig:
        return cls(**model_config_fields(cfg))

    @classmethod
    def from_folder(cls, path: str | Path) -> ModelConfig:
        """config.json, plus the extra EOS ids of generation_config.json."""
        path = Path(path)
        fields = model_config_fields(read_config_json(path))
        eos = fields["eos_token_ids"]
        eos = eos + [t for t in generation_eos(path) if t not in eos]
        return cls(**{**fields, "eos_token_ids": eos})

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K and V for every layer: 2 x layers x kv_heads x head_dim x bytes (calculators.kv)."""
        return kv_bytes_per_token_gqa(self.num_layers, self.num_kv_heads, self.head_dim,
                                      dtype_bytes)


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs: KV pool size, batch limits, context length. Frozen: an engine's settings
    are fixed when it is built (another setting is a new engine: dataclasses.replace)."""

    block_size: int = 16              # tokens per KV block
    num_kv_blocks: int | None = None  # None: sized from kv_cache_memory
    kv_cache_memory: int | None = None  # bytes for the KV pool when num_kv_blocks is None
    max_num_seqs: int = 64            # at most this many requests in one step
    max_num_batched_tokens: int = 2048  # at most this many tokens (prefill + decode) in one step
    max_model_len: int | None = None  # prompt + output limit; None: the model's max positions
    cuda_graphs: bool | None = None   # decode steps as CUDA graphs; None: on for CUDA only
    enable_prefix_caching: bool = False  # reuse KV blocks of equal prompt prefixes
    batching: str = "continuous"      # or "static": groups of max_num_seqs run to completion
    quantization: str | None = None   # None | "int8": weight-only INT8 (features/quantization.py)
    kv_cache_dtype: str = "auto"      # "auto" (model dtype) | "fp8" | "int8" (engine/kv_cache.py)
    attention_backend: str | None = None  # decode: "paged" | "gathered"; None: by device

    def __post_init__(self):
        check_engine_config(self)
