"""The third attack round and the clients round, against a server on loopback: a grammar that
crashed the process is a 400 and the server serves on; tool_choice and penalties that gave 500s are
400s naming the field; unknown paths (/v1/responses) are a JSON 404 that lists the routes, /version
answers; tool_choice "required" keeps the complete calls of an array that max_tokens cut."""
from __future__ import annotations

import importlib.metadata
import json

import httpx
import pytest

from minimal_engine import LLM, SamplingParams
from minimal_engine.serve.app import ServerThread, build_app
from minimal_engine.serve.messages import chat_prompt
from minimal_engine.serve.tools import MAX_PARALLEL_CALLS, ToolCall, parse_tool_choice, tool_message
from tests.conftest import wait_idle

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "吾輩は猫である"}]


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=8)


@pytest.fixture(scope="module")
def server(llm):
    with ServerThread(build_app(llm, max_queue=8, served_model_name="tiny")) as s:
        yield s


@pytest.fixture
def healthy(server):
    """After each test: the server still answers, with nothing left running and every block free."""
    yield server
    h = wait_idle(server.url)
    assert h["unfinished_requests"] == 0 and h["free_blocks"] == h["total_blocks"]
    ok = httpx.post(server.url + "/v1/completions", json={"prompt": "吾輩は", "max_tokens": 2},
                    timeout=30)
    assert ok.status_code == 200, ok.text


def post(server, body, path=CHAT) -> httpx.Response:
    data = (body if isinstance(body, str) else json.dumps(body)).encode("utf-8", "surrogatepass")
    return httpx.post(server.url + path, content=data, timeout=120,
                      headers={"Content-Type": "application/json"})


def error(r: httpx.Response, status: int, param) -> str:
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert e["param"] == param and e["type"] == "invalid_request_error", e
    return e["message"]


CHAIN = "start: r0\n" + "\n".join(f'r{i}: r{i + 1} "x"' for i in range(3000)) + '\nr3000: "a"'


def test_a_3000_rule_grammar_is_a_400_and_the_server_serves_on(healthy):
    """Before: the server process died (SIGSEGV in llguidance; the client: 'Server disconnected').
    After: 400 naming the field and the limit; the fixture then checks the server still answers."""
    r = post(healthy, {"messages": MESSAGES, "max_tokens": 5, "guided_grammar": CHAIN})
    message = error(r, 400, "guided_grammar")
    assert message == "'guided_grammar': the grammar has 3002 rules; at most 1000 are allowed"
    r = post(healthy, {"prompt": "吾輩は", "max_tokens": 5,
                       "structured_outputs": {"choice": [f"c{i}" for i in range(100_000)]}},
             "/v1/completions")
    assert "choice has 100000 items; at most 1000" in error(r, 400, "structured_outputs")


TOOLS = [{"type": "function", "function": {"name": "count", "parameters": {
    "type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["n"]}}}]


@pytest.mark.parametrize("choice", [
    {"type": "function", "function": "count"},              # before: 500 (AttributeError)
    {"type": "function", "function": {"name": ["count"]}},  # before: 500 (TypeError, unhashable)
    {"type": "function", "function": {"name": "other"}},
])
def test_a_malformed_tool_choice_is_a_400(healthy, choice):
    r = post(healthy, {"messages": MESSAGES, "tools": TOOLS, "tool_choice": choice})
    assert "{'name': one of the names in 'tools'}" in error(r, 400, "tool_choice")


def test_a_lone_surrogate_in_a_tool_name_is_a_400(healthy):
    """Before: generated, then 500 (UnicodeEncodeError) rendering the answer, which has the name."""
    body = json.dumps({"messages": MESSAGES, "max_tokens": 8, "tool_choice": "required",
                       "tools": [{"type": "function", "function": {"name": "NAME"}}]})
    r = post(healthy, body.replace("NAME", "\\ud800"))
    assert "lone surrogate" in error(r, 400, "tools[0].function.name")


@pytest.mark.parametrize("penalty", [1e-300, 1e-3, 0.0, 1e300, 1000])
def test_repetition_penalties_the_sampler_cannot_survive_are_a_400(healthy, penalty):
    """Before: 1e-300 at temperature 1 was a 500 ('probability tensor contains inf, nan')."""
    r = post(healthy, {"messages": MESSAGES, "max_tokens": 4, "temperature": 1.0,
                       "repetition_penalty": penalty})
    assert "in [0.01, 100]" in error(r, 400, "repetition_penalty")
    with pytest.raises(ValueError, match=r"repetition_penalty must be greater than zero, in \[0"):
        SamplingParams(repetition_penalty=penalty)


def test_penalties_at_the_edges_of_the_range_still_generate(healthy):
    for penalty in (0.01, 100):
        r = post(healthy, {"messages": MESSAGES, "max_tokens": 4, "temperature": 1.0, "seed": 1,
                           "repetition_penalty": penalty})
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("method, path", [("POST", "/v1/responses"), ("POST", "/v1/embeddings"),
                                          ("GET", "/v2/anything")])
def test_an_unknown_path_is_a_json_404_listing_what_is_served(healthy, method, path):
    """Before: 404 {"message": "Not Found"}, which sent Responses-API clients nowhere."""
    r = httpx.request(method, healthy.url + path, json={}, timeout=10)
    assert r.status_code == 404
    e = r.json()["error"]
    assert e["code"] == "404" and e["message"].startswith(f"{method} {path} is not implemented")
    for route in ("POST /v1/chat/completions", "POST /v1/completions", "GET /v1/models",
                  "GET /version"):
        assert route in e["message"], e["message"]


def test_version_answers_as_vllm_does(healthy):
    r = httpx.get(healthy.url + "/version", timeout=10)
    assert r.status_code == 200
    assert r.json() == {"version": importlib.metadata.version("minimal-engine")}


def required(parallel: bool = True) -> ToolCall:
    body = {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": parallel}
    return parse_tool_choice(body)


def test_required_keeps_the_complete_calls_of_a_cut_array():
    """Before: any array cut by max_tokens gave tool_calls [] (the client round's D3)."""
    cut = '[{"name":"count","parameters":{"n":1}}, {"name":"count","parameters":{"n":2}},{"na'
    message, reason = tool_message(required(), cut, "length")
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
           for c in message["tool_calls"]]
    assert got == [("count", {"n": 1}), ("count", {"n": 2})] and reason == "length"
    whole = '[{"name":"count","parameters":{"n":3}}]'
    message, reason = tool_message(required(), whole, "stop")
    assert len(message["tool_calls"]) == 1 and reason == "tool_calls"
    assert tool_message(required(), '[{"name":"cou', "length")[0]["tool_calls"] == []


def test_required_allows_at_most_max_parallel_calls(llm):
    def takes(call: ToolCall, n: int) -> bool:
        m = llm.engine.grammars.matcher(call.constraint)
        text = "[" + ",".join(['{"name":"count","parameters":{"n":1}}'] * n) + "]"
        try:
            for t in llm.tokenizer.encode(text):
                m.accept(t)
            m.allowed()              # the mask pool has taken the tokens (a refused one raises)
        except ValueError:
            return False
        return m.matcher.is_accepting()
    assert takes(required(), MAX_PARALLEL_CALLS) and not takes(required(), MAX_PARALLEL_CALLS + 1)
    assert takes(required(False), 1) and not takes(required(False), 2)


def test_required_over_http_returns_the_calls_the_model_completed(healthy, llama_dir):
    """The server's tool_calls: the complete items of the same greedy constrained text offline
    (from an LLM of its own: the server's engine belongs to its engine-loop thread)."""
    llm = LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=1)
    for max_tokens in (20, 45, 200):
        r = post(healthy, {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required",
                           "max_tokens": max_tokens, "temperature": 0})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        params = SamplingParams(temperature=0, max_tokens=max_tokens,
                                structured_outputs=required().constraint)
        out = llm.generate([chat_prompt(llm.tokenizer, MESSAGES)], params, use_tqdm=False)[0]
        ends = [i + 1 for i, ch in enumerate(out.text) if ch == "}"]
        whole = [json.loads(out.text[:j] + "]") for j in ends if _is_list(out.text[:j] + "]")]
        expected = whole[-1] if whole else []
        got = [{"name": c["function"]["name"], "parameters": json.loads(c["function"]["arguments"])}
               for c in choice["message"]["tool_calls"]]
        assert got == expected, (out.text, got)
        assert choice["finish_reason"] == ("tool_calls" if out.finish_reason == "stop"
                                           else out.finish_reason)


def _is_list(text: str) -> bool:
    try:
        return isinstance(json.loads(text), list)
    except ValueError:
        return False
