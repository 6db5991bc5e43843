"""/metrics for the server: Prometheus text format with vLLM's metric names, through prometheus_client.

Each app has its own CollectorRegistry (no module-global registry), so tests and notebooks can run several
servers in one process. Gauges are read from the engine loop's snapshot at scrape time; counters and
histograms move when a request finishes (its RequestMetrics: TTFT, gaps between tokens, end-to-end latency,
prompt and generated tokens, preemptions, and prefix-cache hits when prefix caching is on).
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                   10.0, 20.0, 40.0, 80.0)


class ServerMetrics:
    def __init__(self, model_name: str):
        r = self.registry = CollectorRegistry()
        self.label = {"model_name": model_name}
        names = ["model_name"]

        def gauge(name, doc):
            return Gauge(name, doc, names, registry=r).labels(**self.label)

        def counter(name, doc):
            return Counter(name, doc, names, registry=r).labels(**self.label)

        def hist(name, doc):
            return Histogram(name, doc, names, buckets=LATENCY_BUCKETS, registry=r).labels(**self.label)

        self.running = gauge("vllm:num_requests_running", "Requests in the running batch.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage: 1 = every block in use.")
        self.ttft = hist("vllm:time_to_first_token_seconds", "Time to first token (s).")
        self.itl = hist("vllm:inter_token_latency_seconds", "Gaps between consecutive output tokens (s).")
        self.tpot = hist("vllm:time_per_output_token_seconds", "Time per output token after the first (s).")
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Arrival to last token (s).")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens of finished requests.")
        self.generation_tokens = counter("vllm:generation_tokens", "Generated tokens of finished requests.")
        self.preemptions = counter("vllm:num_preemptions", "Preemptions (counted when the request finishes).")
        self.success = Counter("vllm:request_success", "Finished requests by finish reason.",
                               names + ["finished_reason"], registry=r)
        self.prefix_queries = counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.")

    def observe_finished(self, out) -> None:
        """A finished RequestOutput: move the counters and histograms."""
        m = out.metrics
        self.prompt_tokens.inc(len(out.prompt_token_ids))
        self.generation_tokens.inc(len(out.token_ids))
        self.preemptions.inc(m.num_preemptions)
        self.success.labels(finished_reason=out.finish_reason or "abort", **self.label).inc()
        self.prefix_queries.inc(len(out.prompt_token_ids))
        self.prefix_hits.inc(getattr(out, "num_cached_tokens", 0) or 0)
        if m.ttft is not None:
            self.ttft.observe(m.ttft)
            self.e2e.observe(m.e2e_latency)
        for gap in m.itl:
            self.itl.observe(gap)
        if m.tpot is not None:
            self.tpot.observe(m.tpot)

    def render(self, stats: dict) -> bytes:
        """Text format; stats: the engine loop's snapshot (running, waiting, free/total blocks)."""
        self.running.set(stats["running"])
        self.waiting.set(stats["waiting"])
        total = stats["total_blocks"]
        self.kv_usage.set(1 - stats["free_blocks"] / total if total else 0.0)
        return generate_latest(self.registry)
