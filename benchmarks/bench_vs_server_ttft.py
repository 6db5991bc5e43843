"""Does the bench client measure what the server measures? (issue 28 #7)

Starts `python -m minimal_engine.serve` in its own process (the default model, float32, one thread), sends the
same random-token workload with the project's bench client (`minimal_engine.bench.online`) at each concurrency,
and compares, per round, the client's mean TTFT with the server's own (`vllm:time_to_first_token_seconds`
sum / count over the same requests, read from /metrics before and after), and the prompt tokens the server
counted with the requested input length.

    PYTHONPATH=. python benchmarks/bench_vs_server_ttft.py [--rounds 3] [--num-prompts 16] [--input-len 64]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from minimal_engine.bench.online import run_online
from minimal_engine.bench.workload import prompt_inputs, prompt_texts, random_requests


def ttft_sum_count(url: str) -> tuple[float, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    s = c = 0.0
    for fam in text_string_to_metric_families(text):
        if fam.name == "vllm:time_to_first_token_seconds":
            for x in fam.samples:
                s += x.value if x.name.endswith("_sum") else 0
                c += x.value if x.name.endswith("_count") else 0
    return s, c


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--num-prompts", type=int, default=16)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    p.add_argument("--text-prompts", action="store_true", help="send random prompts as decoded text (the old way)")
    p.add_argument("--server-pythonpath", default=None,
                   help="run the server from another checkout (e.g. a git worktree of an older commit)")
    args = p.parse_args()
    from minimal_engine.config import DEFAULT_MODEL
    from minimal_engine.model.tokenizer import Tokenizer
    tok = Tokenizer(DEFAULT_MODEL)
    url = f"http://127.0.0.1:{args.port}"
    server = subprocess.Popen([sys.executable, "-m", "minimal_engine.serve", "--port", str(args.port), "--dtype",
                               "float32", "--threads", "1", "--served-model-name", "m"], stdout=subprocess.DEVNULL,
                              env={**os.environ, **({"PYTHONPATH": args.server_pythonpath} if args.server_pythonpath else {})},
                              cwd=args.server_pythonpath)
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        rows = []
        for r in range(args.rounds):
            for c in args.concurrency:
                reqs = random_requests(args.num_prompts, args.input_len, args.output_len, len(tok), seed=r,
                                       avoid_ids=[tok.eos_token_id])
                before = ttft_sum_count(url)
                inputs = prompt_texts(reqs, tok) if args.text_prompts else prompt_inputs(reqs, tok)
                res = run_online(url, "m", inputs, [q.output_len for q in reqs],
                                 max_concurrency=c, use_tqdm=False)
                after = ttft_sum_count(url)
                server_ms = (after[0] - before[0]) / (after[1] - before[1]) * 1000
                rows.append({"round": r, "concurrency": c, "failed": res["failed"],
                             "client_mean_ttft_ms": res["mean_ttft_ms"], "server_mean_ttft_ms": server_ms,
                             "difference_ms": res["mean_ttft_ms"] - server_ms,
                             "prompt_tokens_per_request": res["total_input_tokens"] / max(1, res["completed"])})
                print(json.dumps(rows[-1]))
    finally:
        server.terminate()
        server.wait(30)
    print(f"CPU: {platform.processor() or platform.machine()}, threads: server 1, load: {os.getloadavg()}")
    for c in args.concurrency:
        d = [x["difference_ms"] for x in rows if x["concurrency"] == c]
        print(f"C={c}: client - server mean TTFT, median over rounds {statistics.median(d):.2f} ms "
              f"(min {min(d):.2f}, max {max(d):.2f})")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
