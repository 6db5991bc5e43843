"""Run summaries with vLLM's benchmark formulas and field names (InferenceX uses the same client).

Per request (sequence.RequestMetrics): TTFT, TPOT = (E2EL - TTFT) / (output tokens - 1), ITL, E2EL.
Per run: throughput = tokens / wall time of the run; percentiles over requests (ITL over all gaps);
interactivity (tok/s/user) = 1000 / TPOT in ms, as InferenceX computes it.
"""
from __future__ import annotations

import statistics


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _stats(name: str, values_ms: list[float], out: dict) -> None:
    out[f"mean_{name}"] = statistics.fmean(values_ms) if values_ms else float("nan")
    out[f"median_{name}"] = percentile(values_ms, 50)
    out[f"std_{name}"] = statistics.pstdev(values_ms) if values_ms else float("nan")
    for q in (90, 99):
        out[f"p{q}_{name}"] = percentile(values_ms, q)


def summarize(metrics: list, duration: float | None = None) -> dict:
    """metrics: RequestMetrics of finished requests (or RequestOutputs). duration: the run's wall time
    in seconds; by default from the first arrival to the last token."""
    metrics = [getattr(m, "metrics", m) for m in metrics]
    done = [m for m in metrics if m.token_times]
    if duration is None:
        duration = max(m.token_times[-1] for m in done) - min(m.arrival_time for m in done) if done else 0.0
    n_in = sum(m.num_prompt_tokens for m in done)
    n_out = sum(m.num_output_tokens for m in done)
    res = {"completed": len(done), "duration": duration, "total_input_tokens": n_in, "total_output_tokens": n_out,
           "request_throughput": len(done) / duration if duration else float("nan"),
           "output_throughput": n_out / duration if duration else float("nan"),
           "total_token_throughput": (n_in + n_out) / duration if duration else float("nan")}
    _stats("ttft_ms", [m.ttft * 1000 for m in done], res)
    _stats("tpot_ms", [m.tpot * 1000 for m in done if m.tpot is not None], res)
    _stats("itl_ms", [g * 1000 for m in done for g in m.itl], res)
    _stats("e2el_ms", [m.e2e_latency * 1000 for m in done], res)
    tpot = res["median_tpot_ms"]
    res["tok_s_per_user"] = 1000 / tpot if tpot == tpot and tpot > 0 else float("nan")   # interactivity
    return res


def format_summary(res: dict) -> str:
    """A short human-readable table (used by the CLI and the benchmarks)."""
    lines = [f"requests: {res['completed']}   wall time: {res['duration']:.2f} s",
             f"output tok/s: {res['output_throughput']:.1f}   total tok/s: {res['total_token_throughput']:.1f}   "
             f"tok/s/user: {res['tok_s_per_user']:.1f}"]
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        lines.append(f"{name[:-3].upper():5s} ms  mean {res['mean_' + name]:8.2f}  median {res['median_' + name]:8.2f}"
                     f"  p90 {res['p90_' + name]:8.2f}  p99 {res['p99_' + name]:8.2f}")
    return "\n".join(lines)
