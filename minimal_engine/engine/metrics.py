"""Run summaries with vLLM's benchmark formulas and field names (InferenceX uses the same client).

Per request (RequestMetrics, each Sequence's clock): TTFT, TPOT = (E2EL - TTFT) / (outputs - 1),
ITL, E2EL.
Per run: throughput = tokens / wall time of the run; percentiles over requests (ITL over all gaps);
interactivity (tok/s/user) = 1000 / TPOT in ms, as InferenceX computes it.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class RequestMetrics:
    """Timestamps (time.perf_counter seconds) and the vLLM formulas built on them."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    token_times: list[float] = field(default_factory=list)   # one per generated token
    num_prompt_tokens: int = 0
    num_preemptions: int = 0
    num_draft_tokens: int = 0       # speculative decoding (features/spec_decode/): drafts
    num_accepted_tokens: int = 0    # proposed, those accepted, and verification steps
    num_spec_steps: int = 0

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_times)

    @property
    def ttft(self) -> float | None:
        """TTFT = first token time - arrival."""
        t = self.first_token_time
        return None if t is None else t - self.arrival_time

    @property
    def e2e_latency(self) -> float | None:
        """E2EL = last token time - arrival."""
        return None if not self.token_times else self.token_times[-1] - self.arrival_time

    @property
    def tpot(self) -> float | None:
        """TPOT = (E2EL - TTFT) / (output tokens - 1); defined only with 2+ output tokens."""
        n = self.num_output_tokens
        return None if n < 2 else (self.e2e_latency - self.ttft) / (n - 1)

    @property
    def acceptance_rate(self) -> float | None:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens per verification step: 1 + accepted / steps (vLLM's mean acceptance length)."""
        return 1 + self.num_accepted_tokens / self.num_spec_steps if self.num_spec_steps else None

    @property
    def itl(self) -> list[float]:
        """Inter-token latencies: the gaps between consecutive tokens."""
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:])]


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
