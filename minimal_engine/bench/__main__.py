"""Command line for the benchmarks (see __init__.py for examples). Prints tables; with --out also writes
NAME.json (vLLM field names), NAME.csv and NAME.png (output tok/s vs tok/s/user)."""
from __future__ import annotations

import argparse
import os
import platform
import sys

import torch

from minimal_engine.bench.roofline import format_machine, measure_machine, step_cost
from minimal_engine.bench import (dataset_requests, decode_step_time, format_median_ratios, format_ratios, format_table, median_ratios,
               plot_throughput_vs_interactivity, prompt_inputs, random_requests, ratios, run_online, save_results)
from minimal_engine.bench.offline import add_bounds, run_offline


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m minimal_engine.bench", description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=["engine", "openai", "openai-chat"], default="engine")
    p.add_argument("--model", default=None, help="folder, hub id or synthetic:NAME; online: the served name")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default=None)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--tensor-parallel-size", type=int, default=1,
                   help="split the model over N processes (gloo on the CPU, NCCL on CUDA): features/tensor_parallel/")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--range-ratio", type=float, default=1.0, help="input length uniform in [ratio x L, L]")
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--output-range-ratio", type=float, default=None, help="default: --range-ratio")
    p.add_argument("--dataset", default=None, help="jsonl with a 'prompt' field (and optional 'output_len')")
    p.add_argument("--num-prompts", type=int, default=None, help="default: 10 x max concurrency")
    p.add_argument("--max-concurrency", type=int, nargs="+", default=[1])
    p.add_argument("--request-rate", type=float, default=float("inf"), help="online: Poisson rate, req/s")
    p.add_argument("--compare", nargs="*", default=[], choices=["hf", "hf-cb"],
                   help="hf: transformers generate, static batches; hf-cb: transformers continuous batching")
    p.add_argument("--repeats", type=int, default=1,
                   help="run the engine and the baselines this many times, alternating; ratios: median of the runs")
    p.add_argument("--decode-step-batch", type=int, nargs="*", default=[], help="also time pure decode steps")
    p.add_argument("--decode-step-prompt", type=int, default=128)
    p.add_argument("--profile", action="store_true",
                   help="only profile decode steps (batch sizes: --decode-step-batch, default 1) with torch.profiler "
                        "and print the top operators and where the step's time goes")
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--tokenizer", default=None, help="online: tokenizer folder for random prompts")
    p.add_argument("--api-key", default=os.environ.get("MINIMAL_ENGINE_API_KEY") or None,
                   help="online: sent as 'Authorization: Bearer KEY' (default: "
                        "$MINIMAL_ENGINE_API_KEY, which the server reads; OPENAI_API_KEY is "
                        "never sent)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shared-prefix-len", type=int, default=0,
                   help="every prompt starts with the same N tokens; runs prefix caching off and on, prints the "
                        "TTFT ratio (bench/prefix.py)")
    p.add_argument("--speculative-config", default=None,
                   help='JSON, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\': the engine speculates, and '
                        'the same engine without speculation runs the same requests as the baseline "no_speculation"')
    p.add_argument("--no-roofline", action="store_true", help="skip measuring this machine's peaks")
    p.add_argument("--out", default=None, help="folder for NAME.json / .csv / .png")
    p.add_argument("--name", default="bench")
    p.add_argument("--no-tqdm", action="store_true")
    return p.parse_args(argv)


def without_key(argv: list[str]) -> list[str]:
    """The command line as saved with the results: the value of --api-key (or of an
    abbreviation that argparse accepts, such as --api) replaced by '***'."""
    out = list(argv)
    for i, a in enumerate(out):
        name, eq, _ = a.partition("=")
        if len(name) > 3 and "--api-key".startswith(name):
            if eq:
                out[i] = name + "=***"
            elif i + 1 < len(out):
                out[i + 1] = "***"
    return out


def make_requests(args, c, vocab_size, tokenizer):
    n = args.num_prompts or 10 * c
    if args.dataset:
        return dataset_requests(args.dataset, n, tokenizer, args.output_len,
                                args.output_range_ratio or args.range_ratio, args.seed)
    return random_requests(n, args.input_len, args.output_len, vocab_size, args.range_ratio,
                           args.output_range_ratio, args.seed)


def parse_spec(text: str | None) -> dict | None:
    if not text:
        return None
    import json
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--speculative-config must be JSON, e.g. '{{\"method\": \"ngram\", "
                         f"\"num_speculative_tokens\": 4}}': {e}") from None
    return spec


def format_spec(rows: list[dict]) -> str:
    return "\n".join(f"speculative decoding ({r['spec_method']}, k={r['num_speculative_tokens']}), "
                     f"C={r['max_concurrency']}: "
                     f"proposed {r['spec_proposed']}, accepted {r['spec_accepted']}, acceptance rate "
                     f"{r['spec_acceptance_rate']:.3f}, mean accepted length {r['spec_mean_accepted_length']:.2f} "
                     "tokens/step" for r in rows if "spec_proposed" in r)


def run_engine(args, machine, tqdm) -> tuple[list, dict]:
    from minimal_engine.llm import LLM
    from minimal_engine.bench.hf_baselines import hf_model_for, run_hf_continuous, run_hf_static
    kw = dict(dtype=args.dtype, device=args.device, max_num_seqs=max(64, *args.max_concurrency), seed=args.seed,
              tensor_parallel_size=args.tensor_parallel_size)
    spec = parse_spec(args.speculative_config)
    llm = LLM(args.model, speculative_config=spec, **kw)
    plain = LLM(args.model, **kw) if spec else None      # the same engine without speculation: the baseline
    hf = hf_model_for(llm) if args.compare else None
    rows, extra = [], {"model": llm.model_name, "dtype": str(llm.dtype), "device": str(llm.device),
                       "linear_kernels": llm.engine.runner.describe_kernels()}
    print("linear kernels:", extra["linear_kernels"])
    for c in args.max_concurrency:
        reqs = make_requests(args, c, llm.model_config.vocab_size, llm.tokenizer)
        group = []
        for rep in range(args.repeats):   # engine, baselines, engine, baselines, ...: they meet the same load
            runs = [run_offline(llm, reqs, c, use_tqdm=tqdm)]
            if plain is not None:
                runs.append(dict(run_offline(plain, reqs, c, use_tqdm=tqdm), backend="no_speculation"))
            if "hf" in args.compare:
                runs.append(run_hf_static(hf, reqs, c, use_tqdm=tqdm))
            if "hf-cb" in args.compare:
                try:
                    runs.append(run_hf_continuous(hf, reqs, c, use_tqdm=tqdm))
                except Exception as e:     # say so in the output instead of hiding the baseline
                    print(f"transformers continuous batching failed at C={c}: {type(e).__name__}: {e}", file=sys.stderr)
                    extra.setdefault("failed_baselines", []).append(
                        {"backend": "hf_generate_batch", "max_concurrency": c, "error": f"{type(e).__name__}: {e}"})
            for r in runs:
                r["repeat"] = rep
            group += runs
        for r in group:
            r.update(model=llm.model_name, input_len=args.input_len, output_len=args.output_len,
                     range_ratio=args.range_ratio, dataset=args.dataset)
            if machine:
                add_bounds(r, reqs, llm.model_config, llm.dtype.itemsize, machine)
        rows += group
    steps = []
    for b in args.decode_step_batch:
        d = decode_step_time(llm, b, args.decode_step_prompt)
        if machine:
            cost = step_cost(llm.model_config, llm.dtype.itemsize, [d["mean_context"]] * b, machine=machine)
            d.update(bound_ms=cost["t_bound"] * 1000, bound_memory_ms=cost["t_memory"] * 1000,
                     bound_compute_ms=cost["t_compute"] * 1000, weight_bytes=cost["weight_bytes"],
                     kv_bytes=cost["kv_bytes"], flops=cost["flops"],
                     ratio_to_bound=d["median_step_ms"] / (cost["t_bound"] * 1000))
        steps.append(d)
    if steps:
        extra["decode_steps"] = steps
    if llm.engine.comm_stats:
        extra["comm_stats"] = {"tensor_parallel_size": args.tensor_parallel_size, **llm.engine.comm_stats}
    llm.close()
    return rows, extra


def run_profile(args) -> int:
    """--profile: the top operators of a decode step, and the step split into linear layers, attention, KV
    copies, other operators and time outside operators (bench/profile.py)."""
    import json
    from pathlib import Path

    from minimal_engine.llm import LLM
    from minimal_engine.bench.profile import format_profile, profile_decode_steps
    batches = args.decode_step_batch or [1]
    llm = LLM(args.model, dtype=args.dtype, device=args.device, max_num_seqs=max(64, *batches), seed=args.seed)
    print("linear kernels:", llm.engine.runner.describe_kernels())
    profiles = []
    for b in batches:
        p = profile_decode_steps(llm, b, args.decode_step_prompt, seed=args.seed)
        print(format_profile(p))
        profiles.append(p)
    if args.out:
        path = Path(args.out) / f"{args.name}_profile.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        saved = {**args.__dict__, "api_key": None}             # the key stays out of the file
        path.write_text(json.dumps({"argv": saved, "model": llm.model_name, "dtype": str(llm.dtype),
                                    "linear_kernels": llm.engine.runner.describe_kernels(),
                                    "threads": torch.get_num_threads(), "profiles": profiles}, indent=2))
        print("wrote", path)
    return 0


def run_openai(args, tqdm) -> tuple[list, dict]:
    from minimal_engine.config import DEFAULT_MODEL
    from minimal_engine.model.tokenizer import Tokenizer
    tok = Tokenizer(args.tokenizer or DEFAULT_MODEL)
    endpoint = "/v1/chat/completions" if args.backend == "openai-chat" else "/v1/completions"
    rows = []
    for c in args.max_concurrency:
        reqs = make_requests(args, c, len(tok), tok)
        r = run_online(args.base_url, args.model, prompt_inputs(reqs, tok, endpoint), [q.output_len for q in reqs],
                       max_concurrency=c, request_rate=args.request_rate, endpoint=endpoint, seed=args.seed,
                       use_tqdm=tqdm, api_key=args.api_key)
        r.pop("generated_texts")
        rows.append(r)
    return rows, {"base_url": args.base_url}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.repeats < 1:
        print(f"error: --repeats must be >= 1, got {args.repeats}", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.profile:
        try:
            return run_profile(args)
        except (ValueError, FileNotFoundError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    machine = None
    if args.backend == "engine" and not args.no_roofline and not args.shared_prefix_len:
        machine = measure_machine(args.device if args.device not in (None, "auto") else "cpu")
        print("this machine:", format_machine(machine))
    try:
        if args.backend == "engine" and args.shared_prefix_len:
            from minimal_engine.bench.prefix import run_prefix_bench
            rows, extra = run_prefix_bench(args)
        elif args.backend == "engine":
            rows, extra = run_engine(args, machine, not args.no_tqdm)
        else:
            if not args.model:
                print("error: --model (the served model name) is required with --backend openai", file=sys.stderr)
                return 2
            rows, extra = run_openai(args, not args.no_tqdm)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_table(rows))
    if format_spec(rows):
        print(format_spec(rows))
    rs = ratios(rows)
    if rs:
        print(format_ratios(rs))
    med = median_ratios(rs) if args.repeats > 1 else []
    if med:
        print(format_median_ratios(med))
    for d in extra.get("decode_steps", []):
        bound = (f", bound {d['bound_ms']:.1f} ms ({d['ratio_to_bound']:.2f}x; bytes/bandwidth "
                 f"{d['bound_memory_ms']:.1f} ms, FLOPs/peak {d['bound_compute_ms']:.1f} ms)") if "bound_ms" in d else ""
        comm = (f"; all-reduces {d['all_reduces_per_step']} x, {d['comm_bytes_per_step'] / 1e3:.1f} kB, "
                f"{d['comm_ms']:.2f} ms ({100 * d['comm_share']:.0f}% of the step)") if "comm_ms" in d else ""
        print(f"decode step, batch {d['batch_size']}, context ~{d['mean_context']}: "
              f"median {d['median_step_ms']:.1f} ms{bound}{comm}")
    if "comm_stats" in extra:
        c = extra["comm_stats"]
        print(f"tensor parallel {c['tensor_parallel_size']}: {c['steps']} steps, {c['all_reduces_per_step']:.0f} "
              f"all-reduces and {c['bytes_per_step'] / 1e3:.1f} kB per step, communication {c['ms_per_step']:.2f} "
              "ms per step (all-reduce wait + sending the step to the workers)")
    if args.out:
        cmd = without_key(sys.argv[1:] if argv is None else list(argv))
        meta = {"argv": cmd, "machine": machine, "ratios": rs,
                "median_ratios": med, "torch": torch.__version__, "threads": torch.get_num_threads(),
                "platform": platform.platform(), **extra}
        paths = save_results(rows, args.out, args.name, meta)
        plot_throughput_vs_interactivity(rows, paths["json"].with_suffix(".png"))
        print("wrote", paths["json"], paths["csv"], paths["json"].with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
