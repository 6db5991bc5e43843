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
