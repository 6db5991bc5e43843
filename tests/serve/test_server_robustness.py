"""Issue 19, HTTP side, against a real server on loopback: one request cannot fail the others, abuse is
refused cheaply (body size, prompt length, slow or silent connections, foreign Host, text/plain), every
error is OpenAI-style JSON, clients that leave are aborted. Every wait has a timeout and every loop a
count, and each test ends with the server idle and every KV block free."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest

from minimal_engine import LLM
from minimal_engine.serve.app import ServerThread, build_app
from minimal_engine.serve.limits import ServeLimits
from tests.conftest import fail_rows_with_top_k, wait_idle

LIMITS = ServeLimits(max_body_bytes=64_000, body_timeout_s=1.0, header_timeout_s=1.0)
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=8)


@pytest.fixture(scope="module")
def server(llm):
    with ServerThread(build_app(llm, max_queue=8, served_model_name="tiny", limits=LIMITS)) as s:
        yield s


@pytest.fixture
def healthy(server):
    """After each test: the server answers, nothing is left running and every KV block is free."""
    yield server
    h = wait_idle(server.url)
    assert h["unfinished_requests"] == 0 and h["running"] == 0 and h["waiting"] == 0
    assert h["free_blocks"] == h["total_blocks"]
    ok = httpx.post(server.url + "/v1/completions", json={"prompt": "吾輩は", "max_tokens": 2}, timeout=30)
    assert ok.status_code == 200



def post(server, body, path="/v1/completions", **kw):
    content = body if isinstance(body, bytes) else json.dumps(body)
    return httpx.post(server.url + path, content=content, headers=kw.pop("headers", JSON), timeout=30, **kw)


def assert_error(r, status: int, param=None, code=None, type_="invalid_request_error"):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param and err["type"] == type_
    if code is not None:
        assert err["code"] == code
    return err


def greedy(server, prompt, n=8, **extra):
    r = post(server, {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, **extra})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


# ---- 1. one request cannot fail the others; internal failures are 500 ---------------------------------
def test_tiny_temperature_is_greedy_and_spares_the_others(healthy):
    expected = greedy(healthy, "吾輩は")

    async def main():
        async with httpx.AsyncClient(timeout=30) as c:
            body = {"prompt": "吾輩は", "max_tokens": 8, "ignore_eos": True}
            return await asyncio.gather(*(c.post(healthy.url + "/v1/completions", json={**body, "temperature": t})
                                          for t in (0, 1e-38, 1e-300, 0)))

    for r in asyncio.run(main()):
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == expected


def test_one_failing_request_alone_gets_500(healthy, monkeypatch):
    fail_rows_with_top_k(monkeypatch, top_k=7)
    expected = greedy(healthy, "東京の空は", 30)

    async def main():
        async with httpx.AsyncClient(timeout=30) as c:
            good = c.post(healthy.url + "/v1/completions",
                          json={"prompt": "東京の空は", "max_tokens": 30, "temperature": 0, "ignore_eos": True})
            bad = c.post(healthy.url + "/v1/completions",
                         json={"prompt": "吾輩は", "max_tokens": 30, "top_k": 7, "ignore_eos": True})
            return await asyncio.gather(good, bad)

    good, bad = asyncio.run(main())
    assert good.status_code == 200 and good.json()["choices"][0]["text"] == expected
    assert_error(bad, 500, code="server_error", type_="server_error")


def test_a_failed_step_is_a_500_not_a_400(healthy, llm, monkeypatch):
    def broken(sched):
        raise RuntimeError("simulated kernel failure")

    monkeypatch.setattr(llm.engine.runner, "run", broken)
    r = post(healthy, {"prompt": "吾輩は", "max_tokens": 4})
    err = assert_error(r, 500, code="server_error", type_="server_error")
    assert "simulated kernel failure" in err["message"]
    monkeypatch.undo()


# ---- 2. body size, prompt length, tokenizing off the event loop ------------------------------------
def test_large_body_is_refused_before_parsing(healthy):
    big = json.dumps({"prompt": "a" * 100_000}).encode()
    assert_error(post(healthy, big), 413, code="request_too_large")

    def chunks():                                   # no Content-Length: counted while it streams in
        for _ in range(100):
            yield b" " * 1000
    assert_error(httpx.post(healthy.url + "/v1/completions", content=chunks(), headers=JSON, timeout=30),
                 413, code="request_too_large")


def test_prompt_too_long_to_fit_is_refused_before_tokenizing(healthy, llm, monkeypatch):
    calls = []
    real = llm.tokenizer.encode
    monkeypatch.setattr(llm.tokenizer, "encode", lambda text: calls.append(len(text)) or real(text))
    limit = llm.config.max_model_len * llm.tokenizer.max_token_chars
    err = assert_error(post(healthy, {"prompt": "a" * (limit + 1)}), 400, param="prompt")
    assert "characters" in err["message"] and not calls
    err = assert_error(post(healthy, {"messages": [{"role": "user", "content": "a" * (limit + 1)}]},
                            "/v1/chat/completions"), 400, param="messages")
    assert not calls


def test_tokenizing_does_not_block_the_event_loop(healthy, llm, monkeypatch):
    entered, release = threading.Event(), threading.Event()
    real = llm.tokenizer.encode

    def slow(text):
        if text == "slow prompt":
            entered.set()
            release.wait(20)
        return real(text)

    monkeypatch.setattr(llm.tokenizer, "encode", slow)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", post(healthy, {"prompt": "slow prompt", "max_tokens": 2})),
                         daemon=True)
    t.start()
    try:
        assert entered.wait(20)
        assert httpx.get(healthy.url + "/health", timeout=3).status_code == 200   # answered while tokenizing
    finally:
        release.set()
        t.join(30)
    assert result["r"].status_code == 200


# ---- 3. non-streaming clients that leave are aborted ------------------------------------------------
def test_non_streaming_clients_that_leave_are_aborted(healthy):
    before = httpx.get(healthy.url + "/health", timeout=5).json()["aborted"]
    body = json.dumps({"prompt": "吾輩は", "max_tokens": 240, "ignore_eos": True}).encode()
    raw = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    socks = []
    try:
        for _ in range(6):
            s = socket.create_connection(healthy.url.removeprefix("http://").split(":"), timeout=10)
            s.sendall(raw)
            socks.append(s)
        deadline = time.monotonic() + 20          # wait until all six are in the engine, then leave
        while httpx.get(healthy.url + "/health", timeout=5).json()["unfinished_requests"] < 6:
            assert time.monotonic() < deadline, "the requests never started"
            time.sleep(0.02)
    finally:
        for s in socks:
            s.close()
    h = wait_idle(healthy.url)
    assert h["aborted"] - before == 6 and h["unfinished_requests"] == 0


# ---- 6. malformed bodies: OpenAI-style 4xx JSON, never a plain-text 500 -----------------------------
@pytest.mark.parametrize("body, path, param", [
    (b"[" * 60_000, "/v1/completions", None),          # RecursionError before
    (b'{"prompt": "a", "max_tokens": ' + b"9" * 5000 + b"}", "/v1/completions", None),
    (b'{"prompt": "a", "temperature": NaN}', "/v1/completions", None),
    ({"model": ["m"], "prompt": "a"}, "/v1/completions", "model"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "/v1/chat/completions", "messages"),
])
def test_malformed_bodies_are_json_400s(healthy, body, path, param):
    assert_error(post(healthy, body, path), 400, param=param)


def test_a_failing_chat_template_is_a_400(healthy, llm, monkeypatch):
    monkeypatch.setattr(llm.tokenizer.hf, "chat_template", "{{ raise_exception('no system role here') }}")
    err = assert_error(post(healthy, {"messages": [{"role": "system", "content": "x"}]}, "/v1/chat/completions"),
                       400, param="messages")
    assert "no system role here" in err["message"]


def test_unknown_paths_and_methods_are_json(healthy):
    assert_error(httpx.get(healthy.url + "/v1/nothing", timeout=5), 404, code="404")
    assert_error(httpx.get(healthy.url + "/v1/completions", timeout=5), 405, code="405")


# ---- 7. every field checked, with `param` naming it -------------------------------------------------
@pytest.mark.parametrize("extra, param", [
    ({"seed": 1 << 64}, "seed"), ({"seed": True}, "seed"), ({"seed": 1.5}, "seed"),
    ({"stop_token_ids": "abc"}, "stop_token_ids"), ({"stop_token_ids": 5}, "stop_token_ids"),
    ({"stop_token_ids": [True, False]}, "stop_token_ids"), ({"stop_token_ids": [10 ** 9]}, "stop_token_ids"),
    ({"stop_token_ids": list(range(2000))}, "stop_token_ids"),
    ({"ignore_eos": "false"}, "ignore_eos"), ({"stream": "yes"}, "stream"),
    ({"stream_options": []}, "stream_options"), ({"temperature": 1e-38, "top_p": 0}, "top_p"),
    ({"max_tokens": 10 ** 6}, "max_tokens"),
])
def test_bad_fields_name_themselves(healthy, extra, param):
    assert_error(post(healthy, {"prompt": "吾輩は", **extra}), 400, param=param)


def test_lone_surrogate_and_image_parts(healthy):
    err = assert_error(post(healthy, b'{"prompt": "abc\\ud800"}'), 400, param="prompt")
    assert "lone surrogate (U+D800)" in err["message"]
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    err = assert_error(post(healthy, {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}]},
                            "/v1/chat/completions"), 400, param="messages")
    assert "image_url" in err["message"]


def test_null_max_completion_tokens_does_not_override_max_tokens(healthy):
    r = post(healthy, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                       "max_completion_tokens": None, "ignore_eos": True}, "/v1/chat/completions")
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3


# ---- 8. browser-facing safety ------------------------------------------------------------------------
def test_foreign_host_header_is_refused(healthy):
    port = healthy.url.rsplit(":", 1)[1]
    err = assert_error(httpx.get(healthy.url + "/health", headers={"Host": f"evil.example:{port}"}, timeout=5),
                       400, code="invalid_host")
    assert "evil.example" in err["message"]
    assert_error(post(healthy, {"prompt": "a"}, headers={**JSON, "Host": "rebind.example"}), 400, code="invalid_host")
    for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
        assert httpx.get(healthy.url + "/health", headers={"Host": host}, timeout=5).status_code == 200


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", None])
def test_post_must_be_application_json(healthy, ctype):
    headers = {} if ctype is None else {"Content-Type": ctype}
    assert_error(post(healthy, {"prompt": "a"}, headers=headers), 415, code="unsupported_media_type")
    assert post(healthy, {"prompt": "a", "max_tokens": 1},
                headers={"Content-Type": "application/json; charset=utf-8"}).status_code == 200


def raw_connection(server) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


@pytest.mark.parametrize("sent", [b"", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"])
def test_silent_or_slow_connections_are_closed(healthy, sent):
    with raw_connection(healthy) as s:
        s.sendall(sent)
        t0 = time.monotonic()
        assert s.recv(100) == b""                  # closed by the server (a socket timeout fails the test)
        assert time.monotonic() - t0 < 9


def test_slow_body_gets_408(healthy):
    with raw_connection(healthy) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"prompt\":")
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            part = s.recv(4096)
            if not part:
                break
            data += part
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and json.loads(rest)["error"]["code"] == "request_timeout"


def test_interactive_docs_are_off(healthy):
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(healthy.url + path, timeout=5).status_code == 404


def test_many_abusive_requests_leave_the_server_healthy(healthy):
    """A bounded mix of everything above, concurrently; the `healthy` fixture then checks for leaks."""
    async def main():
        async with httpx.AsyncClient(timeout=30) as c:
            u = healthy.url + "/v1/completions"
            jobs = []
            for i in range(8):
                jobs += [c.post(u, content=b"[" * 50_000, headers=JSON),
                         c.post(u, content=json.dumps({"prompt": "x" * 70_000}), headers=JSON),
                         c.post(u, json={"prompt": "吾輩は", "temperature": 1e-38, "max_tokens": 4}),
                         c.post(u, json={"prompt": "吾輩は", "seed": 1 << 70}),
                         c.post(u, content=b'{"prompt": "a"}', headers={"Content-Type": "text/plain"})]
            return await asyncio.gather(*jobs)

    answers = asyncio.run(main())
    assert sorted({r.status_code for r in answers}) == [200, 400, 413, 415]
    assert all(r.headers["content-type"] == "application/json" for r in answers)
