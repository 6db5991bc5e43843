"""The online bench client never turns a server's failure into a completed request with zero tokens (issue 32):
fakes of each behaviour seen from llama-server and others, through httpx's MockTransport, and the project's own
server for the token-id prompts (issue 28 #7: a random prompt arrives at exactly its length)."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from minimal_engine.bench.online import request_body, send_one
from minimal_engine.bench.report import format_table
from minimal_engine.bench.workload import prompt_inputs, random_requests


def sse(*events, done=True) -> bytes:
    lines = [f"data: {json.dumps(e)}\n\n" for e in events] + (["data: [DONE]\n\n"] if done else [])
    return "".join(lines).encode()


def token(text, finish=None):
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


USAGE = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}


def fetch(body: bytes, status: int = 200):
    async def go():
        transport = httpx.MockTransport(lambda request: httpx.Response(status, content=body))
        async with httpx.AsyncClient(transport=transport) as client:
            return await send_one(client, "http://fake/v1/completions", request_body("/v1/completions", "m", "x", 3))
    return asyncio.run(go())


def test_a_normal_stream_counts_its_token_chunks_only():
    finish_only = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                   "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}
    m = fetch(sse(token("a"), token("b"), token("c"), finish_only))
    assert m.error is None and m.text == "abc" and m.num_output_tokens == 3
    assert len(m.token_times) == 3          # the finish- and usage-only final chunk is no token and adds no time
    held = fetch(sse(token("a"), token(""), token("c", "length"), USAGE))   # a token whose bytes make no character yet
    assert held.error is None and len(held.token_times) == 3


@pytest.mark.parametrize("body, status, says", [
    (sse(token("a"), {"error": {"code": 500, "message": "Context size has been exceeded."}}, done=False), 200,
     "Context size has been exceeded"),
    (sse(token("a"), token("b"), done=False), 200, "without data: [DONE]"),
    (sse({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}, USAGE | {"usage": {"completion_tokens": 0}}),
     200, "no tokens received"),
    (sse(token("a"), {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 0}}), 200, "0 output tokens"),
    (b'{"error": {"message": "busy"}}', 503, "HTTP 503"),
])
def test_server_failures_are_failed_requests(body, status, says):
    m = fetch(body, status)
    assert m.error is not None and says in m.error, m.error


def test_the_table_shows_failed_requests_and_why():
    row = {"backend": "openai", "max_concurrency": 2, "num_prompts": 4, "failed": 4, "output_throughput": 0.0,
           "tok_s_per_user": float("nan"), "median_ttft_ms": float("nan"), "median_tpot_ms": float("nan"),
           "median_itl_ms": float("nan"), "median_e2el_ms": float("nan"),
           "errors": ["server error in the stream: Context size has been exceeded."]}
    text = format_table([row])
    assert "4 of 4 requests failed" in text and "Context size" in text


def test_random_prompts_go_as_token_ids_to_completions_and_arrive_at_their_length(llama_dir):
    from minimal_engine import LLM
    from minimal_engine.bench.online import run_online
    from minimal_engine.serve.app import ServerThread, build_app
    llm = LLM(llama_dir, dtype="float32", device="cpu")
    reqs = random_requests(4, 64, 4, len(llm.tokenizer), seed=1, avoid_ids=llm.model_config.eos_token_ids)
    inputs = prompt_inputs(reqs, llm.tokenizer, "/v1/completions")
    assert inputs == [r.prompt_ids for r in reqs]
    assert all(isinstance(t, str) for t in prompt_inputs(reqs, llm.tokenizer, "/v1/chat/completions"))
    with ServerThread(build_app(llm)) as s:
        res = run_online(s.url, llm.model_name, inputs, [4] * 4, max_concurrency=2, use_tqdm=False)
    assert res["failed"] == 0 and res["total_input_tokens"] == 4 * 64
