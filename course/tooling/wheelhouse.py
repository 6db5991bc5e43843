"""The room's offline install (issue 43): a folder of every pinned wheel, per platform and Python.

``python -m course.tooling.wheelhouse --out wheelhouse`` (what ``make wheelhouse`` runs) downloads
the wheels of ``requirements.txt``, the build backend of ``pyproject.toml`` and pip itself for each
platform a classroom has (Linux x86-64, macOS arm64, Windows x86-64) into
``wheelhouse/<platform>-py<version>/``. ``make lab WHEELHOUSE=wheelhouse`` then installs with
``pip --no-index --find-links`` from the folder that fits the running Python (``where``).

Why not one ``pip download -r requirements.txt --platform ...``: pip evaluates environment markers
against the machine it runs on, not the target, so a Windows folder built on Linux would miss
``colorama`` (tqdm, ipython) and other Windows-only dependencies. Here every wheel is downloaded
with ``--no-deps`` and its dependencies are followed with the target's markers and requested
extras.
On Linux, torch is the CPU build from PyTorch's CPU index (PyPI's Linux torch is the CUDA build with
several GB of ``nvidia-*`` wheels); a Linux folder with any other torch or ``nvidia-*`` is refused.
"""
from __future__ import annotations

import argparse
import os
import re
import platform
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name, parse_wheel_filename
except ImportError:  # a bare system Python: pip carries packaging
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[2]
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# glibc up to 2.35 (Ubuntu 22.04), oldest first so that pip prefers the widest wheel (pip does not
# widen a manylinux tag by itself). The folder's newest tag is the oldest glibc the room can have
_MANYLINUX = ("manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64") + tuple(
    f"manylinux_2_{m}_x86_64" for m in range(5, 36))


@dataclass(frozen=True)
class Target:
    """One platform of the room: pip's platform tags and the markers its Python reports."""
    name: str
    pip_platforms: tuple[str, ...]
    sys_platform: str
    platform_system: str
    os_name: str
    platform_machine: str

    def markers(self, python: str) -> dict[str, str]:
        return {"sys_platform": self.sys_platform, "platform_system": self.platform_system,
                "os_name": self.os_name, "platform_machine": self.platform_machine,
                "python_version": python, "python_full_version": python + ".0",
                "implementation_name": "cpython", "platform_python_implementation": "CPython",
                "platform_release": "", "platform_version": "", "implementation_version": "",
                "extra": ""}


TARGETS = {t.name: t for t in (
    Target("linux-x86_64", _MANYLINUX, "linux", "Linux", "posix", "x86_64"),
    Target("macos-arm64", ("macosx_14_0_arm64",), "darwin", "Darwin", "posix", "arm64"),
    Target("windows-x86_64", ("win_amd64",), "win32", "Windows", "nt", "AMD64"),
)}


def here() -> tuple[str, str]:
    """The (platform, Python version) of the running interpreter, as folder names use them."""
    machine = platform.machine().lower()
    name = {("linux", "x86_64"): "linux-x86_64", ("darwin", "arm64"): "macos-arm64",
            ("win32", "amd64"): "windows-x86_64"}.get((sys.platform, machine))
    if name is None:
        raise SystemExit(f"この環境 ({sys.platform} {machine}) 用の wheelhouse はありません。"
                         f"対応している環境: {', '.join(TARGETS)}")
    return name, f"{sys.version_info[0]}.{sys.version_info[1]}"


def folder(out: Path, target: str, python: str) -> Path:
    return Path(out) / f"{target}-py{python}"


def where(out: Path) -> Path:
    """The folder of ``out`` for this interpreter; ``out`` itself when it holds wheels directly."""
    out = Path(out)
    if any(out.glob("*.whl")):
        return out
    sub = folder(out, *here())
    if not any(sub.glob("*.whl")):
        have = sorted(p.name for p in out.glob("*-py*") if p.is_dir()) if out.is_dir() else []
        raise SystemExit(f"{sub} に wheel がありません（あるフォルダ: {', '.join(have) or 'なし'}）。"
                         f"講師の PC で make wheelhouse を実行し、この PC の Python "
                         f"{here()[1]} を WHEELHOUSE_PYTHONS に含めてください。")
    return sub


def roots() -> list[Requirement]:
    """What the room installs: requirements.txt, the build backend for ``pip install -e .``, pip."""
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    reqs = [Requirement(s.split(" #")[0].strip()) for s in lines if s.strip()
            and not s.lstrip().startswith(("#", "-"))]
    return reqs + [Requirement("setuptools>=68"), Requirement("pip")]


def _wheels(dest: Path) -> dict[str, list[tuple[object, Path]]]:
    found: dict[str, list[tuple[object, Path]]] = {}
    for path in dest.glob("*.whl"):
        name, version, _, _ = parse_wheel_filename(path.name)
        found.setdefault(canonicalize_name(name), []).append((version, path))
    return found


def _requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode("utf-8")
    head = text.split("\n\n", 1)[0]
    return [Requirement(line.split(":", 1)[1].strip()) for line in head.splitlines()
            if line.startswith("Requires-Dist:")]


def pip_download(reqs: list[str], target: Target, python: str, dest: Path) -> None:
    """Download these wheels (no dependencies) for the target with ``pip download``."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp", "-d", str(dest)]
    for tag in target.pip_platforms:
        cmd += ["--platform", tag]
    torch = [r for r in reqs if r.startswith("torch=")]
    if target.name == "linux-x86_64" and torch:  # alone: the CPU index serves torch's wheels only
        index = os.environ.get("TORCH_CPU_INDEX", TORCH_CPU_INDEX)   # a mirror, or none
        subprocess.run(cmd + ["--extra-index-url", index] + torch, check=True)
        reqs = [r for r in reqs if r not in torch]
    if reqs:
        subprocess.run(cmd + reqs, check=True)


def build(out: Path, target_name: str, python: str, download=pip_download) -> Path:
    """Download the wheel closure for one platform and Python into its folder; remove stale wheels.
    ``download(requirements, target, python, folder)`` fetches wheels (tests pass their own)."""
    target, dest = TARGETS[target_name], folder(out, target_name, python)
    dest.mkdir(parents=True, exist_ok=True)
    env = target.markers(python)
    wanted: dict[str, Requirement] = {}

    def want(req: Requirement) -> None:
        name = canonicalize_name(req.name)
        old = wanted.get(name)
        if old is None:
            wanted[name] = Requirement(str(req).split(";")[0])
        else:
            old.specifier &= req.specifier
            old.extras |= req.extras

    for req in roots():
        if req.marker is None or req.marker.evaluate(env):
            want(req)
    chosen: dict[str, Path] = {}
    for _ in range(40):
        have, missing = _wheels(dest), []
        for name, req in wanted.items():
            linux_torch = name == "torch" and target.name == "linux-x86_64"
            fits = [(v, p) for v, p in have.get(name, []) if req.specifier.contains(v, True)
                    and not (linux_torch and "+cpu" not in str(v))]
            if fits:
                chosen[name] = max(fits, key=lambda vp: vp[0])[1]
            else:
                chosen.pop(name, None)
                spec = str(req.specifier)
                if linux_torch:
                    spec = ",".join(s if not s.startswith("==") or "+" in s else s + "+cpu"
                                    for s in spec.split(","))
                missing.append(f"{name}{spec}")
        if missing:
            download(sorted(missing), target, python, dest)
            continue
        before = {k: (str(r.specifier), tuple(sorted(r.extras))) for k, r in wanted.items()}
        for name, path in list(chosen.items()):
            for extra in {""} | set(wanted[name].extras):
                for req in _requires(path):
                    if req.marker is None or req.marker.evaluate({**env, "extra": extra}):
                        want(req)
        after = {k: (str(r.specifier), tuple(sorted(r.extras))) for k, r in wanted.items()}
        if after == before:
            break
    else:
        raise SystemExit(f"{dest}: 依存関係が 40 回で閉じませんでした")
    for path in dest.glob("*.whl"):
        if path not in chosen.values():
            path.unlink()
    check(dest, target_name)
    return dest


def check(dest: Path, target_name: str) -> None:
    """Refuse a Linux folder with a CUDA build of torch (torch without +cpu, nvidia-* wheels)."""
    if target_name != "linux-x86_64":
        return
    names = [p.name for p in dest.glob("*.whl")]
    bad = [n for n in names if n.startswith("nvidia_") or n.startswith("triton-")
           or (n.startswith("torch-") and "+cpu" not in n)]
    if bad:
        raise SystemExit(f"{dest} に CUDA 版の torch が入っています: {', '.join(bad)}。"
                         f"Linux の torch は {TORCH_CPU_INDEX} の CPU 版（+cpu）だけにします。")


def needed_glibc(dest: Path) -> str:
    """The oldest glibc the folder's Linux wheels run on: their newest manylinux tag."""
    tags = [tuple(map(int, m)) for p in dest.glob("*.whl")
            for m in re.findall(r"manylinux_(\d+)_(\d+)_", p.name)]
    return "%d.%d" % max(tags) if tags else ""


def size_mb(dest: Path) -> float:
    return sum(p.stat().st_size for p in dest.glob("*.whl")) / 1e6


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd")
    w = sub.add_parser("where", help="この PC の Python に合う wheel のフォルダを表示する")
    w.add_argument("out", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "wheelhouse")
    ap.add_argument("--platforms", nargs="+", default=list(TARGETS), help="here: この PC だけ")
    ap.add_argument("--pythons", nargs="+", default=["3.11"])
    args = ap.parse_args(argv)
    if args.cmd == "where":
        print(where(args.out))
        return
    jobs = [here()] if args.platforms == ["here"] else [
        (p, v) for p in args.platforms for v in args.pythons]
    for name, python in jobs:
        if name not in TARGETS:
            raise SystemExit(f"知らないプラットフォーム {name!r}。"
                             f"使えるもの: {', '.join(TARGETS)}, here")
        dest = build(args.out, name, python)
        glibc = f"、glibc {needed_glibc(dest)} 以上" if name.startswith("linux") else ""
        print(f"{dest}: {len(list(dest.glob('*.whl')))} 個の wheel、{size_mb(dest):.0f} MB{glibc}",
              flush=True)


if __name__ == "__main__":
    main()
