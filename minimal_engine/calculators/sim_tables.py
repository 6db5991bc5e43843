"""The simulator's tables: model shapes by hyphenated name, GPU datasheets with FP8/FP4 rates and links.

Chapter 10's ``minimal_engine.calculators.simulator`` reads these; the shapes and GPU rows that chapters 1-5 already use
stay in ``minimal_engine.calculators.datasheets`` and are reused here (not copied). Every row names its source; GPU figures are
the dense (no sparsity) per-GPU numbers of docs/published_points.md §G, which takes them from
SemiAnalysisAI/InferenceX-app ``packages/app/src/lib/gpu-specs.ts`` (HEAD 77ca49a). Plain Python (no torch).
"""
from __future__ import annotations

from dataclasses import dataclass

from minimal_engine.calculators.cost import gpu_hour_price
from minimal_engine.calculators.datasheets import GPU_SPECS, MODEL_SHAPES, GpuSpec, ModelShape, get_gpu_cost
from minimal_engine.calculators.flops import attention_weight_count, mlp_weight_count

_HF = "https://huggingface.co/{}/blob/main/config.json"


@dataclass(frozen=True)
class SimModel:
    """What the simulator needs beyond :class:`ModelShape`: the hidden size (TP all-reduce bytes),
    the vocabulary and whether the lm_head shares the embedding table (the engine computes the
    lm_head only for rows that sample; the embedding is a lookup) and, for a mixture of experts, how
    many routed experts there are and how many each token uses. ``vocab`` 0: unknown, every weight
    counts for every token."""

    shape: ModelShape
    hidden: int
    experts: int = 0          # routed experts per MoE layer (0: dense)
    top_k: int = 0            # routed experts each token uses
    vocab: int = 0            # vocab_size (config.json); 0: unknown
    tied: bool = False        # tie_word_embeddings: one table is both the embedding and the lm_head

    @property
    def name(self) -> str:
        return self.shape.name

    @property
    def lm_head_params(self) -> int:
        """Weights of the lm_head (vocab x hidden): multiplied only for the rows that sample."""
        return self.vocab * self.hidden

    @property
    def embedding_params(self) -> int:
        """Weights of a separate embedding table (0 when tied): looked up, not multiplied."""
        return 0 if self.tied else self.vocab * self.hidden


def _dense(name, layers, heads, kv_heads, head_dim, params, hidden, repo, vocab):
    shape = ModelShape(name, layers, heads, kv_heads, head_dim, params, _HF.format(repo))
    return SimModel(shape, hidden, vocab=vocab)


# Shapes from each model's config.json (num_hidden_layers, num_attention_heads, num_key_value_heads,
# head_dim, hidden_size, vocab_size, tie_word_embeddings: only Qwen3-0.6B ties); params from the
# model card (Llama 3.1 405B: 405B; Qwen3: "Number of Parameters").
SIM_MODELS = {
    "llama-2-7b": SimModel(MODEL_SHAPES["Llama 2 7B"], 4096, vocab=32000),
    "llama-2-70b": _dense("Llama 2 70B", 80, 64, 8, 128, 68.98e9, 8192, "meta-llama/Llama-2-70b-hf",
                          32000),
    "llama-3.1-8b": SimModel(MODEL_SHAPES["Llama 3.1 8B"], 4096, vocab=128256),
    "llama-3.1-70b": _dense("Llama 3.1 70B", 80, 64, 8, 128, 70.6e9, 8192, "meta-llama/Llama-3.1-70B",
                            128256),
    "llama-3.1-405b": _dense("Llama 3.1 405B", 126, 128, 8, 128, 405.9e9, 16384,
                             "meta-llama/Llama-3.1-405B", 128256),
    "llama-3.3-70b": SimModel(MODEL_SHAPES["Llama 3.3 70B"], 8192, vocab=128256),
    "qwen3-0.6b": SimModel(MODEL_SHAPES["Qwen3-0.6B"], 1024, vocab=151936, tied=True),
    "qwen3-8b": _dense("Qwen3-8B", 36, 32, 8, 128, 8.2e9, 4096, "Qwen/Qwen3-8B", 151936),
    "qwen3-32b": _dense("Qwen3-32B", 64, 64, 8, 128, 32.8e9, 5120, "Qwen/Qwen3-32B", 151936),
    # MoE + MLA: n_routed_experts 256, num_experts_per_tok 8, hidden 7168 (config.json); 671B total, 37B active.
    "deepseek-r1": SimModel(MODEL_SHAPES["DeepSeek R1"], 7168, experts=256, top_k=8, vocab=129280),
}


@dataclass(frozen=True)
class SimGpu:
    """A GPU for the simulator: the datasheet row (memory, HBM, dense BF16) plus dense FP8/FP4 TFLOPS,
    the scale-up link (GB/s per GPU, one direction) and the board power (W). None: not supported/unknown."""

    spec: GpuSpec
    fp8_tflops: float | None
    fp4_tflops: float | None
    link_gb_s: float
    tgp_w: float | None
    note: str = ""

    @property
    def name(self) -> str:
        return self.spec.name


_G = "published_points.md §G (InferenceX-app gpu-specs.ts, dense)"
# MI325X is not in specs.GPU_SPECS (chapters 1-5 do not use it): its row lives here.
MI325X = GpuSpec("MI325X", 256, 6.0, "AMD Instinct MI325X (" + _G + ")", bf16_tflops=1307, flops_source=_G)

SIM_GPUS = {g.name: g for g in [
    SimGpu(GPU_SPECS["A100"], None, None, 300, 400, "no FP8 tensor cores: FP8/FP4 run at the BF16 rate"),
    SimGpu(GPU_SPECS["H100"], 1979, None, 450, 700),
    SimGpu(GPU_SPECS["H200"], 1979, None, 450, 700),
    SimGpu(GPU_SPECS["B200"], 4500, 9000, 900, 1000),
    SimGpu(GPU_SPECS["GB200"], 5000, 10000, 900, 1200, "NVL72: 72-GPU NVLink domain"),
    SimGpu(GPU_SPECS["MI300X"], 2615, None, 448, 750),
    SimGpu(MI325X, 2615, None, 448, 1000, "power from a secondary source (truncated 'TDP 1,0...')"),
    SimGpu(GPU_SPECS["MI355X"], 5033, 10066, 537.6, 1400,
           "link: gpu-specs.ts says 576 GB/s, docs/gpu-specs.md 7 x 76.8 = 537.6 (inconsistent; the lower used)"),
]}

# InferenceX's hyperscaler $/GPU-hr and all-in kW (published_points.md §F, constants.ts); specs.GPU_COSTS
# has the others, MI325X is added here. A100 has no InferenceX price: pass your own.
EXTRA_COSTS = {"MI325X": (1.28, 2.18)}


def inferencex_cost_inputs(gpu: str, tier: str = "hyperscaler") -> dict:
    """InferenceX's $/GPU-hr and all-in kW for a GPU name, as ``simulate``'s cost keyword arguments."""
    if gpu in EXTRA_COSTS and tier == "hyperscaler":
        usd, kw = EXTRA_COSTS[gpu]
        return {"usd_per_gpu_hour": usd, "kw_per_gpu": kw}
    return {"usd_per_gpu_hour": gpu_hour_price(gpu, tier), "kw_per_gpu": get_gpu_cost(gpu).all_in_kw}


def model_from_hf_config(config, name: str | None = None) -> SimModel:
    """A :class:`SimModel` from a Hugging Face ``config.json`` (a dict, a path to the file or to its folder).

    Parameters are counted from the shapes (attention, MLP or experts, embeddings, an untied lm_head;
    norms and biases left out): Llama, Qwen, Mistral-style configs, MoE configs (``num_experts`` /
    ``n_routed_experts`` / ``num_local_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``,
    DeepSeek's shared experts and first dense layers) and MLA (``kv_lora_rank``).
    """
    import json
    import os
    if isinstance(config, (str, os.PathLike)):
        path = os.path.join(config, "config.json") if os.path.isdir(config) else config
        if not os.path.isfile(path):
            raise ValueError(f"no HF config at {str(config)!r}: pass a config.json, its folder or a dict")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    if not isinstance(config, dict):
        raise ValueError(f"an HF config must be a dict or a path, got {type(config).__name__}")
    c = config.get("text_config", config)          # multimodal configs keep the LM under text_config
    try:
        L, h, heads = int(c["num_hidden_layers"]), int(c["hidden_size"]), int(c["num_attention_heads"])
        inter, vocab = int(c.get("intermediate_size") or 4 * h), int(c["vocab_size"])
    except KeyError as e:
        raise ValueError(f"HF config lacks {e.args[0]!r} (needs num_hidden_layers, hidden_size, "
                         "num_attention_heads, vocab_size)") from None
    kv = int(c.get("num_key_value_heads") or heads)
    hd = int(c.get("head_dim") or h // heads)
    experts = int(c.get("n_routed_experts") or c.get("num_experts") or c.get("num_local_experts") or 0)
    top_k = int(c.get("num_experts_per_tok") or 0) if experts else 0
    mla = {k: c.get(k) for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")}
    if mla["kv_lora_rank"]:
        rope, nope, v = int(mla["qk_rope_head_dim"]), int(mla["qk_nope_head_dim"]), int(mla["v_head_dim"])
        ql = int(c.get("q_lora_rank") or 0)
        q = h * ql + ql * heads * (nope + rope) if ql else h * heads * (nope + rope)
        attn = q + h * (mla["kv_lora_rank"] + rope) + mla["kv_lora_rank"] * heads * (nope + v) + heads * v * h
        kv, hd = heads, v
    else:
        attn = attention_weight_count(h, heads, kv, hd)
        mla = {}
    mlp = mlp_weight_count(h, inter)
    moe_layers = L - int(c.get("first_k_dense_replace") or 0) if experts else 0
    moe_inter = int(c.get("moe_intermediate_size") or inter)
    shared = int(c.get("n_shared_experts") or 0)
    moe_all = (experts + shared) * mlp_weight_count(h, moe_inter) + h * experts
    moe_active = (top_k + shared) * mlp_weight_count(h, moe_inter) + h * experts
    embed = vocab * h * (1 if c.get("tie_word_embeddings", False) else 2)
    params = L * attn + (L - moe_layers) * mlp + moe_layers * moe_all + embed
    active = L * attn + (L - moe_layers) * mlp + moe_layers * moe_active + embed
    label = name or config.get("_name_or_path") or config.get("model_type") or "hf-config"
    shape = ModelShape(str(label), L, heads, kv, hd, float(params), "HF config.json",
                       active_params=float(active) if experts else None, **mla)
    return SimModel(shape, h, experts, top_k, vocab, bool(c.get("tie_word_embeddings", False)))
