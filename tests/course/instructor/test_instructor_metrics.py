"""Reading /metrics: vLLM's text (a fixture built from vllm/v1/metrics/loggers.py, two engines, the
0.9-0.10 names) and our server's (the newer names), histogram percentiles against the observations
themselves, rates between two scrapes, a restarted server, and the clear errors for what is not a
vLLM /metrics."""
from __future__ import annotations

import math
import random
import re
import socket
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import Histogram as PromHistogram

from course.instructor.metrics import Histogram, parse_metrics, scrape
from course.instructor.rates import Series

FIXTURES = Path(__file__).parent / "fixtures"


def vllm_text(which: str) -> str:
    return (FIXTURES / f"vllm_metrics_{which}.txt").read_text(encoding="utf-8")


def summed(text: str, sample: str) -> float:
    """The sum over every label set of one sample, read with a regex (not the parser under test)."""
    pat = re.compile(rf"^{re.escape(sample)}(?:{{[^}}]*}})? (\S+)$", re.M)
    return sum(float(v) for v in pat.findall(text))


def test_vllm_text_gives_every_number_the_dashboard_shows():
    text = vllm_text("t0")
    snap = parse_metrics(text, at=0.0)
    assert snap.missing == () and snap.model == "Qwen/Qwen3-8B"
    assert snap.values["running"] == summed(text, "vllm:num_requests_running") == 24 + 22
    assert snap.values["waiting"] == 3
    assert snap.values["kv_usage"] == pytest.approx((0.41 + 0.37) / 2)        # the mean, a fraction
    assert snap.values["generation_tokens"] == summed(text, "vllm:generation_tokens_total")
    assert snap.values["requests"] == summed(text, "vllm:request_success_total") == 580
    # the older vLLM has neither inter_token_latency nor request_time_per_output_token: both read
    # its per-gap histogram
    gaps = summed(text, "vllm:time_per_output_token_seconds_count")
    assert snap.hists["itl"].count == snap.hists["tpot"].count == gaps == 580 * 255
    assert snap.hists["ttft"].count == 580 and snap.hists["ttft"].bounds[-1] == math.inf
    p50, p99 = snap.hists["ttft"].quantile(0.5), snap.hists["ttft"].quantile(0.99)
    assert 0.1 < p50 < p99 < 1.0          # the fixture's TTFTs: lognormal around 0.2 s


def test_percentiles_fall_in_the_bucket_of_the_true_percentile():
    bounds = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
    reg = CollectorRegistry()
    h = PromHistogram("vllm:inter_token_latency_seconds", "x", buckets=bounds, registry=reg)
    rng = random.Random(1)
    values = sorted(rng.lognormvariate(-3.0, 0.6) for _ in range(2000))
    for v in values:
        h.observe(v)
    gauge = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
    text = gauge + generate_latest(reg).decode()
    hist = parse_metrics(text).hists["itl"]
    assert hist.count == 2000 and hist.sum == pytest.approx(sum(values))
    edges = (0.0, *bounds, math.inf)
    for q in (0.5, 0.9, 0.99):
        true = values[math.ceil(q * len(values)) - 1]
        i = next(k for k in range(1, len(edges)) if true <= edges[k])
        assert edges[i - 1] <= hist.quantile(q) <= min(edges[i], bounds[-1]), q
    half = Histogram((1.0, 2.0, math.inf), (0.0, 10.0, 10.0), 15.0, 10.0)
    assert half.quantile(0.5) == 1.5 and half.mean == 1.5          # linear inside the bucket (1, 2]
    assert math.isnan(Histogram((1.0, math.inf), (0.0, 0.0)).quantile(0.5))
    with pytest.raises(ValueError, match="q"):
        half.quantile(1.5)


def test_rates_between_two_vllm_scrapes():
    t0, t1 = vllm_text("t0"), vllm_text("t1")
    series = Series(window_s=5)
    series.add(parse_metrics(t0, at=100.0))
    p = series.add(parse_metrics(t1, at=105.0))
    grew = lambda sample: summed(t1, sample) - summed(t0, sample)              # noqa: E731
    d_tokens = grew("vllm:generation_tokens_total")
    assert d_tokens == 48 * 256
    assert p.t == 5.0 and p.out_tok_s == pytest.approx(d_tokens / 5)
    assert p.requests_s == pytest.approx(48 / 5) and p.running == 31 + 29
    d_sum = grew("vllm:time_per_output_token_seconds_sum")
    d_count = 48 * 255
    assert p.tok_s_per_user == pytest.approx(d_count / d_sum)        # 1 / mean ITL of the window
    assert 20 < p.tok_s_per_user < 40                        # the fixture's gaps: about 33 ms
    assert series.curve() == [(p.tok_s_per_user, p.out_tok_s, 60.0)]
    tot = series.totals()
    assert tot["requests"] == 48 and tot["output_tokens"] == d_tokens and tot["max_running"] == 60


def test_a_restarted_server_starts_the_series_again():
    series = Series(window_s=1)
    series.add(parse_metrics(vllm_text("t0"), at=0.0))
    series.add(parse_metrics(vllm_text("t1"), at=1.0))
    series.add(parse_metrics(vllm_text("t0"), at=2.0))            # the counters went down
    assert len(series.points) == 1 and series.totals()["requests"] == 0


def test_what_is_not_a_vllm_metrics_text_is_named():
    with pytest.raises(ValueError, match="vllm:"):
        parse_metrics("# TYPE up gauge\nup 1\n")
    with pytest.raises(ValueError, match="http://"):
        scrape("127.0.0.1:8000")
    with pytest.raises(TypeError, match="str"):
        parse_metrics(b"vllm:num_requests_running 1")
    with socket.socket() as s:                                     # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match="接続できません"):
        scrape(f"http://127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(ValueError, match="window_s"):
        Series(window_s=0)


def test_our_server_uses_the_newer_vllm_names():
    from minimal_engine import LLM
    from minimal_engine.serve.app import ServerThread, build_app
    app = build_app(LLM(device="cpu", max_num_seqs=4), served_model_name="minimal-ja")
    with ServerThread(app) as s:
        before = scrape(s.url)
        r = httpx.post(s.url + "/v1/completions", timeout=120, json={
            "prompt": ["吾輩は", "東京の"], "max_tokens": 6, "temperature": 0, "ignore_eos": True}).json()
        after = scrape(s.url)
    assert before.missing == () and before.model == "minimal-ja"
    grew = lambda key: after.values[key] - before.values[key]                   # noqa: E731
    assert grew("generation_tokens") == r["usage"]["completion_tokens"] == 12
    assert grew("requests") == 2
    # inter_token_latency (one per gap), request_time_per_output_token (one per request): read apart
    assert after.hists["itl"].count == 2 * 5 and after.hists["tpot"].count == 2
    assert after.values["running"] == 0 and after.values["kv_usage"] == 0
