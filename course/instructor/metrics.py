"""One scrape of a server's ``/metrics`` (Prometheus text, vLLM's metric names) as numbers.

    snap = scrape("http://127.0.0.1:8000")          # or parse_metrics(text, at=time.monotonic())
    snap.values["running"], snap.hists["ttft"].quantile(0.99)

Works with ``python -m minimal_engine.serve`` and with vLLM (V1 names; the older names of vLLM
0.9-0.10, ``vllm:gpu_cache_usage_perc`` and ``vllm:time_per_output_token_seconds``, are read when
the newer ones are absent). Series of several engines (vLLM's data parallelism: label ``engine``)
are added up; the KV-cache usage is their mean. Percentiles come from the histogram buckets with
Prometheus' ``histogram_quantile`` rule (linear inside the bucket), so they are estimates within one
bucket.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# logical name -> the family names that carry it, newest first
VALUES = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "prompt_tokens": ("vllm:prompt_tokens",),
    "generation_tokens": ("vllm:generation_tokens",),
    "requests": ("vllm:request_success",),
    "preemptions": ("vllm:num_preemptions",),
}
MEAN_VALUES = {"kv_usage"}          # a fraction per engine: the mean, not the sum
HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "tpot": ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds",),
}


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts (``le`` upper bounds, the last +Inf), their sum and count."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float = 0.0
    count: float = 0.0

    def minus(self, earlier: "Histogram") -> "Histogram":
        """The observations made between ``earlier`` and this one (same buckets)."""
        if earlier.bounds != self.bounds:
            return self
        return Histogram(self.bounds, tuple(a - b for a, b in zip(self.counts, earlier.counts)),
                         self.sum - earlier.sum, self.count - earlier.count)

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count > 0 else math.nan

    def quantile(self, q: float) -> float:
        """Prometheus' histogram_quantile: linear within the bucket that holds rank q * count; NaN
        with no observation; the highest finite bound when the rank falls in the +Inf bucket."""
        if not 0 <= q <= 1:
            raise ValueError(f"q は 0 以上 1 以下で指定してください。 / q must be in [0, 1], got {q!r}")
        if self.count <= 0 or not self.counts:
            return math.nan
        rank, lower, below = q * self.counts[-1], 0.0, 0.0
        for bound, cum in zip(self.bounds, self.counts):
            if cum >= rank and cum > below:
                if math.isinf(bound):
                    return lower
                return lower + (bound - lower) * (rank - below) / (cum - below)
            lower, below = (bound if not math.isinf(bound) else lower), cum
        return lower


@dataclass(frozen=True)
class Snapshot:
    at: float                                   # seconds on the caller's clock (time.monotonic())
    values: dict[str, float]
    hists: dict[str, Histogram]
    model: str = ""
    missing: tuple[str, ...] = field(default=())    # logical names the server did not report


def _histogram(family) -> Histogram:
    buckets: dict[float, float] = {}
    total = count = 0.0
    for s in family.samples:
        if s.name.endswith("_bucket"):
            le = float(s.labels["le"])
            buckets[le] = buckets.get(le, 0.0) + s.value
        elif s.name.endswith("_sum"):
            total += s.value
        elif s.name.endswith("_count"):
            count += s.value
    bounds = tuple(sorted(buckets))
    return Histogram(bounds, tuple(buckets[b] for b in bounds), total, count)


def parse_metrics(text: str, at: float | None = None) -> Snapshot:
    """A snapshot of the Prometheus text ``text`` taken at ``at`` (default: time.monotonic())."""
    if not isinstance(text, str):
        raise TypeError(f"/metrics の本文（文字列）を渡してください。 / text must be str, got {type(text).__name__}")
    try:
        families = {f.name: f for f in text_string_to_metric_families(text)}
    except ValueError as e:
        raise ValueError(f"Prometheus のテキスト形式として読めません（{e}）。 / not Prometheus text: {e}") from e
    if not any(name.startswith("vllm:") for name in families):
        raise ValueError("vLLM の名前（vllm:...）の指標がありません。vLLM か python -m minimal_engine.serve の "
                         "/metrics を指定してください。 / no vllm:* metrics in this text")
    values, hists, missing, model = {}, {}, [], ""
    for key, names in VALUES.items():
        fam = next((families[n] for n in names if n in families), None)
        if fam is None:
            missing.append(key)
            continue
        samples = [s.value for s in fam.samples if s.name in (fam.name, fam.name + "_total")]
        model = model or next((s.labels.get("model_name", "") for s in fam.samples), "")
        if key in MEAN_VALUES:
            values[key] = sum(samples) / len(samples) if samples else 0.0
        else:
            values[key] = sum(samples)
    for key, names in HISTOGRAMS.items():
        fam = next((families[n] for n in names
                    if n in families and families[n].type == "histogram"), None)
        if fam is None:
            missing.append(key)
        else:
            hists[key] = _histogram(fam)
    return Snapshot(time.monotonic() if at is None else at, values, hists, model, tuple(missing))


def scrape(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> Snapshot:
    """GET ``base_url``/metrics and parse it; ``api_key`` is sent as ``Authorization: Bearer`` (vLLM
    and our server serve /metrics without one; a proxy in front may want it)."""
    import httpx
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(f"サーバーの URL は http:// か https:// で始めてください（例: http://127.0.0.1:8000）。"
                         f" / base_url must start with http:// or https://, got {base_url!r}")
    url = base_url.rstrip("/") + "/metrics"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(url, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as e:
        raise ConnectionError(f"{url} に接続できません（{type(e).__name__}）。サーバーが動いているか、"
                              f"アドレスとポートを確かめてください。 / cannot reach {url}: {e}") from e
    if r.status_code != 200:
        raise ConnectionError(f"{url} が HTTP {r.status_code} を返しました。 / "
                              f"{url} returned HTTP {r.status_code}")
    return parse_metrics(r.text)


__all__ = ["HISTOGRAMS", "Histogram", "Snapshot", "VALUES", "parse_metrics", "scrape"]
