"""The class as the load generator: our server (``python -m minimal_engine.serve``, ``--api-key``)
on loopback, 30 learner processes each running lab 1's requests through the lab kit's server backend
for a bounded time, and the dashboard reading /metrics every second meanwhile. The picture is saved
(under $BROWSER_SCREENSHOTS, else runs/instructor/), and the numbers it shows must agree with what
the learners sent and received: requests, output tokens, TTFT (the server's is at most the
client's), the most requests running at once, and a throughput / interactivity curve with points
from the class's traffic."""
from __future__ import annotations

import math
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from course.instructor.figure import draw, readout_html
from course.instructor.metrics import scrape
from course.instructor.rates import Series
from course.instructor.simulate import simulate_class

ROOT = Path(__file__).resolve().parents[3]
KEY = "class-test-key"
LEARNERS, SECONDS = 30, 30.0
TTFT_BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, *extra: str) -> subprocess.Popen:
    """Our server as the guide starts it (loopback here), once /health answers."""
    cmd = [sys.executable, "-m", "minimal_engine.serve", "--host", "127.0.0.1", "--port", str(port),
           "--served-model-name", "minimal-ja", "--api-key", KEY, *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError("the server exited:\n" + proc.stdout.read()[-3000:])
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise AssertionError("the server did not answer /health in 300 s")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def picture_dir() -> Path:
    folder = Path(os.environ.get("BROWSER_SCREENSHOTS") or ROOT / "runs" / "instructor")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def upper_edge(x_s: float) -> float:
    return next((b for b in TTFT_BOUNDS if x_s <= b), math.inf)


@pytest.fixture(scope="module")
def server():
    port = free_port()
    proc = start_server(port)
    yield f"http://127.0.0.1:{port}"
    stop_server(proc)


def test_thirty_learners_and_the_dashboard_agree(server):
    assert httpx.get(server + "/v1/models", timeout=10).status_code == 401     # the key is required
    warm = httpx.post(server + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "minimal-ja", "prompt": "吾輩は", "max_tokens": 2},
                      timeout=300)                                            # first-use setup
    assert warm.status_code == 200, warm.text
    series = Series(window_s=3)
    series.add(scrape(server, timeout_s=60))
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(reports=simulate_class(
        server, "minimal-ja", learners=LEARNERS, seconds=SECONDS, join_over_s=SECONDS / 3,
        prompt_len=16, output_len=8, api_key=KEY)))
    worker.start()
    while worker.is_alive():                     # the dashboard's loop, as the notebook runs it
        time.sleep(1.0)
        series.add(scrape(server, timeout_s=60))
    worker.join()
    series.add(scrape(server, timeout_s=60))
    reports = result["reports"]
    assert len(reports) == LEARNERS and not [r["error"] for r in reports if r["error"]]
    assert all(r["runs"] >= 1 for r in reports), "every learner ran at least once"

    tot = series.totals()
    sent = sum(r["requests"] for r in reports)
    received = sum(r["output_tokens"] for r in reports)
    assert tot["requests"] == sent and tot["output_tokens"] == received == 8 * sent
    assert 2 <= tot["max_running"] <= LEARNERS, "the server batched the class's requests"
    assert tot["out_tok_s"] == pytest.approx(received / tot["elapsed_s"])
    client_ttft_s = statistics.median(t for r in reports for t in r["ttft_ms"]) / 1e3
    assert 0 < tot["ttft_ms"][0] / 1e3 <= upper_edge(client_ttft_s), (tot["ttft_ms"], client_ttft_s)
    curve = series.curve()
    assert len(curve) >= 5 and all(x > 0 and y > 0 for x, y, _ in curve)
    html = readout_html(series)
    assert f"data-requests='{sent}'" in html and f"data-output-tokens='{received}'" in html
    path = picture_dir() / "class_dashboard.png"
    draw(series).savefig(path, dpi=90)
    assert path.stat().st_size > 20_000
    print(f"\n{LEARNERS} learners, {sent} requests, {received} output tokens in "
          f"{tot['elapsed_s']:.1f} s; "
          f"most running {tot['max_running']:.0f}; picture {path}")
