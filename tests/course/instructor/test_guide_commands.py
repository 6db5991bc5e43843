"""Every command of the instructor guide's sections 5 (collecting results) and 7 (dashboard) runs
here as written, with only the placeholders filled in: `.venv/bin/python` is this interpreter, KEY a
test key, the example address 192.168.1.20 and `--host 0.0.0.0` become loopback, port 8000 a free
port. A command the guide gains in those sections without a runner here fails the test."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from class_csvs import class_folder  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "instructor_guide.md"
KEY = "guide-test-key"


def section(number: int) -> str:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(f"\n## {number}. ")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def commands(text: str, language: str) -> list[str]:
    """The commands of the ```language blocks, continuation lines joined."""
    out = []
    for block in re.findall(rf"```{language}\n(.*?)```", text, re.S):
        out += [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]
    return out


def filled(command: str, port: int) -> list[str]:
    for old, new in (("192.168.1.20:8000", f"127.0.0.1:{port}"),
                     ("127.0.0.1:8000", f"127.0.0.1:{port}"),
                     ("--host 0.0.0.0", "--host 127.0.0.1"), ("--port 8000", f"--port {port}"),
                     ("KEY", KEY)):
        command = command.replace(old, new)
    args = shlex.split(command)
    assert args[0] == ".venv/bin/python", command
    return [sys.executable, *args[1:]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    e = {k: v for k, v in os.environ.items()
         if k not in ("MINIMAL_ENGINE_API_KEY", "COURSE_SERVER_URL")}
    return e | {"PYTHONPATH": str(ROOT)}


def test_section_5_collects_the_class_results(class_folder, tmp_path):
    cmds = commands(section(5), "bash")
    assert len(cmds) == 2 and "course.instructor summary work/class_results" in cmds[0], cmds
    room = tmp_path / "room"
    shutil.copytree(class_folder, room / "work" / "class_results")

    def run(cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(filled(cmd, 0), cwd=room, env=env(), capture_output=True, text=True,
                              timeout=300)

    r = run(cmds[0])
    assert r.returncode == 0, r.stderr
    assert (room / "work" / "class_summary.png").is_file()
    assert (room / "work" / "class_results.png").is_file()
    assert "最大 ÷ 最小" in r.stdout
    r = run(cmds[1])
    assert r.returncode == 0 and re.search(r"\d+ rows from 6 files", r.stdout), r.stdout + r.stderr


def wait_health(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the guide's server command exited"
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise AssertionError("the server did not answer /health in 300 s")


def test_section_7_server_learners_dashboard_and_rehearsal(tmp_path, monkeypatch):
    cmds, lines = commands(section(7), "bash"), commands(section(7), "python")
    known = ("minimal_engine.serve", "instructor watch", "instructor simulate")
    kinds = [next((k for k in known if k in c), c) for c in cmds]
    assert kinds == ["minimal_engine.serve", "instructor watch", "instructor simulate"], cmds
    assert len(lines) == 1 and "labkit.use_class_server(" in lines[0], lines
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(filled(cmds[0], port), cwd=ROOT, env=env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_health(url, server)
        # a learner's one line, then the lab panel's backend sends a lab 1 run to the server
        for name in ("COURSE_SERVER_URL", "COURSE_SERVER_MODEL", "MINIMAL_ENGINE_API_KEY"):
            monkeypatch.setenv(name, "x")
            monkeypatch.delenv(name)
        exec(lines[0].replace("192.168.1.20:8000", f"127.0.0.1:{port}").replace("KEY", KEY), {})
        from course.instructor.metrics import scrape
        from course.labs import lab01
        from course.panels.controls import KitControls
        kit = KitControls("1")
        before = scrape(url).values["requests"]
        m = lab01.measure_lab(prompt_len=16, output_len=4, concurrency=2, repeats=1,
                              backend=kit.make_backend("default", "cpu"))
        assert m["tok_s"] > 0 and scrape(url).values["requests"] - before == 2
        # the rehearsal class while the headless dashboard watches
        room = tmp_path / "room"
        room.mkdir()
        watch = subprocess.Popen(filled(cmds[1], port), cwd=room, env=env(), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        sim = subprocess.run(filled(cmds[2], port), cwd=room, env=env(), capture_output=True,
                             text=True, timeout=400)
        out, _ = watch.communicate(timeout=200)
        assert sim.returncode == 0 and "learners 30" in sim.stdout and "errors 0" in sim.stdout, \
            sim.stdout + sim.stderr
        assert watch.returncode == 0 and "実行中" in out, out[-2000:]
        assert (room / "work" / "dashboard.png").stat().st_size > 20_000
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.mark.parametrize("args", [["watch", "--seconds", "0"], ["summary", "no/such/folder"]])
def test_the_commands_name_what_is_wrong(args):
    r = subprocess.run([sys.executable, "-m", "course.instructor", *args], cwd=ROOT, env=env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "エラー" in r.stderr and "Traceback" not in r.stderr, r.stderr
