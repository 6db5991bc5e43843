"""The soak script (benchmarks/soak.py, issue 42) in a 20-second version: it starts the server on
loopback (with the memory probe, benchmarks/soak_probe.py), sends every kind of request (aborted
streams included), samples RSS and writes its files; the server survives, answers no error, and
gives every KV block back at the end; the probe reports allocation sites, object types and malloc."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "soak.py"


def run(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_short_soak(tmp_path):
    out = tmp_path / "soak"
    r = run("--minutes", "0.34", "--sample-s", "3", "--warmup-s", "6", "--concurrency", "3",
            "--out", str(out), "--probe")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads(out.with_suffix(".json").read_text())
    counts, summary = report["counts"], report["summary"]
    kinds = {k.split(":")[0] for k, n in counts.items() if n and k.split(":")[1] in ("ok", "aborted")}
    assert kinds == {"completion", "chat", "stream_completion", "stream_chat", "json_schema",
                     "guided", "abort"}, counts
    assert counts.get("abort:aborted", 0) >= 1
    bad = {k: n for k, n in counts.items() if not k.endswith((":ok", ":aborted"))}
    assert not bad, bad                                  # no 4xx/5xx, no client-side failure
    assert summary["server_alive_at_end"] and summary["server_tracebacks"] == 0
    assert summary["kv_usage_end"] == 0.0                # aborted streams gave their blocks back
    assert summary["requests"] == sum(counts.values())
    rows = list(csv.DictReader(out.with_suffix(".csv").open()))
    assert len(rows) == len(report["samples"]) >= 3
    assert all(float(row["rss_mib"]) > 100 for row in rows)   # the real server process, not 0
    assert float(rows[-1]["requests"]) == summary["requests"]
    assert summary["rss_end_mib"] == float(rows[-1]["rss_mib"])
    assert report["machine"]["cores"] == os.cpu_count()
    probe = report["probe"]
    assert probe["top_sites"] and all(":" in site["where"] for site in probe["top_sites"])
    assert probe["top_types"] and isinstance(probe["objects_growth"], int)
    assert {"in_use_mib", "free_kept_mib"} <= set(probe["malloc_growth_mib"])   # glibc


def test_bad_options_are_refused():
    r = run("--minutes", "0", timeout=60)
    assert r.returncode == 2 and "--minutes" in r.stderr
