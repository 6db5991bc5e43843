"""The OpenAI-compatible server: many streaming clients, disconnects, bad input, a full queue, the online
bench client. Servers run in-process (uvicorn in a thread) on a free loopback port and are always stopped."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from minimal_engine import LLM, SamplingParams
from minimal_engine.bench.online import run_online
from minimal_engine.serve.app import ServerThread, build_app
from tests.conftest import wait_idle

SNIPPETS = ["吾輩は猫である。", "東京の空は", "推論とは学習済みのモデルで", "Hello, world!", "どこで生れたか",
            "名前はまだ無い。", "1234 ＡＢＣ", "ｶﾀｶﾅ"]


def mixed_prompts(n: int) -> list[tuple[str, int]]:
    """(prompt, max_tokens) pairs of varied lengths."""
    return [("".join(SNIPPETS[(i + j) % len(SNIPPETS)] for j in range(1 + i % 5)), 4 + (i * 7) % 37) for i in range(n)]



@pytest.fixture(scope="module")
def server(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=64)
    with ServerThread(build_app(llm, max_queue=64, served_model_name="tiny")) as s:
        yield s


async def stream_completion(client, url, prompt, max_tokens, stop_after=None):
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    text, usage, chunks = "", None, 0
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data["choices"]:
                text += data["choices"][0]["text"]
                chunks += 1
                if stop_after is not None and chunks >= stop_after:
                    return text, None                 # leave mid-stream: the context manager closes it
            usage = data.get("usage") or usage
    return text, usage


def test_64_streaming_clients_match_offline_greedy(server, llama_dir):
    work = mixed_prompts(64)

    async def main():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=80)) as c:
            return await asyncio.gather(*(stream_completion(c, server.url, p, n) for p, n in work))

    results = asyncio.run(main())
    offline = LLM(llama_dir, dtype="float32", device="cpu").generate(
        [p for p, _ in work], [SamplingParams(temperature=0, max_tokens=n) for _, n in work], use_tqdm=False)
    for (text, u), off in zip(results, offline):
        assert text == off.text
        assert u["completion_tokens"] == len(off.token_ids) and u["prompt_tokens"] == len(off.prompt_token_ids)
    h = wait_idle(server.url)
    assert h["free_blocks"] == h["total_blocks"] and h["unfinished_requests"] == 0


def test_disconnecting_clients_are_aborted(server):
    before = httpx.get(server.url + "/health").json()["aborted"]

    async def main():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=40)) as c:
            leavers = [stream_completion(c, server.url, p, 200, stop_after=2) for p, _ in mixed_prompts(10)]
            stayers = [stream_completion(c, server.url, p, n) for p, n in mixed_prompts(10)]
            return await asyncio.gather(*leavers, *stayers)

    results = asyncio.run(main())
    assert all(u is not None and u["completion_tokens"] >= 1 for _, u in results[10:])
    h = wait_idle(server.url)
    assert h["aborted"] - before == 10
    assert h["free_blocks"] == h["total_blocks"] and h["unfinished_requests"] == 0


@pytest.mark.parametrize("body, needle", [
    (b'{"prompt": "abc", ', "not valid JSON"),
    ({"prompt": "abc", "stop": [""]}, "stop"),
    ({"prompt": "abc", "temperature": -1}, "temperature"),
    ({"prompt": "abc", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "abc", "top_p": 1.5}, "top_p"),
    ({"prompt": ""}, "empty"),
    ({"prompt": list(range(300))}, "max_model_len"),
    ({"prompt": "猫" * 400}, "max_model_len"),
    ({"messages": []}, "messages"),
])
def test_bad_input_gets_400_and_server_keeps_serving(server, body, needle):
    url = server.url + ("/v1/chat/completions" if isinstance(body, dict) and "messages" in body else "/v1/completions")
    r = httpx.post(url, content=body if isinstance(body, bytes) else json.dumps(body), timeout=30,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert needle in err["message"] and set(err) == {"message", "type", "param", "code"}
    ok = httpx.post(server.url + "/v1/completions", json={"prompt": "吾輩は", "max_tokens": 3}, timeout=30)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] >= 1


def test_models_health_and_chat_fallback_template(server):
    assert httpx.get(server.url + "/v1/models").json()["data"][0]["id"] == "tiny"
    r = httpx.post(server.url + "/v1/chat/completions", timeout=30,
                   json={"model": "tiny", "messages": [{"role": "user", "content": "こんにちは"}], "max_tokens": 4})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"
    body = {"messages": [{"role": "user", "content": "こんにちは"}], "max_tokens": 4, "temperature": 0, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=30) as s:
        deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in s.iter_lines()
                  if line.startswith("data: {")]
    assert deltas[0]["role"] == "assistant" and len(deltas) == 4      # the role rides on the first token
    body.update(stream=False)
    again = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=30).json()
    assert "".join(d["content"] for d in deltas) == again["choices"][0]["message"]["content"]


def test_full_queue_answers_429(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=1)
    with ServerThread(build_app(llm, max_queue=1)) as s:
        async def main():
            async with httpx.AsyncClient(timeout=60) as c:
                body = {"prompt": "吾輩は", "max_tokens": 200, "stream": True, "ignore_eos": True}
                async with c.stream("POST", s.url + "/v1/completions", json=body) as a, \
                        c.stream("POST", s.url + "/v1/completions", json=body) as b:
                    assert a.status_code == b.status_code == 200
                    r = await c.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2})
                    return r
        r = asyncio.run(main())
        assert r.status_code == 429
        err = r.json()["error"]
        assert err["code"] == "queue_full" and "retry" in err["message"]
        h = wait_idle(s.url)
        assert h["free_blocks"] == h["total_blocks"]
        assert httpx.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=30).status_code == 200


def test_online_bench_against_server(server):
    prompts = [p for p, _ in mixed_prompts(8)]
    lens = [3 + i for i in range(8)]
    res = run_online(server.url, "tiny", prompts, lens, max_concurrency=4, use_tqdm=False)
    for key in ("request_throughput", "output_throughput", "total_token_throughput", "median_ttft_ms",
                "p99_ttft_ms", "mean_tpot_ms", "median_itl_ms", "p99_e2el_ms"):
        assert res[key] == res[key] and res[key] > 0
    assert res["failed"] == 0 and res["completed"] == 8
    assert res["output_lens"] == lens and res["total_output_tokens"] == sum(lens)   # ignore_eos: usage == asked


def test_cli_passes_the_chapters_features_to_the_engine():
    """`python -m minimal_engine.serve --quantization int8 --kv-cache-dtype int8 --speculative-config JSON`
    builds that engine; a greedy completion through it equals the same engine's offline greedy tokens; a request
    speculation cannot serve (logprobs) gets a 400 and the server stays up; bad flags are refused by the parser."""
    from minimal_engine.serve.cli import build_parser, make_llm
    args = build_parser().parse_args(["--dtype", "float32", "--quantization", "int8", "--kv-cache-dtype", "int8",
                                      "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}'])
    llm = make_llm(args)
    assert llm.config.quantization == "int8" and llm.config.kv_cache_dtype == "int8" and llm.engine.speculator is not None
    prompt = "吾輩は猫である。名前はまだ無い。吾輩は猫である。名前は"
    offline = LLM(dtype="float32", quantization="int8", kv_cache_dtype="int8").generate(
        prompt, SamplingParams(temperature=0, max_tokens=16), use_tqdm=False)[0].text
    with ServerThread(build_app(llm, max_queue=8)) as s:
        body = {"model": llm.model_name, "prompt": prompt, "max_tokens": 16, "temperature": 0}
        r = httpx.post(s.url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == offline
        bad = httpx.post(s.url + "/v1/completions", json=dict(body, logprobs=2), timeout=60)
        assert bad.status_code == 400 and "logprobs" in bad.text
        assert httpx.post(s.url + "/v1/completions", json=body, timeout=60).status_code == 200
    for bad_flags in (["--quantization", "int4"], ["--kv-cache-dtype", "fp16"], ["--speculative-config", "{ngram"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(bad_flags)
