"""The third attack round's remaining server defects (M6, L6, L7, L8, L14, L15), on loopback: each
test names what the server did before its fix."""
from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from minimal_engine import LLM
from minimal_engine.serve.app import ServerThread, build_app
from minimal_engine.serve.engine_loop import EngineLoop
from minimal_engine.serve.limits import MAX_PROMPT_LOGPROB_ENTRIES, ServeLimits
from tests.conftest import wait_idle


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=8)


@pytest.fixture(scope="module")
def server(llm):
    with ServerThread(build_app(llm, max_queue=8, served_model_name="tiny")) as s:
        yield s


def post(url: str, body: dict, path: str = "/v1/completions") -> httpx.Response:
    data = json.dumps(body).encode("utf-8", "surrogatepass")    # lone surrogates as JSON escapes
    return httpx.post(url + path, content=data, timeout=120,
                      headers={"Content-Type": "application/json"})


def error(r: httpx.Response, param: str) -> str:
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["param"] == param, e
    return e["message"]


def test_echo_logprobs_over_the_entry_limit_is_a_400_naming_echo(server):
    """M6. Before: 64 prompts x 250 tokens x top-20 (336,000 entries) were scored in one step and
    rendered on the event loop (15.9 MB for the attack's 500-token prompts), stalling every
    stream. After: a 400 naming echo and the limit; lm-evaluation-harness's request still works."""
    big = {"prompt": [[7] * 250] * 64, "echo": True, "logprobs": 20, "max_tokens": 0}
    message = error(post(server.url, big), "echo")
    assert f"16000 prompt tokens x 21 logprobs" in message
    assert str(MAX_PROMPT_LOGPROB_ENTRIES) in message
    asked = dict(big, echo=False, prompt_logprobs=20, max_tokens=1)
    del asked["logprobs"]
    assert "prompt_logprobs: 16000" in error(post(server.url, asked), "prompt_logprobs")
    r = post(server.url, {"prompt": [[7] * 250], "echo": True, "logprobs": 1, "max_tokens": 0})
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"][0]["logprobs"]["token_logprobs"]) == 250
    wait_idle(server.url)


def test_logit_bias_outside_the_vocabulary_names_logit_bias(server):
    """L6. Before: param "prompt" (the client's prompt was fine)."""
    r = post(server.url, {"prompt": "吾輩は", "max_tokens": 2, "logit_bias": {"99999": 1}})
    assert "logit_bias token ids" in error(r, "logit_bias")


def test_detokenize_over_the_id_cap_says_the_cap(server):
    """L7. Before: 65,537 valid ids were refused as "must be a list of token ids in [0, 383]"."""
    r = post(server.url, {"tokens": [1] * 65537}, "/detokenize")
    assert error(r, "tokens") == "'tokens' has 65537 ids; at most 65536 are allowed"
    assert post(server.url, {"tokens": [1] * 65536}, "/detokenize").status_code == 200


@pytest.mark.parametrize("field, value", [("guided_regex", "a\ud800"),
                                          ("guided_grammar", 'start: "\ud800"')])
def test_a_lone_surrogate_in_a_constraint_is_one_line_naming_it(server, field, value):
    """L8. Before: "structured_outputs: 'utf-8' codec can't encode character '\\ud800' in position
    0: surrogates not allowed" (Python's codec message)."""
    r = post(server.url, {"prompt": "吾輩は", "max_tokens": 2, field: value})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "lone surrogate (U+D800)" in message and "codec" not in message
    assert "\n" not in message


def test_speculative_refusals_name_the_field_sent(llama_dir):
    """L6. Before: with speculative decoding, a refused logit_bias, min_p or penalty had param
    "prompt" or "messages"."""
    llm = LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=2,
              speculative_config={"method": "ngram", "num_speculative_tokens": 2})
    with ServerThread(build_app(llm, max_queue=2)) as s:
        for field, value in (("logit_bias", {"5": 1}), ("min_p", 0.1), ("presence_penalty", 0.5),
                             ("frequency_penalty", -0.5), ("repetition_penalty", 1.2),
                             ("logprobs", 2)):
            r = post(s.url, {"prompt": "吾輩は", "max_tokens": 2, field: value})
            assert "speculative decoding" in error(r, field)
        r = post(s.url, {"messages": [{"role": "user", "content": "猫"}], "max_tokens": 2,
                         "min_p": 0.1}, "/v1/chat/completions")
        error(r, "min_p")


def test_echo_logprobs_under_prefix_caching_are_computed(llama_dir):
    """L6 and the low item "echo + logprobs refused under prefix caching (lm-eval cannot run there)".
    Before: a 400 (first naming "prompt", then "echo"). Now, as vLLM, such a request reads nothing
    from the cache: the prompt's logprobs equal those of a server without prefix caching, also after
    the prefix was cached by another request."""
    body = {"prompt": "吾輩は猫である。名前はまだ無い。" * 3, "max_tokens": 1, "echo": True, "logprobs": 1}
    answers = []
    for caching in (False, True):
        llm = LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=2, enable_prefix_caching=caching)
        with ServerThread(build_app(llm, max_queue=2)) as s:
            post(s.url, {"prompt": body["prompt"], "max_tokens": 1})          # caches the prefix
            r = post(s.url, body)
            assert r.status_code == 200, r.text
            answers.append(r.json()["choices"][0]["logprobs"]["token_logprobs"])
    assert answers[1] == pytest.approx(answers[0], abs=1e-5)


def test_a_request_cut_by_the_shutdown_deadline_gets_json_503(llama_dir):
    """L14. Before: a non-streaming request still running at the shutdown deadline got uvicorn's
    text/plain "500 Internal Server Error". A slow scheduling policy (0.1 s a step) keeps it
    running past the 1 s deadline."""
    def slow_running_first(running, waiting, budget, max_num_seqs):
        time.sleep(0.1)
        plan = []
        for rid, left in running + waiting[:max_num_seqs - len(running)]:
            if budget > 0:
                plan.append((rid, min(left, budget)))
                budget -= plan[-1][1]
        return plan

    llm = LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=2,
              scheduler_policy=slow_running_first)
    s = ServerThread(build_app(llm, max_queue=2, limits=ServeLimits(shutdown_timeout_s=1.0)))
    got = {}

    def ask():
        got["r"] = post(s.url, {"prompt": "吾輩は", "max_tokens": 100, "ignore_eos": True})

    client = threading.Thread(target=ask)
    client.start()
    time.sleep(1.0)                     # the request is generating (100 steps: about 10 s)
    s.stop()
    client.join(30)
    r = got["r"]
    assert r.status_code == 503 and r.headers["content-type"] == "application/json", r.text
    assert r.json()["error"]["message"] == "the server is shutting down"


class DeadWorker:
    exitcode = -9

    def is_alive(self) -> bool:
        return False


def test_an_idle_loop_notices_a_dead_worker(llm):
    """L15. Before: /health read only what a failed step had recorded, so after a tensor-parallel
    worker was killed it stayed 200 until one client's request failed on it. Now the idle loop
    asks engine_dead within its 0.5 s wake-up (tests/features/test_tensor_parallel.py kills a real
    worker); a stand-in engine whose model has one dead worker process."""
    class Model:
        error, procs = None, [DeadWorker()]

    class Runner:
        model = Model()

    class Engine:
        runner, block_manager, scheduler = Runner(), llm.engine.block_manager, llm.engine.scheduler

        def has_unfinished_requests(self) -> bool:
            return False

    class Owner:
        engine = Engine()

    loop = EngineLoop(Owner())
    loop.start()
    try:
        deadline = time.monotonic() + 5
        while loop.dead is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        loop.stop()
    assert loop.dead == "tensor parallelism failed: worker rank 1 is not running (exit code -9)"
