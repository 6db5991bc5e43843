"""/metrics for the server: Prometheus text format with vLLM V1's metric names and semantics (prometheus_client).

Read against vLLM's ``vllm/v1/metrics/loggers.py`` (PrometheusStatLogger) and ``docs/design/metrics.md``:

- labels ``model_name`` and ``engine`` (``"0"``: one engine per server) on every series;
- gauges read at scrape time: running / waiting requests, KV-cache usage (0-1);
- per step (the engine loop calls :meth:`ServerMetrics.observe_step` after every ``engine.step()``): the
  counters ``prompt_tokens`` (a request's prompt, counted when its prefill completes, i.e. its first token),
  ``generation_tokens``, ``num_preemptions``, ``prefix_cache_queries`` / ``prefix_cache_hits`` (prompt tokens of
  requests scheduled for the first time; only with prefix caching), the histogram ``iteration_tokens_total``
  (prompt + generation tokens of the step, as vLLM adds them), TTFT (arrival -> first token; the server sets the
  arrival when the HTTP request comes in, as vLLM's front end does) and ITL (one gap per request per step: several
  tokens of one step, e.g. accepted drafts, make one gap, as in vLLM);
- per finished request (:meth:`observe_finished`): ``request_success{finished_reason}``, E2E latency, queue time
  (arrival -> first scheduled), prefill time (first scheduled -> first token), decode time (first -> last token),
  inference time (first scheduled -> last token), the request's own TPOT
  (``request_time_per_output_token_seconds``), prompt / generation token counts and ``max_tokens``; per API
  request (:meth:`observe_request`): ``request_params_n`` and ``request_max_num_generation_tokens``;
  a choice its client left before it finished (:meth:`observe_aborted`) counts as
  ``request_success{finished_reason="abort"}``, one that failed as ``"error"``;
- with speculative decoding (the engine's ``speculator``, given at construction), vLLM's counters
  ``spec_decode_num_drafts`` (verification steps of one request with drafts),
  ``spec_decode_num_draft_tokens``, ``spec_decode_num_accepted_tokens`` and
  ``spec_decode_num_accepted_tokens_per_pos{position}``, advanced after each step by what the
  speculator's totals (``SpecDecoder.stats()``) grew;
- ``cache_config_info``: a gauge set to 1 whose labels describe the KV cache (block_size,
  cache_dtype, enable_prefix_caching, num_gpu_blocks: vLLM's CacheConfig names, values as strings).

Counters appear with the ``_total`` suffix; no ``*_created`` series (vLLM switches them off too). Each app has
its own CollectorRegistry (no module-global registry), so tests and notebooks can run several servers.
"""
from __future__ import annotations

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# vLLM's buckets (loggers.py)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0)
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N_BUCKETS = (1, 2, 5, 10, 20)
FINISH_REASONS = ("stop", "length", "abort", "error")

# (attribute, vLLM's name, its help text, buckets)
LATENCY_HISTOGRAMS = (
    ("ttft", "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS),
    ("itl", "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS),
    ("tpot", "vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.",
     ITL_BUCKETS),
    ("e2e", "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", REQUEST_BUCKETS),
    ("queue", "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
     REQUEST_BUCKETS),
    ("inference", "vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
     REQUEST_BUCKETS),
    ("prefill", "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
     REQUEST_BUCKETS),
    ("decode", "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
     REQUEST_BUCKETS),
)

prometheus_client.disable_created_metrics()     # as vLLM: no *_created series


def buckets_1_2_5(max_value: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to max_value (vLLM's build_1_2_5_buckets, for token counts)."""
    out, exp = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10 ** exp
            if v > max_value:
                return tuple(out)
            out.append(v)
        exp += 1


class ServerMetrics:
    def __init__(self, model_name: str, max_model_len: int = 2048, speculator=None,
                 cache_info: dict | None = None):
        """speculator: the engine's SpecDecoder or None; cache_info: {CacheConfig name: value}."""
        r = self.registry = CollectorRegistry()
        self.label = {"model_name": model_name, "engine": "0"}
        names = list(self.label)
        tokens = buckets_1_2_5(max_model_len)

        def gauge(name, doc):
            return Gauge(name, doc, names, registry=r).labels(**self.label)

        def counter(name, doc):
            return Counter(name, doc, names, registry=r).labels(**self.label)

        def hist(name, doc, buckets):
            return Histogram(name, doc, names, buckets=buckets, registry=r).labels(**self.label)

        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prefix_queries = counter("vllm:prefix_cache_queries",
                                      "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          names + ["finished_reason"], registry=r)
        self.success = {why: success.labels(finished_reason=why, **self.label) for why in FINISH_REASONS}
        self.request_prompt = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens)
        self.request_generation = hist("vllm:request_generation_tokens", "Number of generation tokens processed.",
                                       tokens)
        self.iteration_tokens = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                                     ITERATION_BUCKETS)
        self.max_generation = hist("vllm:request_max_num_generation_tokens",
                                   "Histogram of maximum number of requested generation tokens.", tokens)
        self.params_n = hist("vllm:request_params_n", "Histogram of the n request parameter.", N_BUCKETS)
        self.params_max_tokens = hist("vllm:request_params_max_tokens",
                                      "Histogram of the max_tokens request parameter.", tokens)
        for attr, name, doc, buckets in LATENCY_HISTOGRAMS:     # seconds, per token gap or per request
            setattr(self, attr, hist(name, doc, buckets))
        if cache_info is not None:
            info = {k: str(v) for k, v in cache_info.items()}
            Gauge("vllm:cache_config_info", "Information of the LLMEngine's CacheConfig",
                  names + list(info), registry=r).labels(**self.label, **info).set(1)
        self.speculator, self._spec_seen = speculator, None
        if not hasattr(speculator, "stats"):       # none, or a speculator without totals
            self.speculator = None
        else:
            self._spec_seen = self._spec_totals()
            self.spec = {key: counter(f"vllm:spec_decode_num_{key}", doc) for key, doc in (
                ("drafts", "Number of spec decoding drafts."),
                ("draft_tokens", "Number of draft tokens."),
                ("accepted_tokens", "Number of accepted tokens."))}
            per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                              "Accepted tokens per draft position.", names + ["position"],
                              registry=r)
            self.spec_per_pos = [per_pos.labels(position=str(i), **self.label)
                                 for i in range(len(self._spec_seen) - 3)]

    def _spec_totals(self) -> list[int]:
        """[steps, proposed, accepted, kept at position 0, 1, ...] from the speculator's totals."""
        s = self.speculator.stats()
        return [s["steps"], s["proposed"], s["accepted"]] + [
            round((share or 0.0) * s["steps"]) for share in s["acceptance_by_position"]]

    def _observe_spec(self) -> None:
        now = self._spec_totals()
        grew = [a - b for a, b in zip(now, self._spec_seen)]
        self._spec_seen = now
        spec = self.spec
        counters = [spec["drafts"], spec["draft_tokens"], spec["accepted_tokens"], *self.spec_per_pos]
        for c, d in zip(counters, grew):
            if d > 0:
                c.inc(d)

    def observe_step(self, step, outputs) -> None:
        """After one engine step (engine loop thread): step is ``LLMEngine.last_step``, outputs what it returned."""
        prompt = generated = 0
        for out in outputs:
            k = len(out.new_token_ids)
            if not k:
                continue
            times = out.metrics.token_times
            generated += k
            if len(times) == k:               # this step made the request's first token: its prefill is done
                prompt += len(out.prompt_token_ids)
                self.ttft.observe(out.metrics.ttft)
            else:                             # one gap per request and step (accepted drafts arrive together)
                self.itl.observe(times[-1] - times[-1 - k])
        self.prompt_tokens.inc(prompt)
        self.generation_tokens.inc(generated)
        self.iteration_tokens.observe(prompt + generated)
        self.preemptions.inc(step.num_preempted)
        self.prefix_queries.inc(step.prefix_cache_queries)
        self.prefix_hits.inc(step.prefix_cache_hits)
        if self.speculator is not None:
            self._observe_spec()

    def observe_finished(self, out, max_tokens: int | None = None) -> None:
        """A finished engine request (one choice)."""
        m = out.metrics
        self.success[out.finish_reason if out.finish_reason in self.success else "abort"].inc()
        self.request_prompt.observe(len(out.prompt_token_ids))
        self.request_generation.observe(len(out.token_ids))
        if max_tokens:
            self.params_max_tokens.observe(max_tokens)
        if m.e2e_latency is not None:
            self.e2e.observe(m.e2e_latency)
        if m.first_scheduled_time is not None:
            self.queue.observe(m.first_scheduled_time - m.arrival_time)
            if m.first_token_time is not None:
                self.prefill.observe(m.first_token_time - m.first_scheduled_time)
                self.inference.observe(m.token_times[-1] - m.first_scheduled_time)
                self.decode.observe(m.token_times[-1] - m.first_token_time)
        if m.tpot is not None:
            self.tpot.observe(m.tpot)

    def observe_aborted(self, reason: str = "abort") -> None:
        """A choice that ended without a finished output: its client left ("abort") or it failed
        ("error")."""
        self.success[reason].inc()

    def observe_request(self, n: int, outputs: list) -> None:
        """An API request whose n choices have all finished."""
        self.params_n.observe(n)
        self.max_generation.observe(max(len(o.token_ids) for o in outputs))

    def render(self, stats: dict) -> bytes:
        """Text format; stats: the engine loop's snapshot (running, waiting, free/total blocks)."""
        self.running.set(stats["running"])
        self.waiting.set(stats["waiting"])
        total = stats["total_blocks"]
        self.kv_usage.set(1 - stats["free_blocks"] / total if total else 0.0)
        return generate_latest(self.registry)
