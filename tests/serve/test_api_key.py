"""A shared server with an API key (issue: classroom workshops): `Authorization: Bearer KEY` on
every route but /health and /metrics, 401 with OpenAI's error body otherwise; the bench client and
the lab kit send the key; the Host check allows the address a connection reached. Servers run
in-process on 127.0.0.1."""
from __future__ import annotations

import httpx
import pytest

from minimal_engine import LLM
from minimal_engine.bench.online import run_online
from minimal_engine.serve.app import ServerThread, build_app
from minimal_engine.serve.limits import ServeLimits

KEY = "class-key-7f3a"
BODY = {"model": "tiny", "prompt": "吾輩は", "max_tokens": 3, "temperature": 0}
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "こんにちは"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=8)


@pytest.fixture(scope="module")
def server(llm):
    app = build_app(llm, served_model_name="tiny", limits=ServeLimits(api_key=KEY))
    with ServerThread(app) as s:
        yield s


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def assert_401(r: httpx.Response) -> str:
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["code"] == "invalid_api_key"
    assert err["param"] is None
    assert KEY not in r.text                        # the right key is never echoed
    return err["message"]


@pytest.mark.parametrize("method,path,body", [("POST", "/v1/completions", BODY),
                                              ("POST", "/v1/chat/completions", CHAT),
                                              ("GET", "/v1/models", None),
                                              ("GET", "/v1/models/tiny", None),
                                              ("POST", "/tokenize", {"prompt": "a"})])
def test_no_key_is_refused_with_openai_error(server, method, path, body):
    r = httpx.request(method, server.url + path, json=body, timeout=10)
    assert "Authorization: Bearer" in assert_401(r)


@pytest.mark.parametrize("header", [f"Bearer {KEY}x", "Bearer", f"Basic {KEY}", KEY,
                                    f"Bearer  {KEY}", f"Bearer {KEY[:-1]}"])
def test_wrong_key_is_refused(server, header):
    r = httpx.post(server.url + "/v1/completions", json=BODY, headers={"Authorization": header},
                   timeout=10)
    assert_401(r)


def test_right_key_is_served(server):
    r = httpx.post(server.url + "/v1/completions", json=BODY, headers=bearer(KEY), timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    r = httpx.post(server.url + "/v1/chat/completions", json=CHAT,
                   headers={"Authorization": f"bearer {KEY}"}, timeout=60)  # any case of "Bearer"
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"
    models = httpx.get(server.url + "/v1/models", headers=bearer(KEY), timeout=10).json()
    assert models["data"][0]["id"] == "tiny"


def test_health_and_metrics_need_no_key(server):
    h = httpx.get(server.url + "/health", timeout=10)
    assert h.status_code == 200 and h.json()["status"] == "ok"
    m = httpx.get(server.url + "/metrics", timeout=10)
    assert m.status_code == 200 and "vllm:num_requests_running" in m.text
    assert httpx.get(server.url + "/version", timeout=10).status_code != 401   # public in vLLM too


def test_foreign_host_is_still_refused_before_the_key(server):
    r = httpx.get(server.url + "/v1/models", headers={**bearer(KEY), "Host": "evil.example"},
                  timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_host"


def test_openai_client_with_the_key(server):
    import openai
    ok = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, timeout=60, max_retries=0)
    assert ok.completions.create(**BODY).usage.completion_tokens == 3
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="EMPTY", timeout=60, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.completions.create(**BODY)
    assert e.value.status_code == 401 and e.value.code == "invalid_api_key"


def test_bench_client_sends_the_key(server):
    prompts, lens = ["吾輩は", "東京の空は"], [3, 3]
    r = run_online(server.url, "tiny", prompts, lens, max_concurrency=2, use_tqdm=False,
                   api_key=KEY)
    assert r["failed"] == 0 and r["output_lens"] == [3, 3]
    r = run_online(server.url, "tiny", prompts, lens, max_concurrency=2, use_tqdm=False)
    assert r["failed"] == 2 and "HTTP 401" in r["errors"][0] and "invalid_api_key" in r["errors"][0]


def test_bench_cli_api_key_option(monkeypatch):
    from minimal_engine.bench.__main__ import parse_args
    monkeypatch.delenv("MINIMAL_ENGINE_API_KEY", raising=False)
    assert parse_args(["--backend", "openai"]).api_key is None
    assert parse_args(["--backend", "openai", "--api-key", "k1"]).api_key == "k1"
    monkeypatch.setenv("MINIMAL_ENGINE_API_KEY", "k2")
    assert parse_args(["--backend", "openai"]).api_key == "k2"


def test_lab_kit_server_backend_sends_the_key(server, llama_dir, monkeypatch):
    from course.labkit.arrivals import arrival_plan
    from course.labkit.backends import openai_backend, run_plan
    monkeypatch.delenv("MINIMAL_ENGINE_API_KEY", raising=False)
    plan = arrival_plan("all", 2, 8, 3)
    b = openai_backend(server.url, "tiny", tokenizer=llama_dir, api_key=KEY)
    assert KEY not in repr(b)                       # a printed backend does not show the key
    res = run_plan(b, plan, output_len=3)
    assert len(res["requests"]) == 2
    assert all(r["token_times_ms"] and r["ttft_ms"] > 0 for r in res["requests"])
    assert res["tok_s"] > 0 and res["model_name"] == "tiny"
    with pytest.raises(ValueError, match="API キーがないか違います.*HTTP 401"):
        run_plan(openai_backend(server.url, "tiny", tokenizer=llama_dir), plan, output_len=3)
    monkeypatch.setenv("MINIMAL_ENGINE_API_KEY", KEY)      # the variable the server reads too
    res = run_plan(openai_backend(server.url, "tiny", tokenizer=llama_dir), plan, output_len=3)
    assert len(res["requests"]) == 2


def test_host_check_allows_the_address_the_connection_reached(llm):
    """A server bound to 0.0.0.0 is reached at the machine's LAN address: a Host naming the
    address the connection arrived at is allowed (no DNS rebinding can produce it), others not."""
    limits = ServeLimits(allowed_hosts=("localhost",))          # 127.0.0.1 is not in the list
    with ServerThread(build_app(llm, served_model_name="tiny", limits=limits)) as s:
        port = s.url.rsplit(":", 1)[1]
        r = httpx.get(s.url + "/health", headers={"Host": f"127.0.0.1:{port}"}, timeout=10)
        assert r.status_code == 200
        r = httpx.get(s.url + "/health", headers={"Host": f"192.0.2.7:{port}"}, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_host"


def test_server_without_a_key_needs_none(llm):
    with ServerThread(build_app(llm, served_model_name="tiny")) as s:
        r = httpx.post(s.url + "/v1/completions", json=BODY, timeout=60)
        assert r.status_code == 200


def test_bench_results_do_not_keep_the_key():
    from minimal_engine.bench.__main__ import without_key
    assert without_key(["--backend", "openai", "--api-key", KEY, "--model", "m"]) == [
        "--backend", "openai", "--api-key", "***", "--model", "m"]
    assert without_key([f"--api-key={KEY}"]) == ["--api-key=***"]
    assert without_key(["--api", KEY, "--base-url", "u"]) == ["--api", "***", "--base-url", "u"]
