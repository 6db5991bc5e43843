"""Issue 29 (second attack round) against a server on loopback: wrong-typed fields holding a lone surrogate,
seeds at the int64 edge with n > 1, requests that can never be admitted, and size limits on every input form."""
from __future__ import annotations

import json

import httpx
import pytest

from minimal_engine import LLM
from minimal_engine.serve.app import ServerThread, build_app
from minimal_engine.serve.limits import ServeLimits
from tests.conftest import wait_idle

LIMITS = ServeLimits(max_body_bytes=4_000_000, body_timeout_s=2.0, header_timeout_s=2.0)
MAX_NUM_SEQS, MAX_QUEUE = 4, 4


@pytest.fixture(scope="module")
def server(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=MAX_NUM_SEQS)
    with ServerThread(build_app(llm, max_queue=MAX_QUEUE, served_model_name="tiny", limits=LIMITS)) as s:
        yield s


@pytest.fixture
def healthy(server):
    yield server
    h = wait_idle(server.url)
    assert h["unfinished_requests"] == 0 and h["free_blocks"] == h["total_blocks"]


def post(server, body: str | dict, path="/v1/completions"):
    content = body if isinstance(body, str) else json.dumps(body)
    return httpx.post(server.url + path, content=content.encode("utf-8", "surrogatepass"),
                      headers={"Content-Type": "application/json"}, timeout=60)


COMPLETION_FIELDS = ["max_tokens", "top_k", "seed", "logprobs", "n", "temperature", "top_p", "prompt_logprobs"]


@pytest.mark.parametrize("name", COMPLETION_FIELDS + ["max_completion_tokens"])
def test_lone_surrogate_in_a_wrong_typed_field_is_a_400(healthy, name):
    """#9: the value "\\udfff" (sent as the JSON escape) in a numeric field gave 500 (UnicodeEncodeError)."""
    chat = name == "max_completion_tokens"
    base = {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"}
    text = json.dumps(base)[:-1] + f', "{name}": "\\udfff"}}'
    r = post(healthy, text, "/v1/chat/completions" if chat else "/v1/completions")
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == name


def test_seed_at_the_int64_edge_with_n_greater_than_one(healthy):
    """#10: per-choice seeds (seed + i) left the int64 range: 500."""
    r = post(healthy, {"prompt": "hi", "max_tokens": 2, "n": 3, "seed": 2 ** 63 - 1})
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"]) == 3


def test_a_request_larger_than_the_server_can_hold_is_a_400_not_a_429(healthy):
    """#8: n > max_num_seqs + max_queue can never be admitted; 'retry later' (429) was wrong."""
    r = post(healthy, {"prompt": "hi", "max_tokens": 2, "n": MAX_NUM_SEQS + MAX_QUEUE + 1})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "n"
    r = post(healthy, {"prompt": ["hi"] * (MAX_NUM_SEQS + MAX_QUEUE + 1), "max_tokens": 2})
    assert r.status_code == 400, r.text


def test_tokenize_messages_has_the_same_length_cap_as_prompt(healthy):
    """#7: /tokenize with messages had no cap (4 MB took seconds of the preparation pool)."""
    big = "あ" * 300_000
    r = post(healthy, {"model": "tiny", "prompt": big}, "/tokenize")
    assert r.status_code == 400, r.text
    r = post(healthy, {"model": "tiny", "messages": [{"role": "user", "content": big}]}, "/tokenize")
    assert r.status_code == 400, r.text


def test_many_empty_messages_are_refused_before_templating(healthy):
    """#7: the character pre-check summed contents, so 100k empty messages passed it."""
    msgs = [{"role": "user", "content": ""}] * 100_000
    r = post(healthy, {"messages": msgs, "max_tokens": 1}, "/v1/chat/completions")
    assert r.status_code == 400, r.text
    assert "100000 messages: at most" in r.json()["error"]["message"], "refused by the count, before templating"


def _stalled_stream(url: str, body: dict) -> "socket.socket":
    """A streaming request from a client that keeps its socket open and never reads (a small receive buffer, so
    the server's writes back up soon)."""
    import socket
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    data = json.dumps(body).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    return sock


@pytest.mark.parametrize("write_timeout_s, freed", [(1.0, True), (1e6, False)])
def test_a_streaming_client_that_never_reads_loses_its_slots_after_the_write_deadline(llama_dir, write_timeout_s,
                                                                                       freed):
    """#4: a client that never reads held max_num_seqs + max_queue slots for good (everyone else: 429 while the
    engine idled). With a write deadline its requests are aborted and the slots and blocks come back. The second
    case (a deadline that never comes) shows the stall is real: the slots stay taken."""
    import time
    llm = LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=32)
    app = build_app(llm, max_queue=32, limits=ServeLimits(write_timeout_s=write_timeout_s))
    with ServerThread(app) as s:      # ~7 MB of events: more than the socket buffers and uvicorn's can hold
        sock = _stalled_stream(s.url, {"prompt": "a b c", "max_tokens": 240, "n": 64, "stream": True,
                                       "ignore_eos": True, "temperature": 0, "logprobs": 5})
        try:
            probe = {"prompt": "a", "max_tokens": 2}
            deadline, codes = time.monotonic() + (20 if freed else 6), []
            while time.monotonic() < deadline:
                codes.append(httpx.post(s.url + "/v1/completions", json=probe, timeout=30).status_code)
                if codes[-1] == 200 and 429 in codes:
                    break
                time.sleep(0.2)
            assert 429 in codes, codes                      # the stalled stream did hold every slot
            assert (codes[-1] == 200) == freed, codes[-12:]
            if freed:
                h = wait_idle(s.url)
                assert h["unfinished_requests"] == 0 and h["free_blocks"] == h["total_blocks"]
        finally:
            sock.close()


@pytest.mark.parametrize("shutdown_timeout_s", [1.0, None])
def test_shutdown_has_a_deadline_even_with_a_client_that_never_reads(llama_dir, shutdown_timeout_s):
    """#5: stopping the server (SIGTERM in the CLI: the same should_exit) drains for shutdown_timeout_s, then
    cancels what is left and exits. Without a deadline (None, the case before) it waits for the stalled client."""
    import time
    llm = LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=32)
    limits = ServeLimits(write_timeout_s=1e6, shutdown_timeout_s=shutdown_timeout_s)
    s = ServerThread(build_app(llm, max_queue=32, limits=limits))
    sock = _stalled_stream(s.url, {"prompt": "a b c", "max_tokens": 240, "n": 64, "stream": True,
                                   "ignore_eos": True, "temperature": 0, "logprobs": 5})
    try:
        time.sleep(3)                               # the stream has backed up
        start = time.monotonic()
        s.stop(timeout_s=6)
        assert s.thread.is_alive() == (shutdown_timeout_s is None)
        if shutdown_timeout_s is not None:
            assert time.monotonic() - start < 6
    finally:
        sock.close()
        s.stop(timeout_s=15)
        assert not s.thread.is_alive()
