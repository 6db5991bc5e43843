"""The published numbers the calculators use: model shapes, GPU datasheets, InferenceX's prices.

Each entry names its source. The sibling modules (kv, cost, roofline, ...) hold the formulas;
``minimal_engine.calculators`` re-exports everything here, so lessons and quizzes import only
``calculators``. Plain Python (no torch).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["DTYPE_BYTES", "GPU_COSTS", "GPU_SPECS", "INFERENCEX_MI355X_ROW", "INFERENCEX_R1_MI355X_ROW", "MODEL_SHAPES", "GpuCost", "GpuSpec",
           "ModelShape", "get_model_shape", "get_gpu_spec", "get_gpu_cost", "bytes_per_value"]

def _check_positive(value: float, what: str, allow_zero: bool = False) -> None:
    """Raise ValueError unless ``value`` is a real number > 0 (or >= 0 with allow_zero)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{what} must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{what} must be {bound}, got {value!r}")


# ----------------------------------------------------------------- tables
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5, "fp4": 0.5}


@dataclass(frozen=True)
class ModelShape:
    """The attention shape of a model: what the KV cache size depends on.

    ``kv_heads`` counts KV heads (GQA/MQA), not query heads. MLA models set
    ``kv_lora_rank`` and ``qk_rope_head_dim`` (what is cached) and
    ``qk_nope_head_dim`` / ``v_head_dim`` (what the naive MHA would cache).
    ``params`` is the approximate parameter count, for weight bytes. ``embedding_params`` is the input
    embedding table where it is not tied to lm_head: stored and counted in ``params``, but a token only
    looks up one row, so ``flops.flops_per_token`` leaves it out (0 where not given: tied or not recorded).
    """

    name: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    params: float
    source: str
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    active_params: float | None = None    # MoE: parameters one token uses (None: dense, all of them)
    embedding_params: float = 0           # an untied input embedding table (vocab x hidden): a lookup, no matmul

    def __post_init__(self):
        for field in ("layers", "heads", "kv_heads", "head_dim", "params"):
            _check_positive(getattr(self, field), field)
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None


_HF = "https://huggingface.co/{}/blob/main/config.json"
MODEL_SHAPES = {m.name: m for m in [
    ModelShape("course-125M", 12, 12, 4, 64, 124.67e6,
               "the course's ~125M benchmark shape (COURSE.md; synthetic:llama-125m): hidden 768, intermediate 2048, vocab 32000, untied lm_head",
               embedding_params=32_000 * 768),
    # embedding_params: vocab_size x hidden_size where the config.json says "tie_word_embeddings": false (2026-12-07)
    ModelShape("Llama 3.1 8B", 32, 32, 8, 128, 8.03e9, _HF.format("meta-llama/Llama-3.1-8B"),
               embedding_params=128_256 * 4_096),
    ModelShape("Llama 3.3 70B", 80, 64, 8, 128, 70.6e9,
               _HF.format("meta-llama/Llama-3.3-70B-Instruct"), embedding_params=128_256 * 8_192),
    ModelShape("Qwen3-0.6B", 28, 16, 8, 128, 0.6e9, _HF.format("Qwen/Qwen3-0.6B")),
    # MLA: kv_heads/head_dim describe the naive per-head layout (128 heads, V dim 128).
    ModelShape("DeepSeek R1", 61, 128, 128, 128, 671e9, _HF.format("deepseek-ai/DeepSeek-R1"),
               kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
               active_params=37e9),   # "671B total parameters with 37B activated for each token" (DeepSeek-V3 report)
    # params counted from the config: 32 x (4 x 4096^2 + 3 x 4096 x 11008) + 2 x 32000 x 4096 + norms = 6,738,415,616
    ModelShape("Llama 2 7B", 32, 32, 32, 128, 6_738_415_616, _HF.format("meta-llama/Llama-2-7b-hf"),
               embedding_params=32_000 * 4_096),   # untied ("tie_word_embeddings": false)
]}


@dataclass(frozen=True)
class GpuSpec:
    """HBM capacity (GB = 1e9 B), bandwidth (TB/s) and dense BF16 matmul TFLOPS (no sparsity) of one GPU."""

    name: str
    memory_gb: float
    hbm_tb_s: float
    source: str
    bf16_tflops: float | None = None
    flops_source: str = ""


# Dense BF16 TFLOPS (without sparsity), per GPU: SemiAnalysisAI/InferenceX-app packages/app/src/lib/gpu-specs.ts
# (HEAD 77ca49a; "TFLOPS are dense... without sparsity"), as gathered in docs/published_points.md §G.
_DENSE = "InferenceX-app gpu-specs.ts (dense, no sparsity)"
_X = "SemiAnalysisAI/InferenceX-app packages/app/src/lib/gpu-specs.ts @77ca49a (2026-04-03); docs/published_points.md §G"


GPU_SPECS = {g.name: g for g in [
    GpuSpec("H100", 80, 3.35, "NVIDIA H100 SXM datasheet, https://www.nvidia.com/en-us/data-center/h100/; same figures in " + _X,
            bf16_tflops=989, flops_source=_DENSE),
    GpuSpec("H200", 141, 4.8, "NVIDIA H200 SXM datasheet, https://www.nvidia.com/en-us/data-center/h200/; same figures in " + _X,
            bf16_tflops=989, flops_source=_DENSE),
    GpuSpec("B200", 180, 8.0, "NVIDIA DGX B200 datasheet: 1,440 GB and 64 TB/s for 8 GPUs "
            "(GTC 2024 announced 192 GB; drivers report 7.68 TB/s peak); per-GPU figures in " + _X,
            bf16_tflops=2250, flops_source=_DENSE),
    GpuSpec("GB200", 186, 8.0, "NVIDIA GB200 NVL72: 13.4 TB HBM3e and 576 TB/s for 72 GPUs; 186 GB in the MLPerf v5.1 system JSON "
            "(mlcommons inference_results_v5.1 closed/NVIDIA/systems/GB200-*.json); " + _X,
            bf16_tflops=2500, flops_source=_DENSE),
    GpuSpec("MI300X", 192, 5.3, "AMD Instinct MI300X datasheet (amd.com; page URL not recorded); " + _X,
            bf16_tflops=1307, flops_source=_DENSE),
    GpuSpec("MI355X", 288, 8.0, "AMD Instinct MI355X datasheet (amd.com; page URL not recorded); " + _X,
            bf16_tflops=2516, flops_source=_DENSE),
    GpuSpec("A100", 80, 2.039, "NVIDIA A100 SXM 80GB: https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/"
            "pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf, as cited by "
            "https://glennklockwood.com/garden/processors/A100 (read 2026-12-04; 2.039 TB/s, BF16 312 dense); "
            "not in InferenceX-app's gpu-specs.ts; docs/published_points.md §G",
            bf16_tflops=312, flops_source="NVIDIA A100 SXM 80GB datasheet (dense BF16; 624 with sparsity)"),
]}


@dataclass(frozen=True)
class GpuCost:
    """InferenceX's $/GPU-hr (hyperscaler-owned / neocloud-owned / 3-yr rental) and all-in kW."""

    name: str
    hyperscaler: float
    neocloud: float
    rental_3yr: float
    all_in_kw: float
    source: str = ("SemiAnalysisAI/InferenceX-app packages/app/src/lib/constants.ts (costh, costn, costr, all-in kW) "
                   "@77ca49a (2026-04-03); docs/published_points.md §F")


GPU_COSTS = {c.name: c for c in [
    GpuCost("H100", 1.30, 1.69, 1.30, 1.73),
    GpuCost("H200", 1.41, 1.74, 1.60, 1.73),
    GpuCost("B200", 1.95, 2.34, 2.90, 2.17),
    GpuCost("GB200", 2.21, 2.75, 3.30, 2.10),
    GpuCost("MI300X", 1.12, 1.40, 1.55, 1.79),
    GpuCost("MI355X", 1.48, 1.90, 2.10, 2.65),
]}

# One published InferenceX row (SemiAnalysis): MI355X, Kimi-K2.5 int4, vLLM, 8k/1k
# (nominal input 8,192 / output 1,024 tokens), concurrency 32, TP8. Its throughput, $/M tokens
# and J/token count TOTAL (input + output) tokens; its $/M tokens is reproduced with the
# *hyperscaler* price. tok_s_user (interactivity) counts output tokens, as always.
INFERENCEX_MI355X_ROW = {
    "gpu": "MI355X", "tier": "hyperscaler", "input_len": 8192, "output_len": 1024,
    "total_tok_s_per_gpu": 157.12,
    "median_ttft_s": 1.817, "median_tpot_ms": 230.3, "tok_s_user": 4.34,
    "usd_per_m_total_tokens": 2.62, "j_per_total_token": 16.9,
}
# (No public source for the row above was found: review_ch1_3.md #5. Chapter 1 uses the traceable row below.)

# One traceable InferenceX row: docs/published_points.md section F1, row 86. DeepSeek-R1-0528 FP4 on
# 8x MI355X, ATOM (rocm/atom, atom0.1.1), TP8, concurrency 32, 1k/1k, run of 2026-02-25; stored in
# SemiAnalysisAI/InferenceX-app packages/app/cypress/fixtures/api/benchmarks.json at commit 3a600f1d
# (each API row there carries its GitHub Actions run_url). InferenceX publishes both the TOTAL
# (input + output) tok/s/GPU and the output-only one; its client draws input AND output lengths from
# 80-100% of the nominal values, so the output share stays about 1/2 here (1/9 at 8k/1k).
INFERENCEX_R1_MI355X_ROW = {
    "gpu": "MI355X", "tier": "hyperscaler", "input_len": 1024, "output_len": 1024,
    "model": "DeepSeek-R1-0528 FP4", "engine": "ATOM", "tp": 8, "concurrency": 32, "date": "2026-02-25",
    "total_tok_s_per_gpu": 518.82, "output_tok_s_per_gpu": 259.82,
    "median_tpot_ms": 14.92, "median_ttft_ms": 70.5,
}

# Where each published row comes from (tests/calculators/test_datasheet_sources.py checks every entry).
ROW_SOURCES = {
    "INFERENCEX_MI355X_ROW": "NOT TRACED: no public source found (review_ch1_3.md #5, 2026-12-04); kept for old notebooks only",
    "INFERENCEX_R1_MI355X_ROW": ("SemiAnalysisAI/InferenceX-app packages/app/cypress/fixtures/api/benchmarks.json @3a600f1d, "
                                 "run of 2026-02-25; docs/published_points.md §F1 row 86"),
}

# ---------------------------------------------------------------- lookups
def _lookup(table: dict, name: str, what: str):
    if name in table:
        return table[name]
    known = ", ".join(table)
    raise ValueError(f"unknown {what} {name!r}; known {what}s: {known}")


def get_model_shape(model: str | ModelShape) -> ModelShape:
    """Return the :class:`ModelShape` for a name in ``MODEL_SHAPES`` (or pass one through)."""
    if isinstance(model, ModelShape):
        return model
    return _lookup(MODEL_SHAPES, model, "model")


def get_gpu_spec(gpu: str | GpuSpec) -> GpuSpec:
    """Return the :class:`GpuSpec` (memory, HBM bandwidth) for a name in ``GPU_SPECS``."""
    if isinstance(gpu, GpuSpec):
        return gpu
    return _lookup(GPU_SPECS, gpu, "GPU")


def get_gpu_cost(gpu: str | GpuCost) -> GpuCost:
    """Return InferenceX's $/GPU-hr and all-in kW for a name in ``GPU_COSTS``."""
    if isinstance(gpu, GpuCost):
        return gpu
    return _lookup(GPU_COSTS, gpu, "GPU")


def bytes_per_value(dtype: str | float) -> float:
    """Bytes per stored value: a dtype name ("bf16", "fp8", "int4", ...) or a positive number."""
    if isinstance(dtype, str):
        return _lookup(DTYPE_BYTES, dtype, "dtype")
    _check_positive(dtype, "bytes per value")
    return dtype
