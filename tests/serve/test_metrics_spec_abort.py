"""/metrics series the clients round found missing (issue 42, client defect 5): vLLM's spec_decode_*
counters under speculative decoding, cache_config_info, and request_success{finished_reason="abort"}
rising when a client leaves, streaming or not."""
from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from minimal_engine import LLM
from minimal_engine.serve.app import ServerThread, build_app
from tests.conftest import wait_idle

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
REPEAT = "吾輩は猫である。名前はまだ無い。吾輩は猫である。名前はまだ無い。吾輩は猫である。"


def families(url: str) -> dict:
    text = httpx.get(url + "/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(fams: dict, family: str, sample: str) -> list:
    return [s for s in fams[family].samples if s.name == sample] if family in fams else []


@pytest.fixture(scope="module")
def llm():
    return LLM(device="cpu", max_num_seqs=8)


def test_spec_decode_counters_follow_the_speculator():
    llm = LLM(device="cpu", max_num_seqs=4, speculative_config=SPEC)
    with ServerThread(build_app(llm, served_model_name="m")) as s:
        fams = families(s.url)
        for key in ("drafts", "draft_tokens", "accepted_tokens"):
            assert fams[f"vllm:spec_decode_num_{key}"].type == "counter"
            assert samples(fams, f"vllm:spec_decode_num_{key}",
                           f"vllm:spec_decode_num_{key}_total")[0].value == 0
        r = httpx.post(s.url + "/v1/completions", timeout=120, json={
            "prompt": [REPEAT, "東京の空は"], "max_tokens": 40, "temperature": 0,
            "ignore_eos": True}).json()
        assert r["usage"]["completion_tokens"] == 80
        wait_idle(s.url)
        stats = llm.engine.speculator.stats()
        fams = families(s.url)

        def total(key):
            return samples(fams, f"vllm:spec_decode_num_{key}",
                           f"vllm:spec_decode_num_{key}_total")[0].value
        assert total("drafts") == stats["steps"] > 0
        assert total("draft_tokens") == stats["proposed"] >= total("drafts")
        assert total("accepted_tokens") == stats["accepted"] > 0
        per_pos = {int(x.labels["position"]): x.value for x in samples(
            fams, "vllm:spec_decode_num_accepted_tokens_per_pos",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total")}
        assert sorted(per_pos) == [0, 1, 2, 3]
        assert sum(per_pos.values()) == total("accepted_tokens")
        assert all(per_pos[i] >= per_pos[i + 1] for i in range(3))   # the i-th needs all before
        for x in samples(fams, "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_drafts_total"):
            assert x.labels["model_name"] == "m" and x.labels["engine"] == "0"


def test_cache_config_info_and_no_spec_series_without_speculation(llm):
    with ServerThread(build_app(llm, served_model_name="m")) as s:
        fams = families(s.url)
        assert not any(name.startswith("vllm:spec_decode") for name in fams)
        (info,) = samples(fams, "vllm:cache_config_info", "vllm:cache_config_info")
        assert info.value == 1 and fams["vllm:cache_config_info"].type == "gauge"
        assert info.labels == {"model_name": "m", "engine": "0", "block_size": "16",
                               "cache_dtype": "auto", "enable_prefix_caching": "False",
                               "num_gpu_blocks": str(llm.engine.block_manager.num_blocks)}


def aborted(url: str) -> float:
    fams = families(url)
    return sum(x.value for x in samples(fams, "vllm:request_success", "vllm:request_success_total")
               if x.labels["finished_reason"] == "abort")


def test_abort_counter_rises_when_a_client_leaves(llm):
    body = {"prompt": "吾輩は", "max_tokens": 400, "temperature": 0, "ignore_eos": True}
    with ServerThread(build_app(llm)) as s:
        assert aborted(s.url) == 0
        with httpx.stream("POST", s.url + "/v1/completions", json={**body, "stream": True},
                          timeout=60) as r:
            lines = r.iter_lines()
            assert [next(lines) for _ in range(3)]          # a few chunks, then the client leaves
        wait_idle(s.url)
        assert aborted(s.url) == 1
        with pytest.raises(httpx.TimeoutException):         # not streaming: gives up waiting
            httpx.post(s.url + "/v1/completions", json=body, timeout=0.5)
        h = wait_idle(s.url)
        assert h["free_blocks"] == h["total_blocks"] and aborted(s.url) == 2
        r = httpx.post(s.url + "/v1/completions", json={**body, "max_tokens": 3}, timeout=60)
        assert r.status_code == 200 and aborted(s.url) == 2  # a finished request is no abort
        n = h["aborted"]
        assert n == 2                                        # /health's count agrees
