"""Soak test of the server (issue 42): does its memory stay flat under a long mixed load?

Starts ``python -m minimal_engine.serve`` on loopback (the default model, float32, one torch
thread), sends a mixed load at a modest concurrency for ``--minutes`` (plain completions, chat,
streamed completions and chat, JSON-schema chat, guided choice/regex/grammar completions,
streams the client abandons after a few chunks), samples the server's RSS (``/proc/PID/status``),
its KV usage and running/waiting requests (``/metrics``) every ``--sample-s`` seconds, then stops
the server.

Writes ``OUT.csv`` (one row per sample), ``OUT.json`` (settings, machine, counts, samples, summary)
and ``OUT.server.log``. The summary gives RSS at the end of warm-up and at the end, and the slope
of RSS against completed requests after warm-up (MiB per 1,000 requests, least squares).
Bounded: stops at the deadline or after ``--max-requests``; loopback only; Linux (``/proc``).

    PYTHONPATH=. nice -n 19 python benchmarks/soak.py --minutes 30 --out results/soak_30min
"""
from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

PROMPTS = ["吾輩は", "東京の空は", "猫とは", "むかしむかし、ある村に", "春になると", "その日の夕方、"]
SCHEMAS = [{"type": "object", "properties": {k: {"type": t} for k, t in props},
            "required": [k for k, _ in props], "additionalProperties": False}
           for props in ([("name", "string"), ("age", "integer")], [("city", "string")],
                         [("title", "string"), ("year", "integer"), ("ok", "boolean")])]
CHOICES = [["はい", "いいえ"], ["猫", "犬", "鳥"], ["春", "夏", "秋", "冬"]]
REGEXES = [r"[0-9]{3}-[0-9]{4}", r"(猫|犬)が[0-9]{1,2}匹"]
GRAMMAR = 'start: "答え: " ANSWER\nANSWER: "猫" | "犬" | "鳥"\n'
# one request of each kind, in this order, over and over (so a short run has every kind)
KINDS = ["completion", "chat", "stream_completion", "stream_chat", "json_schema", "completion",
         "guided", "stream_chat", "abort", "chat"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def gauges(text: str) -> dict[str, float]:
    want = {"vllm:kv_cache_usage_perc": "kv_usage", "vllm:num_requests_running": "running",
            "vllm:num_requests_waiting": "waiting"}
    out = {}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in want:
            out[want[name]] = float(line.rsplit(" ", 1)[1])
    return out


def request_for(kind: str, i: int, model: str) -> tuple[str, dict, bool]:
    """(path, body, stream) of the i-th request of a kind."""
    prompt, n = PROMPTS[i % len(PROMPTS)], 16 + (i * 7) % 33
    chat = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": n}
    plain = {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0.8, "seed": i}
    if kind == "completion":
        return "/v1/completions", plain, False
    if kind == "chat":
        return "/v1/chat/completions", chat, False
    if kind in ("stream_completion", "abort"):
        return "/v1/completions", {**plain, "stream": True, "max_tokens": 64}, True
    if kind == "stream_chat":
        return "/v1/chat/completions", {**chat, "stream": True}, True
    if kind == "json_schema":
        fmt = {"type": "json_schema",
               "json_schema": {"name": f"s{i % 3}", "schema": SCHEMAS[i % len(SCHEMAS)]}}
        return "/v1/chat/completions", {**chat, "max_tokens": 48, "response_format": fmt}, False
    if kind == "guided":
        extra = [{"guided_choice": CHOICES[i % len(CHOICES)]},
                 {"guided_regex": REGEXES[i % len(REGEXES)]}, {"guided_grammar": GRAMMAR}][i % 3]
        return "/v1/completions", {**plain, "max_tokens": 24, **extra}, False
    raise ValueError(f"unknown kind {kind!r}; kinds: {sorted(set(KINDS))}")


async def one(client: httpx.AsyncClient, kind: str, i: int, model: str) -> str:
    """Send one request; returns 'ok', 'aborted' or 'http_<status>'."""
    path, body, stream = request_for(kind, i, model)
    if not stream:
        r = await client.post(path, json=body)
        return "ok" if r.status_code == 200 else f"http_{r.status_code}"
    async with client.stream("POST", path, json=body) as r:
        if r.status_code != 200:
            await r.aread()
            return f"http_{r.status_code}"
        chunks = 0
        async for line in r.aiter_lines():
            chunks += line.startswith("data:")
            if kind == "abort" and chunks >= 3:
                return "aborted"        # leaving the block closes the connection mid-stream
    return "ok"


async def drive(url: str, pid: int, args, samples: list, counts: Counter) -> None:
    deadline = time.monotonic() + args.minutes * 60
    state = {"next": 0, "done": 0, "t0": time.monotonic()}
    limits = httpx.Limits(max_connections=args.concurrency * 2)
    async with httpx.AsyncClient(base_url=url, timeout=args.request_timeout, limits=limits) as c:
        async def worker() -> None:
            while time.monotonic() < deadline and state["next"] < args.max_requests:
                i = state["next"]
                state["next"] += 1
                kind = KINDS[i % len(KINDS)]
                try:
                    result = await one(c, kind, i, "soak")
                except httpx.HTTPError as e:
                    result = f"client_{type(e).__name__}"
                counts[f"{kind}:{result}"] += 1
                state["done"] += 1

        async def sampler() -> None:
            while True:
                m = gauges((await c.get("/metrics")).text)
                t_s = round(time.monotonic() - state["t0"], 1)
                if args.probe and t_s >= args.warmup_s and not state.get("probed"):
                    state["probed"] = await probed(pid, args.probe, 0)   # then the warm-up row
                samples.append({"t_s": t_s, "requests": state["done"],
                                "rss_mib": round(rss_mib(pid), 1), "load1": os.getloadavg()[0],
                                **m})
                if time.monotonic() >= deadline or state["next"] >= args.max_requests:
                    return
                await asyncio.sleep(min(args.sample_s, max(0.0, deadline - time.monotonic())))

        workers = [asyncio.create_task(worker()) for _ in range(args.concurrency)]
        await sampler()
        await asyncio.gather(*workers)
        for _ in range(60):         # the server notices the last abandoned streams a little later
            m = gauges((await c.get("/metrics")).text)
            if not m.get("running") and not m.get("waiting"):
                break
            await asyncio.sleep(0.5)
        samples.append({"t_s": round(time.monotonic() - state["t0"], 1), "requests": state["done"],
                        "rss_mib": round(rss_mib(pid), 1), "load1": os.getloadavg()[0],
                        **gauges((await c.get("/metrics")).text)})
        if args.probe and state.get("probed"):      # after the last sample: a probe costs RSS
            await probed(pid, args.probe, 1)


async def probed(pid: int, prefix: Path, n: int) -> bool:
    """Ask the probing server (soak_probe.py) for its n-th memory probe and wait for it."""
    os.kill(pid, signal.SIGUSR1)
    for _ in range(600):
        if Path(f"{prefix}-{n}.json").exists():
            return True
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the server wrote no probe {prefix}-{n}.json in 300 s")


def summarize(samples: list[dict], warmup_s: float) -> dict:
    after = [s for s in samples if s["t_s"] >= warmup_s] or samples[-1:]
    x = [s["requests"] for s in after]
    y = [s["rss_mib"] for s in after]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxx = sum((a - mx) ** 2 for a in x)
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx if sxx else 0.0
    return {"rss_start_mib": samples[0]["rss_mib"], "rss_warmup_end_mib": after[0]["rss_mib"],
            "warmup_end_requests": after[0]["requests"], "rss_end_mib": samples[-1]["rss_mib"],
            "rss_max_mib": max(s["rss_mib"] for s in samples), "requests": samples[-1]["requests"],
            "slope_mib_per_1000_requests": round(slope * 1000, 2),
            "growth_after_warmup_mib": round(samples[-1]["rss_mib"] - after[0]["rss_mib"], 1),
            "kv_usage_end": samples[-1].get("kv_usage"), "samples": len(samples)}


def machine() -> dict:
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((x.split(":", 1)[1].strip() for x in lines if x.startswith("model name")), "")
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def start_server(port: int, log: Path, extra: list[str], probe: Path | None) -> subprocess.Popen:
    serve = [sys.executable, "-m", "minimal_engine.serve"] if probe is None else [
        sys.executable, str(Path(__file__).with_name("soak_probe.py")), str(probe)]
    cmd = [*serve, "--port", str(port), "--dtype", "float32", "--threads", "1",
           "--served-model-name", "soak", *extra]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode}) before it was ready: {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"the server was not ready in 300 s; see {log}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--sample-s", type=float, default=10.0, help="seconds between RSS samples")
    p.add_argument("--warmup-s", type=float, default=None, help="default: a tenth of the run")
    p.add_argument("--max-requests", type=int, default=100_000)
    p.add_argument("--request-timeout", type=float, default=120.0)
    p.add_argument("--out", type=Path, default=Path("results/soak"))
    p.add_argument("--server-arg", action="append", default=[], help="passed to the server")
    p.add_argument("--probe", action="store_true",
                   help="tracemalloc in the server, probes at warm-up end and at the end (slower)")
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.concurrency < 1 or args.sample_s <= 0:
        p.error("--minutes and --sample-s must be positive and --concurrency at least 1")
    if not sys.platform.startswith("linux"):
        p.error(f"the RSS is read from /proc (Linux); this is {sys.platform}")
    if args.warmup_s is None:
        args.warmup_s = args.minutes * 6
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.probe = args.out.with_suffix(".probe") if args.probe else None
    for old in args.out.parent.glob(args.out.name + ".probe-*"):
        old.unlink()
    log = args.out.with_suffix(".server.log")
    port = free_port()
    info = {"machine": machine(), "load1_start": os.getloadavg()[0]}
    server = start_server(port, log, args.server_arg, args.probe)
    samples: list[dict] = []
    counts: Counter = Counter()
    try:
        asyncio.run(drive(f"http://127.0.0.1:{port}", server.pid, args, samples, counts))
        alive = server.poll() is None
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    summary = {**summarize(samples, args.warmup_s), "server_alive_at_end": alive,
               "server_tracebacks": log.read_text(errors="replace").count("Traceback")}
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    report = {"settings": settings,
              **info, "load1_end": os.getloadavg()[0], "counts": dict(sorted(counts.items())),
              "summary": summary, "samples": samples}
    if args.probe:
        from soak_probe import compare
        report["probe"] = compare(str(args.probe))
    args.out.with_suffix(".json").write_text(json.dumps(report, ensure_ascii=False, indent=1))
    keys = sorted({k for s in samples for k in s})
    with args.out.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        w.writerows(samples)
    print(json.dumps({"counts": report["counts"], **summary}, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
