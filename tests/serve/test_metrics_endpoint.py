"""/metrics: Prometheus text with vLLM's names, parsed by prometheus_client's own parser; counters and
histograms move as requests complete; each app has its own registry (two servers in one process)."""
from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from minimal_engine import LLM
from minimal_engine.serve.app import ServerThread, build_app

NAMES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
         "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
         "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_preemptions", "vllm:prefix_cache_hits"]


def scrape(url: str) -> dict[str, float]:
    """{sample name: value} (labels dropped: one model per server; histogram buckets skipped)."""
    r = httpx.get(url + "/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out, families = {}, {}
    for fam in text_string_to_metric_families(r.text):
        families[fam.name] = fam.type
        for s in fam.samples:
            if not s.name.endswith("_bucket"):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out | {"__families__": families}


@pytest.fixture(scope="module")
def llm():
    return LLM(device="cpu", max_num_seqs=8)


def test_names_and_counters_move(llm):
    with ServerThread(build_app(llm)) as s:
        before = scrape(s.url)
        fams = before["__families__"]
        assert all(n in fams for n in NAMES), sorted(fams)
        assert fams["vllm:prompt_tokens"] == "counter" and fams["vllm:time_to_first_token_seconds"] == "histogram"
        assert before["vllm:generation_tokens_total"] == 0
        r = httpx.post(s.url + "/v1/completions", timeout=60,
                       json={"prompt": ["吾輩は", "東京の空は"], "max_tokens": 5, "temperature": 0}).json()
        after = scrape(s.url)
        assert after["vllm:generation_tokens_total"] == r["usage"]["completion_tokens"] == 10
        assert after["vllm:prompt_tokens_total"] == r["usage"]["prompt_tokens"]
        assert after["vllm:time_to_first_token_seconds_count"] == 2
        assert after["vllm:e2e_request_latency_seconds_count"] == 2
        assert after["vllm:inter_token_latency_seconds_count"] == 2 * 4
        assert after["vllm:num_requests_running"] == 0 and after["vllm:kv_cache_usage_perc"] == 0


EXPECTED = {   # vLLM V1's names and types (vllm/v1/metrics/loggers.py), as prometheus_client's parser names families
    "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge", "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter", "vllm:prefix_cache_hits": "counter", "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter", "vllm:generation_tokens": "counter", "vllm:request_success": "counter",
    "vllm:request_prompt_tokens": "histogram", "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram", "vllm:request_max_num_generation_tokens": "histogram",
    "vllm:request_params_n": "histogram", "vllm:request_params_max_tokens": "histogram",
    "vllm:time_to_first_token_seconds": "histogram", "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram", "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram", "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram", "vllm:request_decode_time_seconds": "histogram",
}


def families(url: str) -> dict:
    text = httpx.get(url + "/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams: dict, family: str, sample: str, **labels) -> float:
    return sum(s.value for s in fams[family].samples
               if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()))


def test_vllm_names_types_labels_and_semantics(llm):
    """Every expected family with its type, labels model_name and engine, no *_created series; ITL per token
    gap and TPOT per request; queue + prefill = TTFT's engine part; n and max_tokens per request."""
    with ServerThread(build_app(llm, served_model_name="m")) as s:
        fams = families(s.url)
        assert {n: fams[n].type for n in EXPECTED if n in fams} == EXPECTED, sorted(set(EXPECTED) - set(fams))
        text = httpx.get(s.url + "/metrics", timeout=10).text
        assert "_created" not in text
        r = httpx.post(s.url + "/v1/completions", timeout=60, json={
            "prompt": "吾輩は", "max_tokens": 6, "n": 2, "temperature": 0, "ignore_eos": True}).json()
        assert r["usage"]["completion_tokens"] == 12
        fams = families(s.url)
        for fam in fams.values():
            if fam.name.startswith("vllm:"):
                assert all(x.labels.get("model_name") == "m" and x.labels.get("engine") == "0" for x in fam.samples)
        c = lambda fam, suffix="_count", **kw: value(fams, fam, fam + suffix, **kw)   # noqa: E731
        assert c("vllm:inter_token_latency_seconds") == 2 * 5            # one per gap between tokens
        assert c("vllm:request_time_per_output_token_seconds") == 2     # one per request
        for name in ("queue_time", "prefill_time", "decode_time", "inference_time"):
            assert c(f"vllm:request_{name}_seconds") == 2
        assert c("vllm:request_params_n") == 1 and c("vllm:request_params_n", "_sum") == 2
        assert c("vllm:request_params_max_tokens", "_sum") == 12
        assert c("vllm:request_max_num_generation_tokens", "_sum") == 6
        assert c("vllm:request_success", "_total", finished_reason="length") == 2
        assert c("vllm:iteration_tokens_total", "_sum") == c("vllm:prompt_tokens", "_total") + 12
        # E2E = queue + inference for each request, so the sums agree (to float rounding)
        e2e, queue, inference = (c(f"vllm:{n}", "_sum") for n in (
            "e2e_request_latency_seconds", "request_queue_time_seconds", "request_inference_time_seconds"))
        assert abs(e2e - queue - inference) < 1e-6


def test_prefix_cache_and_preemption_counters_move_per_step():
    llm = LLM(device="cpu", enable_prefix_caching=True, max_num_seqs=4)
    prompt = "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。" * 3
    with ServerThread(build_app(llm)) as s:
        for _ in range(2):
            httpx.post(s.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2}, timeout=60)
        fams = families(s.url)
        queries = value(fams, "vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total")
        hits = value(fams, "vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total")
        n = len(llm.tokenizer.encode(prompt))
        assert queries == 2 * n and 0 < hits < n                 # the second request found the full blocks
    small = LLM(device="cpu", num_kv_blocks=6, max_num_seqs=4)    # too few blocks: preemption
    with ServerThread(build_app(small)) as s:
        body = {"prompt": "吾輩は", "max_tokens": 60, "n": 3, "ignore_eos": True, "temperature": 0}
        httpx.post(s.url + "/v1/completions", json=body, timeout=120)
        fams = families(s.url)
        assert value(fams, "vllm:num_preemptions", "vllm:num_preemptions_total") >= 1


def test_each_app_has_its_own_registry(llm):
    with ServerThread(build_app(llm)) as a, ServerThread(build_app(llm)) as b:
        httpx.post(a.url + "/v1/completions", json={"prompt": "吾輩は", "max_tokens": 3}, timeout=60)
        assert scrape(a.url)["vllm:generation_tokens_total"] == 3
        assert scrape(b.url)["vllm:generation_tokens_total"] == 0


def test_tokenize_and_detokenize(llm):
    with ServerThread(build_app(llm)) as s:
        t = httpx.post(s.url + "/tokenize", json={"prompt": "吾輩は猫である"}, timeout=10).json()
        assert t["tokens"] == llm.tokenizer.encode("吾輩は猫である") and t["count"] == len(t["tokens"])
        assert t["max_model_len"] == llm.config.max_model_len
        d = httpx.post(s.url + "/detokenize", json={"tokens": t["tokens"]}, timeout=10).json()
        assert d == {"prompt": "吾輩は猫である"}
        chat = httpx.post(s.url + "/tokenize", json={"messages": [{"role": "user", "content": "猫"}]}, timeout=10).json()
        assert llm.tokenizer.decode(chat["tokens"]) == "質問：猫\n回答："
        bad = httpx.post(s.url + "/detokenize", json={"tokens": [-1]}, timeout=10)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
        nojson = httpx.post(s.url + "/tokenize", content=b'{"prompt": "x"}', timeout=10)
        assert nojson.status_code == 415
