"""Grammar compilation as an isolated resource of the server (issue 42, attack round 3 H2): a
constraint that crashes the compiler is a 400 and the server serves on; constraints compile on a
thread of their own, so a slow compile delays neither a plain completion nor /tokenize; a client
that leaves while its constraint compiles has the compile stopped.

The compiler's child is tests/features/grammar_worker_faults.py: it aborts, exits or sleeps on
marked grammars (llguidance's own crashes are refused by the size limits before they are
reached)."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from minimal_engine import LLM
from minimal_engine.features.structured_compile import CompileWorker
from minimal_engine.serve.app import ServerThread, build_app
from tests.conftest import wait_idle

FAULTY = [sys.executable,
          str(Path(__file__).parents[1] / "features" / "grammar_worker_faults.py")]
BUDGET_S = 40.0


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=8,
               grammar_compiler=CompileWorker(budget_s=BUDGET_S, argv=FAULTY))


@pytest.fixture(scope="module")
def server(llm):
    with ServerThread(build_app(llm, max_queue=8)) as s:
        yield s


def complete(server, timeout: float = 120, **fields) -> httpx.Response:
    return httpx.post(server.url + "/v1/completions", timeout=timeout,
                      json={"prompt": "吾輩は", "max_tokens": 4, **fields})


def timed(call) -> tuple[float, httpx.Response]:
    start = time.monotonic()
    r = call()
    return time.monotonic() - start, r


@pytest.mark.parametrize("marker, how", [("abort_here", "signal SIGABRT"),
                                         ("exit_here", "exit code 3")])
def test_a_compiler_crash_is_a_400_and_the_server_serves_on(server, marker, how):
    """Before: llguidance compiled in the server's process; a crash ended the server (H1)."""
    r = complete(server, guided_regex=marker)
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["param"] == "structured_outputs" and how in e["message"], e
    assert httpx.get(server.url + "/health", timeout=30).json()["status"] == "ok"
    assert complete(server).status_code == 200
    ok = complete(server, guided_regex="[0-9]{2}")
    assert ok.status_code == 200 and ok.json()["choices"][0]["text"].isdigit(), ok.text


def test_slow_compiles_delay_neither_plain_completions_nor_tokenize(server, llm):
    """Before: compiles ran in the 2-thread pool every completion and /tokenize need; two slow
    ones held both threads (a 4-token completion waited 46 s in the attack round). After: the
    plain requests take about as long as with nothing compiling."""
    alone, r = timed(lambda: complete(server))
    assert r.status_code == 200
    def leave_after_20_s(i: int) -> None:           # then the server stops its compile
        with pytest.raises(httpx.ReadTimeout):
            complete(server, timeout=20, guided_regex=f"slow_here{i}")

    slow = [threading.Thread(target=leave_after_20_s, args=(i,)) for i in range(2)]
    for t in slow:
        t.start()
    deadline = time.monotonic() + 30
    while not llm.engine.grammars.compiler.running and time.monotonic() < deadline:
        time.sleep(0.05)                               # the first slow compile has started
    during, r = timed(lambda: complete(server))
    tokenize, t = timed(lambda: httpx.post(server.url + "/tokenize", json={"prompt": "吾輩は猫"},
                                           timeout=120))
    assert r.status_code == 200 and t.status_code == 200 and t.json()["count"] > 0
    assert llm.engine.grammars.compiler.running        # still compiling meanwhile
    assert during < alone + 10 and tokenize < 10, (alone, during, tokenize)
    for th in slow:
        th.join()


def test_a_client_that_leaves_stops_its_compile(server, llm):
    """Before: a compile kept running after its client had gone (4 fire-and-forget requests: the
    next completion waited 46 s). After: the child compiling it is killed."""
    compiler = llm.engine.grammars.compiler
    starts = compiler.starts
    with pytest.raises(httpx.ReadTimeout):
        complete(server, timeout=2.0, guided_regex="slow_here_and_gone")
    deadline = time.monotonic() + 20
    while compiler.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not compiler.running                       # killed well before the 60 s sleep ends
    assert compiler.starts == starts + 1
    h = wait_idle(server.url)
    assert h["unfinished_requests"] == 0 and h["free_blocks"] == h["total_blocks"]
    assert complete(server, guided_regex="[a-z]{3}").status_code == 200
