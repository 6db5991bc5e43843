"""`python -m minimal_engine.serve`: a non-loopback --host without an API key is refused at once
(non-zero exit, the reason and the fix in Japanese and English); --api-key or
MINIMAL_ENGINE_API_KEY sets the key.
Nothing here binds a socket: the refusal comes before the model loads."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from minimal_engine.serve.auth import check_bind, resolve_api_key
from minimal_engine.serve.cli import build_parser


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2", "LOCALHOST"])
def test_loopback_needs_no_key(host):
    check_bind(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "10.0.0.5", "teacher-pc.local",
                                  ""])
def test_other_addresses_need_a_key(host):
    with pytest.raises(ValueError) as e:
        check_bind(host, None)
    msg = str(e.value)
    for part in ("--api-key", "MINIMAL_ENGINE_API_KEY", "127.0.0.1", "API キー", "no API key"):
        assert part in msg
    check_bind(host or "0.0.0.0", "a-key")                 # with a key the same address is allowed


def test_key_from_the_option_or_the_environment():
    def key(argv, env):
        return resolve_api_key(build_parser().parse_args(argv).api_key, env)
    assert key([], {}) is None
    assert key([], {"MINIMAL_ENGINE_API_KEY": "env-key"}) == "env-key"
    assert key(["--api-key", "opt"], {"MINIMAL_ENGINE_API_KEY": "env"}) == "opt"
    assert key([], {"MINIMAL_ENGINE_API_KEY": ""}) is None            # empty: unset
    assert key([], {"VLLM_API_KEY": "v"}) is None                     # vLLM's name is not read


@pytest.mark.parametrize("key", ["", "  ", "two words", "鍵", "tab\tkey"])
def test_unusable_keys_are_refused(key):
    with pytest.raises(ValueError, match="printable ASCII"):
        resolve_api_key(build_parser().parse_args(["--api-key", key]).api_key, {})


def run_cli(*args, env_key=None):
    env = {k: v for k, v in os.environ.items() if k != "MINIMAL_ENGINE_API_KEY"}
    if env_key is not None:
        env["MINIMAL_ENGINE_API_KEY"] = env_key
    cmd = [sys.executable, "-m", "minimal_engine.serve", "--model", "synthetic:unused", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def test_lan_bind_without_a_key_exits_non_zero_with_the_reason():
    p = run_cli("--host", "0.0.0.0", "--port", "8000")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "0.0.0.0" in p.stderr and "MINIMAL_ENGINE_API_KEY" in p.stderr and "API キー" in p.stderr
    assert "serving" not in p.stdout                        # refused before any model was loaded


def test_bad_key_from_the_environment_exits_non_zero():
    p = run_cli("--host", "0.0.0.0", env_key="has space")
    assert p.returncode == 2
    assert "MINIMAL_ENGINE_API_KEY" in p.stderr and "printable ASCII" in p.stderr


def test_the_key_from_the_environment_reaches_the_app(llama_dir, monkeypatch, capsys):
    """main() with --host 0.0.0.0 and MINIMAL_ENGINE_API_KEY: the app it would serve wants the key
    (uvicorn.run is replaced, so nothing binds 0.0.0.0; the app is then served on 127.0.0.1)."""
    import httpx
    import torch
    import uvicorn

    from minimal_engine import LLM
    from minimal_engine.serve import cli
    from minimal_engine.serve.app import ServerThread
    served = {}
    monkeypatch.setattr(cli, "make_llm", lambda args: LLM(llama_dir, dtype="float32", device="cpu"))
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.update(app=app, **kw))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)   # this process keeps its own
    monkeypatch.setenv("MINIMAL_ENGINE_API_KEY", "from-env")
    assert cli.main(["--host", "0.0.0.0", "--threads", "1"]) == 0
    assert served["host"] == "0.0.0.0"
    assert "from-env" not in capsys.readouterr().out          # the key is never printed
    with ServerThread(served["app"]) as s:
        assert httpx.get(s.url + "/v1/models", timeout=10).status_code == 401
        key = {"Authorization": "Bearer from-env"}
        assert httpx.get(s.url + "/v1/models", headers=key, timeout=10).status_code == 200
