"""`python -m minimal_engine.serve`: the server's command line (options named as vLLM's `vllm serve`).

    python -m minimal_engine.serve --model PATH|synthetic:NAME --host 127.0.0.1 --port 8000 [--max-queue 64]
        [--max-body-bytes N] [--max-prompt-chars N] [--header-timeout S] [--body-timeout S]
        [--allowed-host NAME ...] [--docs] [--quantization int8] [--kv-cache-dtype fp8|int8]
        [--tensor-parallel-size N] [--speculative-config JSON] [--api-key KEY]

A --host other than loopback (0.0.0.0 for a classroom's shared server) needs an API key:
--api-key KEY or the environment variable MINIMAL_ENGINE_API_KEY (vLLM's is VLLM_API_KEY);
without one the server refuses to start, before loading the model (auth.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from minimal_engine.serve.app import build_app
from minimal_engine.serve.auth import ENV_VAR, check_bind, is_loopback, resolve_api_key
from minimal_engine.serve.limits import LOOPBACK_NAMES, ServeLimits, header_timeout_protocol


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m minimal_engine.serve", description="An OpenAI-compatible server for minimal_engine")
    parser.add_argument("--model", default=None, help="model folder, hub id or synthetic:NAME (default: the course model)")
    parser.add_argument("--served-model-name", default=None, help="the name clients send as 'model'")
    parser.add_argument("--host", default="127.0.0.1", help="loopback by default; other addresses expose the server")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--max-num-seqs", type=int, default=64, help="requests in one engine step")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--enable-prefix-caching", action="store_true", help="reuse KV blocks of shared prompt prefixes")
    parser.add_argument("--max-queue", type=int, default=64, help="waiting requests beyond max-num-seqs; more get 429")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: all cores but one, left to the HTTP side; see serve_threads)")
    d = ServeLimits()
    parser.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, help="larger bodies get 413")
    parser.add_argument("--max-prompt-chars", type=int, default=None,
                        help="longer prompts get 400 before tokenizing (default: what can fit in max_model_len)")
    parser.add_argument("--header-timeout", type=float, default=d.header_timeout_s, help="seconds for request headers")
    parser.add_argument("--shutdown-timeout", type=float, default=d.shutdown_timeout_s,
                        help="seconds to drain running requests on SIGTERM before aborting them and exiting")
    parser.add_argument("--write-timeout", type=float, default=d.write_timeout_s,
                        help="seconds a streaming client may take to accept a chunk before its request is aborted")
    parser.add_argument("--body-timeout", type=float, default=d.body_timeout_s, help="seconds for the request body")
    parser.add_argument("--allowed-host", action="append", default=[],
                        help="a Host name clients may use besides the loopback names and --host ('*': any)")
    parser.add_argument("--docs", action="store_true", help="serve FastAPI's interactive /docs (off by default)")
    parser.add_argument("--api-key", default=None,
                        help=f"clients must send 'Authorization: Bearer KEY' (every route but "
                             f"/health and /metrics); default: ${ENV_VAR}; required for a "
                             "non-loopback --host")
    # the chapters' engine features, named as in vLLM (chapters 6, 7 and 8)
    parser.add_argument("--quantization", default=None, choices=["int8"], help="weight-only INT8 (quantization.py)")
    parser.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8", "int8"], help="KV pool format")
    parser.add_argument("--tensor-parallel-size", type=int, default=1, help="worker processes sharing the model")
    parser.add_argument("--speculative-config", type=json.loads, default=None,
                        help='JSON, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\'')
    return parser


def make_llm(args: argparse.Namespace):
    from minimal_engine.llm import LLM
    return LLM(args.model, dtype=args.dtype, device=args.device, max_num_seqs=args.max_num_seqs,
               max_model_len=args.max_model_len, enable_prefix_caching=args.enable_prefix_caching,
               quantization=args.quantization, kv_cache_dtype=args.kv_cache_dtype,
               tensor_parallel_size=args.tensor_parallel_size, speculative_config=args.speculative_config)


def serve_threads(requested: int | None, default_threads: int, env: dict) -> int | None:
    """Torch threads for a CPU server: ``--threads`` if given; else None (leave PyTorch's choice) when OMP_NUM_THREADS
    is set; else every core PyTorch would use but one. The event loop (HTTP, JSON, detokenizing) needs a core of its
    own: with as many OpenMP threads as cores, each parallel region waits for the thread the loop displaced (2 cores,
    default model, float32, 128 in / 128 out, one client: TPOT 5.5 ms with 2 threads, 2.7 ms with 1; benchmarks/
    README.md). vLLM's CPU guide gives the same advice: keep the OpenMP threads off the web-service event loop."""
    if requested is not None:
        if requested < 1:
            raise SystemExit(f"--threads must be at least 1, got {requested}")
        return requested
    if env.get("OMP_NUM_THREADS"):
        return None
    return max(1, default_threads - 1)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:                                    # before the model loads: a refused start costs nothing
        api_key = resolve_api_key(args.api_key, os.environ)
        check_bind(args.host, api_key)
    except ValueError as e:                 # the reason alone (argparse's usage block would bury it)
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    import torch
    import uvicorn

    threads = serve_threads(args.threads, torch.get_num_threads(), os.environ)
    if threads is not None:
        torch.set_num_threads(threads)
    llm = make_llm(args)
    if not is_loopback(args.host):
        print(f"listening on {args.host}: clients on the network call http://<this machine's "
              f"address>:{args.port}/v1 with 'Authorization: Bearer KEY'; a host name in their "
              "URL needs --allowed-host")
    if api_key:
        print("API key required on every route but /health, /metrics and /version")
    name = args.served_model_name or llm.model_name
    print(f"serving {name!r} on http://{args.host}:{args.port} ({llm.device}, {llm.dtype}, "
          f"{torch.get_num_threads()} torch threads)")
    limits = ServeLimits(args.max_body_bytes, args.max_prompt_chars, args.body_timeout, args.header_timeout,
                         (*LOOPBACK_NAMES, args.host, *args.allowed_host), args.docs, args.shutdown_timeout,
                         args.write_timeout, api_key)
    uvicorn.run(build_app(llm, args.max_queue, args.served_model_name, limits), host=args.host, port=args.port,
                log_level="warning", http=header_timeout_protocol(limits.header_timeout_s),
                timeout_graceful_shutdown=limits.shutdown_timeout_s)
    return 0
