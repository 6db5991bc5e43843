"""Serving economics and energy (chapters 1 and 10): $/M tokens, J/token, pJ/token, InferenceX's row.

InferenceX's formulas: ``($/GPU-hr) / (tok/s/gpu x 3600 / 1e6)`` and ``kW x 1000 / (tok/s/gpu)``. The
generic ``usd_per_million_tokens`` and ``joules_per_token`` count the same kind of tokens as the tok/s passed
to them; names with ``_output_`` / ``_total_`` say which (see ``latency`` for the conversion). Prices and
power come from ``datasheets.GPU_COSTS``. Plain Python (no torch).
"""
from __future__ import annotations

from minimal_engine.calculators.datasheets import GpuCost, _check_positive, _lookup, get_gpu_cost
from minimal_engine.calculators.latency import output_tok_s_from_total, total_tok_s_from_output

__all__ = ["usd_per_million_tokens", "joules_per_token", "picojoules_per_token", "joules_to_picojoules",
           "gpu_hour_price", "inferencex_economics", "cost_per_million_tokens", "energy_per_token"]


def usd_per_million_tokens(usd_per_gpu_hour: float, tok_s_per_gpu: float) -> float:
    """Cost per million tokens: ``($/GPU-hr) / (tok/s/gpu x 3600 / 1e6)``.

    The denominator is how many million tokens one GPU makes in an hour.
    The result counts the same tokens as ``tok_s_per_gpu``: pass total
    (input + output) tok/s for InferenceX's $/M tokens, output tok/s for
    $/M output tokens (or use :func:`cost_per_million_tokens` for both).
    """
    _check_positive(usd_per_gpu_hour, "usd_per_gpu_hour", allow_zero=True)
    _check_positive(tok_s_per_gpu, "tok_s_per_gpu")
    return usd_per_gpu_hour / (tok_s_per_gpu * 3600 / 1e6)


def joules_per_token(kw_per_gpu: float, tok_s_per_gpu: float) -> float:
    """Energy per token: ``kW per GPU x 1000 / (tok/s/gpu)`` (W = J/s, so J/s / tok/s = J/tok).

    Counts the same tokens as ``tok_s_per_gpu`` (InferenceX: total tokens).
    """
    _check_positive(kw_per_gpu, "kw_per_gpu", allow_zero=True)
    _check_positive(tok_s_per_gpu, "tok_s_per_gpu")
    return kw_per_gpu * 1000.0 / tok_s_per_gpu


def joules_to_picojoules(joules: float) -> float:
    """1 J = 10**12 pJ."""
    _check_positive(joules, "joules", allow_zero=True)
    return joules * 1e12


def picojoules_per_token(kw_per_gpu: float, tok_s_per_gpu: float) -> float:
    """Energy per token in pJ: ``joules_per_token(...) x 1e12`` (a unit conversion only)."""
    return joules_to_picojoules(joules_per_token(kw_per_gpu, tok_s_per_gpu))


def cost_per_million_tokens(usd_per_hour: float, output_tok_s: float, input_len: float,
                            output_len: float) -> dict:
    """$/M output tokens and $/M total tokens from a *measured output* tok/s.

    For a learner's sweep: ``output_tok_s`` is what the engine reports
    (generated tokens per second of the whole machine), ``usd_per_hour`` the
    price of that machine per hour, and every request has ``input_len``
    prompt and ``output_len`` generated tokens. Returns
    ``{"usd_per_m_output_tokens", "usd_per_m_total_tokens", "output_tok_s",
    "total_tok_s"}``. The total figure is the one comparable to InferenceX.
    $2/hr at 100 output tok/s, 8k/1k: $5.56/M output tokens, $0.62/M total.
    """
    _check_positive(output_tok_s, "output_tok_s")
    total = total_tok_s_from_output(output_tok_s, input_len, output_len)
    return {
        "usd_per_m_output_tokens": usd_per_million_tokens(usd_per_hour, output_tok_s),
        "usd_per_m_total_tokens": usd_per_million_tokens(usd_per_hour, total),
        "output_tok_s": float(output_tok_s),
        "total_tok_s": total,
    }


def energy_per_token(watts: float, output_tok_s: float, input_len: float, output_len: float) -> dict:
    """J per output token and J per total token from power (W) and a *measured output* tok/s.

    ``watts / output_tok_s`` and ``watts / total_tok_s`` (W = J/s). Returns
    ``{"j_per_output_token", "j_per_total_token"}``; InferenceX quotes the
    total one. 2,650 W at 17.46 output tok/s (8k/1k) gives 151.8 J per output
    token and 16.9 J per total token.
    """
    _check_positive(watts, "watts", allow_zero=True)
    _check_positive(output_tok_s, "output_tok_s")
    total = total_tok_s_from_output(output_tok_s, input_len, output_len)
    return {
        "j_per_output_token": joules_per_token(watts / 1000.0, output_tok_s),
        "j_per_total_token": joules_per_token(watts / 1000.0, total),
    }


def gpu_hour_price(gpu: str | GpuCost, tier: str = "hyperscaler") -> float:
    """InferenceX's $/GPU-hr for ``tier`` in {"hyperscaler", "neocloud", "rental_3yr"}."""
    cost = get_gpu_cost(gpu)
    tiers = {"hyperscaler": cost.hyperscaler, "neocloud": cost.neocloud, "rental_3yr": cost.rental_3yr}
    return _lookup(tiers, tier, "price tier")


def inferencex_economics(gpu: str | GpuCost, total_tok_s_per_gpu: float, tier: str = "hyperscaler",
                         input_len: float | None = None, output_len: float | None = None) -> dict:
    """$/M tokens and J/token for one TOTAL (input + output) throughput on one GPU, as InferenceX computes them.

    Example, InferenceX row 86 (MI355X, DeepSeek-R1 FP4, 1k/1k; traced in
    docs/published_points.md §F1): 518.82 total tok/s/gpu with the
    hyperscaler-owned price ($1.48/GPU-hr) and 2.65 kW gives $0.79/M total
    tokens and 5.1 J/total token. (The neocloud price, $1.90, would give $1.02.)
    With ``input_len`` and ``output_len`` it also returns the output-only
    equivalents (``output_tok_s_per_gpu``, ``usd_per_m_output_tokens``,
    ``j_per_output_token``): at 1k/1k, 2x the total-token figures; at 8k/1k, 9x.
    """
    cost = get_gpu_cost(gpu)
    price = gpu_hour_price(cost, tier)
    out = {
        "gpu": cost.name,
        "tier": tier,
        "usd_per_gpu_hour": price,
        "total_tok_s_per_gpu": float(total_tok_s_per_gpu),
        "usd_per_m_total_tokens": usd_per_million_tokens(price, total_tok_s_per_gpu),
        "j_per_total_token": joules_per_token(cost.all_in_kw, total_tok_s_per_gpu),
        "pj_per_total_token": picojoules_per_token(cost.all_in_kw, total_tok_s_per_gpu),
    }
    if input_len is not None or output_len is not None:
        output_tok_s = output_tok_s_from_total(total_tok_s_per_gpu, input_len, output_len)
        out["output_tok_s_per_gpu"] = output_tok_s
        out["usd_per_m_output_tokens"] = usd_per_million_tokens(price, output_tok_s)
        out["j_per_output_token"] = joules_per_token(cost.all_in_kw, output_tok_s)
    return out
