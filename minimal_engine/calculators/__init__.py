"""The course's numbers, one facade: ``from minimal_engine import calculators as calc; calc.kv_bytes_per_token(...)``.

Every number in the lessons, labs, quizzes and tests comes from a function here: a quiz answer
(``answer_from`` names a function of ``__all__``), a lesson figure and a lab readout call the same one, so
they cannot drift apart. Plain Python (no torch, ipywidgets or matplotlib). Units: bytes are plain bytes;
"GB" means 10**9 bytes (as GPU datasheets use it); time is in milliseconds where the name says ``_ms``.

The formulas live in sibling modules, one topic each (code inside minimal_engine imports those, never
this facade):

    datasheets  model shapes, GPU datasheets, InferenceX's prices (each row with its source)
    kv          KV cache size (MHA / GQA / MQA / MLA), memory budgets, users that fit
    latency     TPOT <-> tok/s/user, output vs total tokens
    cost        $/M tokens, J/token, pJ/token (InferenceX's formulas)
    flops       one token's work: FLOPs per token, with / without a KV cache, layer weight counts
    roofline    ridge points, intensities, TPOT bounds, speculative decoding's speedup (chapters 2, 8)
    capacity    paging, prefix-cache hits, static vs continuous batching, goodput (chapters 4, 5)
    transfer    KV hand-off bytes and link time, chunked prefill steps, TP all-reduce bytes (chapters 7, 9)
    sim_tables, simulator   chapter 10's performance simulator (imported by name, not re-exported)

"Output" vs "total" tokens: the course's tok/s counts *output* (generated) tokens; InferenceX's
``tput_per_gpu``, $/M tokens and J/token count *total* tokens (input + output). Names say which one they
mean (``output_tok_s`` / ``usd_per_m_output_tokens`` / ``j_per_output_token`` versus ``total_tok_s`` /
``usd_per_m_total_tokens`` / ``j_per_total_token``); ``latency.output_share`` converts one into the other.
"""
from __future__ import annotations

from minimal_engine.calculators.capacity import (cached_prefix_tokens, contiguous_users, goodput_rps,
                                                 last_block_waste, padded_slots, padding_share, padding_tokens,
                                                 paged_over_contiguous, paged_users, prefix_hit_rate,
                                                 static_batch_idle_share, static_batch_idle_slots,
                                                 static_batches_idle_share)
from minimal_engine.calculators.cost import (cost_per_million_tokens, energy_per_token, gpu_hour_price,
                                             inferencex_economics, joules_per_token, joules_to_picojoules,
                                             picojoules_per_token, usd_per_million_tokens)
from minimal_engine.calculators.datasheets import (DTYPE_BYTES, GPU_COSTS, GPU_SPECS, INFERENCEX_MI355X_ROW,
                                                   INFERENCEX_R1_MI355X_ROW,
                                                   MODEL_SHAPES, GpuCost, GpuSpec, ModelShape, bytes_per_value,
                                                   get_gpu_cost, get_gpu_spec, get_model_shape)
from minimal_engine.calculators.flops import (attention_flops_per_token, attention_weight_count, flops_per_token,
                                              generation_flops, matmul_params, mlp_weight_count,
                                              no_cache_work_ratio)
from minimal_engine.calculators.kv import (gpu_memory_bytes, kv_bytes_per_token, kv_bytes_per_token_gqa,
                                           kv_bytes_per_token_if_mha, kv_bytes_per_token_mla,
                                           kv_bytes_written_per_step, kv_cache_bytes, max_concurrent_users,
                                           naive_mha_kv_bytes_per_token, weight_bytes)
from minimal_engine.calculators.latency import (output_share, output_tok_s_from_total, tok_s_user_from_tpot_ms,
                                                total_tok_s_from_output, tpot_ms_from_tok_s_user)
from minimal_engine.calculators.roofline import (active_params, active_weight_bytes, arithmetic_intensity,
                                                 decode_step_bytes, decode_step_flops, decode_tpot_bound_ms,
                                                 gpu_bandwidth, gpu_peak_flops, matmul_intensity, ridge_intensity,
                                                 ridge_point, roof_flops, share_of_bound, spec_roofline_speedup,
                                                 spec_speedup, spec_tokens_per_step, tpot_ms_from_bytes,
                                                 weight_intensity)
from minimal_engine.calculators.transfer import (LINKS_GB_S, allreduce_bytes, chunked_prefill_steps,
                                                 kv_transfer_bytes, tp_allreduce_bytes, transfer_seconds)

__all__ = [
    # datasheets
    "DTYPE_BYTES", "GPU_COSTS", "GPU_SPECS", "INFERENCEX_MI355X_ROW", "INFERENCEX_R1_MI355X_ROW", "MODEL_SHAPES", "GpuCost", "GpuSpec",
    "ModelShape", "get_model_shape", "get_gpu_spec", "get_gpu_cost", "bytes_per_value",
    # kv
    "kv_bytes_per_token_gqa", "kv_bytes_per_token_mla", "kv_bytes_per_token", "kv_bytes_per_token_if_mha",
    "naive_mha_kv_bytes_per_token", "kv_cache_bytes", "kv_bytes_written_per_step", "weight_bytes",
    "gpu_memory_bytes", "max_concurrent_users",
    # latency
    "tpot_ms_from_tok_s_user", "tok_s_user_from_tpot_ms", "output_share", "output_tok_s_from_total",
    "total_tok_s_from_output",
    # cost
    "usd_per_million_tokens", "joules_per_token", "picojoules_per_token", "joules_to_picojoules",
    "gpu_hour_price", "inferencex_economics", "cost_per_million_tokens", "energy_per_token",
    # flops
    "attention_flops_per_token", "flops_per_token", "generation_flops", "matmul_params", "no_cache_work_ratio",
    "attention_weight_count", "mlp_weight_count",
    # roofline
    "ridge_intensity", "roof_flops", "gpu_peak_flops", "gpu_bandwidth", "ridge_point", "arithmetic_intensity",
    "matmul_intensity", "weight_intensity", "active_params", "active_weight_bytes", "decode_step_bytes",
    "decode_step_flops", "decode_tpot_bound_ms", "tpot_ms_from_bytes", "share_of_bound", "spec_tokens_per_step",
    "spec_speedup", "spec_roofline_speedup",
    # capacity
    "cached_prefix_tokens", "contiguous_users", "goodput_rps", "last_block_waste", "padded_slots", "padding_share",
    "padding_tokens", "paged_over_contiguous", "paged_users", "prefix_hit_rate", "static_batch_idle_share", "static_batches_idle_share",
    "static_batch_idle_slots",
    # transfer
    "LINKS_GB_S", "kv_transfer_bytes", "transfer_seconds", "chunked_prefill_steps", "allreduce_bytes",
    "tp_allreduce_bytes",
]
