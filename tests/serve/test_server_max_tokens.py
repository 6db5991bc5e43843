"""max_tokens as vLLM reads it: chat without max_tokens may use the rest of the context (not 16);
completions keep OpenAI's default of 16; a max_tokens that does not fit beside the prompt is a 400
that names the numbers, not a silent cut (the clients round's D1 and D5)."""
from __future__ import annotations

import httpx
import pytest

from minimal_engine import LLM
from minimal_engine.serve.app import ServerThread, build_app
from tests.conftest import wait_idle


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=4)


@pytest.fixture(scope="module")
def server(llm):
    with ServerThread(build_app(llm, max_queue=4, served_model_name="tiny")) as s:
        yield s


@pytest.fixture
def healthy(server):
    yield server
    h = wait_idle(server.url)
    assert h["unfinished_requests"] == 0 and h["free_blocks"] == h["total_blocks"]


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=120)


def prompt_tokens(server, messages: list) -> int:
    r = post(server, "/tokenize", {"model": "tiny", "messages": messages})
    assert r.status_code == 200, r.text
    return r.json()["count"]


MESSAGES = [{"role": "user", "content": "吾輩は猫である。名前はまだ無い。"}]


def test_chat_without_max_tokens_may_use_the_rest_of_the_context(healthy, llm):
    """Before: 16 tokens and finish_reason "length", whatever the context left."""
    r = post(healthy, "/v1/chat/completions", {"messages": MESSAGES, "temperature": 0,
                                               "ignore_eos": True})
    assert r.status_code == 200, r.text
    room = llm.config.max_model_len - prompt_tokens(healthy, MESSAGES)
    assert r.json()["usage"]["completion_tokens"] == room > 16
    assert r.json()["choices"][0]["finish_reason"] == "length"


def test_completions_keep_the_default_of_16(healthy):
    r = post(healthy, "/v1/completions", {"prompt": "吾輩は", "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 16


@pytest.mark.parametrize("route, field", [("/v1/chat/completions", "max_tokens"),
                                          ("/v1/chat/completions", "max_completion_tokens"),
                                          ("/v1/completions", "max_tokens")])
def test_max_tokens_past_the_context_is_a_400_naming_the_numbers(healthy, llm, route, field):
    """Before: 200 OK, the output silently cut where the context ended (finish_reason "length")."""
    body = {"messages": MESSAGES} if "chat" in route else {"prompt": "吾輩は猫である。"}
    n = (prompt_tokens(healthy, MESSAGES) if "chat" in route
         else len(llm.tokenizer.encode("吾輩は猫である。")))
    most = llm.config.max_model_len
    asked = most - n + 1
    r = post(healthy, route, {**body, field: asked})
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["param"] == field and e["message"] == (
        f"'max_tokens' or 'max_completion_tokens' is too large: {asked}. This model's maximum "
        f"context length is {most} tokens and your request has {n} input tokens ({asked} > "
        f"{most} - {n})")
    r = post(healthy, route, {**body, field: asked - 1, "ignore_eos": True, "temperature": 0})
    assert r.status_code == 200, r.text                 # exactly the rest of the context fits
    assert r.json()["usage"]["completion_tokens"] == asked - 1


def test_a_prompt_that_fills_the_context_is_a_400(healthy, llm):
    long = [{"role": "user", "content": "吾輩は猫である。" * 200}]
    for body in ({"messages": long}, {"messages": long, "max_tokens": 1}):
        r = post(healthy, "/v1/chat/completions", body)
        assert r.status_code == 400, r.text
        assert f"max_model_len is {llm.config.max_model_len}" in r.json()["error"]["message"]


def test_min_tokens_above_the_chat_default_is_a_400(healthy, llm):
    r = post(healthy, "/v1/chat/completions", {"messages": MESSAGES,
                                               "min_tokens": llm.config.max_model_len})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "min_tokens"
