"""The room's offline install (issue 43): ``make wheelhouse`` and ``make setup WHEELHOUSE=...``.

The first tests follow dependencies with the target's markers on small made-up wheels (no network).
The last builds a fresh venv with ``make setup`` from this machine's wheelhouse with the network
forbidden to pip (``--no-index``, a dead index and proxy, no config), then imports the course.
The wheelhouse is ``wheelhouse/`` (git-ignored; ``.ci/run`` builds it before ``make test``, the only
step allowed to download) or ``$COURSE_WHEELHOUSE``. When it is missing outside CI, the test builds it
from the files this machine already has (pip's configured local folders), with the network forbidden;
if that is not enough it fails and says to run ``make wheelhouse``. Under CI it never builds or skips.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from course.tooling import wheelhouse as wh

ROOT = Path(__file__).resolve().parents[2]
DEAD = "http://127.0.0.1:9/"     # nothing listens on the discard port: any download fails at once


def fake_wheel(folder: Path, name: str, version: str, requires: list[str]) -> None:
    dist = f"{name}-{version}"
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as zf:
        meta = [f"Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        zf.writestr(f"{dist}.dist-info/METADATA",
                    "\n".join(meta + [f"Requires-Dist: {r}" for r in requires]) + "\n\nbody\n")


@pytest.fixture
def index(tmp_path):
    """A made-up index: requirements.txt's names as empty wheels, plus a small dependency tree."""
    idx = tmp_path / "index"
    idx.mkdir()
    for req in wh.roots():
        name = wh.canonicalize_name(req.name)
        version = next((s.version for s in req.specifier if s.operator == "=="), "99.0")
        deps = {"tqdm": ['colorama; platform_system == "Windows"'],
                "jupyterlab": ["jupyter-events>=0.9"]}.get(name, [])
        if name == "torch":
            version += "+cpu"
        fake_wheel(idx, name.replace("-", "_"), version, deps)
    fake_wheel(idx, "colorama", "0.4.6", [])
    fake_wheel(idx, "jupyter_events", "0.12.0", ["jsonschema[format-nongpl]>=4.18"])
    fake_wheel(idx, "fqdn", "1.5.1", [])
    fake_wheel(idx, "pexpect", "4.9.0", [])
    # jsonschema again, now with an extra whose dependency is only followed when the extra is asked
    fake_wheel(idx, "jsonschema", "4.26.0", ['fqdn; extra == "format-nongpl"',
                                             'pexpect; sys_platform != "win32"'])
    return idx


def copy_from(idx: Path, calls: list):
    def download(reqs, target, python, dest):
        calls.append(list(reqs))
        for r in reqs:
            name = wh.canonicalize_name(wh.Requirement(r).name).replace("-", "_")
            for f in idx.glob(f"{name}-*.whl"):
                shutil.copy(f, dest)
    return download


def names(folder: Path) -> set[str]:
    return {wh.canonicalize_name(p.name.split("-")[0]) for p in folder.glob("*.whl")}


def test_dependencies_follow_the_target_not_this_machine(tmp_path, index):
    calls: list = []
    win = names(wh.build(tmp_path / "w", "windows-x86_64", "3.11", copy_from(index, calls)))
    lin = names(wh.build(tmp_path / "w", "linux-x86_64", "3.11", copy_from(index, calls)))
    assert "colorama" in win and "colorama" not in lin           # tqdm's Windows-only dependency
    assert "pexpect" in lin and "pexpect" not in win             # and the reverse
    assert "fqdn" in win and "fqdn" in lin                       # reached through an extra
    assert {"torch", "setuptools", "pip", "numpy"} <= lin        # the build backend and pip too


def test_linux_torch_is_the_cpu_build(tmp_path, index):
    calls: list = []
    dest = wh.build(tmp_path / "w", "linux-x86_64", "3.11", copy_from(index, calls))
    assert "torch==2.13.0+cpu" in [r for c in calls for r in c]
    assert [p.name for p in dest.glob("torch-*")] == ["torch-2.13.0+cpu-py3-none-any.whl"]
    fake_wheel(dest, "nvidia_cublas_cu12", "12.9.1.4", [])
    with pytest.raises(SystemExit, match="CUDA"):
        wh.check(dest, "linux-x86_64")


def test_where_names_the_missing_python(tmp_path):
    (tmp_path / "windows-x86_64-py3.11").mkdir()
    with pytest.raises(SystemExit, match="make wheelhouse"):
        wh.where(tmp_path)
    fake_wheel(tmp_path, "six", "1.17.0", [])                  # a flat folder is used as it is
    assert wh.where(tmp_path) == tmp_path


def no_network_env(home: Path) -> dict:
    """pip with no configuration, a dead index and a dead proxy: it can only read local files."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIP_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy",
                                                            "no_proxy")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": DEAD, "PIP_RETRIES": "0",
            "PIP_TIMEOUT": "3", "http_proxy": DEAD, "https_proxy": DEAD, "HOME": str(home),
            "PIP_NO_CACHE_DIR": "1", "PIP_NO_COMPILE": "0"}   # "0": pip's way to say --no-compile


def local_wheelhouse(tmp_path: Path) -> Path:
    out = Path(os.environ.get("COURSE_WHEELHOUSE", ROOT / "wheelhouse"))
    here = wh.folder(out, *wh.here())
    if any(here.glob("*.whl")):
        return out
    hint = ("このマシン用の wheelhouse がありません。ネットワークのある状態で "
            f"`make wheelhouse WHEELHOUSE={out} WHEELHOUSE_PLATFORMS=here` を実行してください")
    if os.environ.get("CI") == "true":
        pytest.fail(hint + "（CI では .ci/run が make test の前に作るはずです）")
    # pip as configured on this machine (its local folders), but any network request fails
    env = {**os.environ, "PIP_INDEX_URL": DEAD, "PIP_RETRIES": "0", "PIP_TIMEOUT": "3",
           "http_proxy": DEAD, "https_proxy": DEAD, "TORCH_CPU_INDEX": DEAD}
    r = subprocess.run([sys.executable, "-m", "course.tooling.wheelhouse", "--out", str(out),
                        "--platforms", "here"], cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(here, ignore_errors=True)
        errors = [x for x in (r.stdout + r.stderr).splitlines() if x.startswith("ERROR")]
        pytest.fail(f"{hint}（手元のファイルだけでは作れませんでした: {' / '.join(errors[-2:])}）")
    return out


def test_fresh_venv_installs_from_the_wheelhouse_without_network(tmp_path):
    out = local_wheelhouse(tmp_path)
    wh.check(wh.where(out), wh.here()[0])
    env = no_network_env(tmp_path)
    probe = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d",
                            str(tmp_path / "probe"), "six"], env=env, capture_output=True)
    assert probe.returncode != 0, "pip reached an index: the test would not prove an offline install"
    venv = tmp_path / "venv"
    r = subprocess.run(["make", "setup", f"VENV={venv}", f"WHEELHOUSE={out}",
                        f"PYTHON={sys.executable}"], cwd=ROOT, env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "--no-index" in r.stdout
    py = str(venv / "bin" / "python")
    code = ("import minimal_engine, course, torch; "
            "print(torch.__version__, minimal_engine.__file__, course.__file__)")
    r = subprocess.run([py, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    version, engine_file, course_file = r.stdout.split()
    assert version.startswith("2.13.0") and (sys.platform != "linux" or version.endswith("+cpu"))
    assert Path(engine_file).is_relative_to(ROOT) and Path(course_file).is_relative_to(ROOT)
    r = subprocess.run([py, "-m", "pip", "check"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    frozen = subprocess.run([py, "-m", "pip", "freeze"], env=env, capture_output=True,
                            text=True).stdout.lower().replace("_", "-")
    for req in wh.roots()[:-2]:                                  # every pin of requirements.txt
        pin = next(s.version for s in req.specifier if s.operator == "==")
        assert f"{wh.canonicalize_name(req.name)}=={pin}" in frozen, req
