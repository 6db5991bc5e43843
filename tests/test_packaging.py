"""The project's promises about itself: pinned, agreeing dependency lists; a CI script that runs the README's
test command; an engine small enough to read."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def pins(lines):
    return sorted(l.strip() for l in lines if l.strip() and not l.strip().startswith(("#", "-e")))


def test_requirements_and_environment_yml_agree():
    req = pins((ROOT / "requirements.txt").read_text().splitlines())
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert req == pins(pip_section)
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][^\s]*", r) for r in req), "every requirement is pinned with =="
    assert "torch==2.13.0" in req


def test_test_only_requirements_are_pinned_and_stay_out_of_make_lab():
    """Triton (for the interpreter tests) is pinned in requirements-test.txt, for Linux x86-64 only, installed by
    `make test` and not by `make lab` (a learner's laptop never runs the GPU kernel)."""
    lines = pins((ROOT / "requirements-test.txt").read_text().splitlines())
    assert lines == ["langchain-core==1.8.3", "langchain-openai==1.8.1",   # tests/serve/test_real_clients.py
                     'triton==3.9.0; sys_platform == "linux" and platform_machine == "x86_64"']
    for name in ("triton", "langchain"):
        assert name not in (ROOT / "requirements.txt").read_text()
    import subprocess
    test = subprocess.run(["make", "-n", "-B", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    lab = subprocess.run(["make", "-n", "-B", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    assert "requirements-test.txt" in test and "requirements-test.txt" not in lab


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and re.search(r"^make test$", ci, re.M)
    assert "make lab" in readme




# The sizes of the engine's files and packages are checked in test_layout.py.


def test_make_lab_serves_the_whole_course(tmp_path):
    """`make lab`'s JupyterLab command serves the repository root (lessons, labs, quizzes) and opens the
    learner's copy of the course guide (work/, course/tooling/workspace.py). Started on a free loopback port, polled
    for at most 60 s, then stopped."""
    import json
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    dry = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    line = next(l for l in dry.stdout.replace("\\\n", " ").splitlines() if "jupyter lab" in l)
    args = line.split()[3:]                                         # after ".venv/bin/python -m jupyter"
    assert "--LabApp.default_url=/lab/tree/work/lessons/00_course_guide.ipynb" in args   # the learner's copy
    with socket.socket() as sock:                                   # a free loopback port
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "jupyter", *args, "--no-browser", f"--port={port}", "--ServerApp.token=test",
           f"--ServerApp.runtime_dir={tmp_path}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, "JUPYTER_PLATFORM_DIRS": "1"})
    try:
        url, listing, deadline = f"http://127.0.0.1:{port}", None, time.time() + 60
        while listing is None and time.time() < deadline and proc.poll() is None:
            try:
                listing = json.load(urllib.request.urlopen(f"{url}/api/contents?token=test", timeout=5))
            except OSError:
                time.sleep(0.5)
        assert listing, "JupyterLab did not serve within 60 s"
        assert {"lessons", "labs", "quizzes"} <= {c["name"] for c in listing["content"]}
        guide = json.load(urllib.request.urlopen(f"{url}/api/contents/lessons/00_course_guide.ipynb?token=test",
                                                 timeout=10))
        assert guide["type"] == "notebook"
        # JupyterLab in Japanese by default: the language pack is installed and `make lab`'s app settings
        # (course/jupyterlab_settings/overrides.json) make ja_JP the default locale (a user setting still wins)
        api = f"{url}/lab/api/settings/@jupyterlab/translation-extension:plugin?token=test"
        schema = json.load(urllib.request.urlopen(api, timeout=10))["schema"]
        assert schema["properties"]["locale"]["default"] == "ja_JP"
        packs = json.load(urllib.request.urlopen(f"{url}/lab/api/translations/?token=test", timeout=10))["data"]
        assert "ja_JP" in packs, packs
        menus = json.load(urllib.request.urlopen(f"{url}/lab/api/translations/ja_JP?token=test", timeout=10))
        assert menus["data"]["jupyterlab"]["menu\u0004Kernel"] == ["カーネル"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
