"""Command line: stream an answer to the terminal, then print its timings; or serve, or benchmark.

    python -m minimal_engine generate "吾輩は"                       # the default model
    python -m minimal_engine generate --model PATH --max-tokens 64 --temperature 0.8 "東京の空は"
    python -m minimal_engine serve --port 8000                      # = python -m minimal_engine.serve ...
    python -m minimal_engine bench --max-concurrency 1 4            # = python -m minimal_engine.bench ...
"""
from __future__ import annotations

import argparse
import sys

from minimal_engine.llm import LLM
from minimal_engine.sampling_params import SamplingParams


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["serve"]:                    # the OpenAI-compatible server, with its own arguments
        from minimal_engine.serve.cli import main as serve_main
        return serve_main(argv[1:])
    if argv[:1] == ["bench"]:                    # the benchmark client, with its own arguments
        from minimal_engine.bench.__main__ import main as bench_main
        return bench_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m minimal_engine")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="the OpenAI-compatible server (python -m minimal_engine serve --help)")
    sub.add_parser("bench", help="the benchmark (python -m minimal_engine bench --help)")
    g = sub.add_parser("generate", help="stream one answer and print TTFT, TPOT, tok/s")
    g.add_argument("prompt")
    g.add_argument("--model", default=None, help="model folder, hub id or synthetic:NAME (default: the course model)")
    g.add_argument("--device", default=None)
    g.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    g.add_argument("--max-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=-1)
    g.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        params = SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                                max_tokens=args.max_tokens, seed=args.seed)
        llm = LLM(args.model, dtype=args.dtype, device=args.device)
        engine = llm.engine
        engine.add_request(args.prompt, params)
    except (ValueError, TypeError, FileNotFoundError, NotADirectoryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(args.prompt, end="", flush=True)
    out = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            print(out.new_text, end="", flush=True)
    m = out.metrics
    n = m.num_output_tokens
    tpot = f"{m.tpot * 1000:.1f} ms" if m.tpot is not None else "n/a (1 token)"
    print(f"\n\n[{llm.model_name} on {llm.device}, {llm.dtype}] prompt {m.num_prompt_tokens} tokens, "
          f"output {n} tokens ({out.finish_reason})")
    print(f"TTFT {m.ttft * 1000:.1f} ms   TPOT {tpot}   decode {1 / m.tpot if m.tpot else float('nan'):.1f} tok/s"
          f"   overall {n / m.e2e_latency:.1f} tok/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
