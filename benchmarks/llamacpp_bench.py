"""The engine next to llama.cpp on the same weights (CPU): batch-1 TPOT, prefill and 32-sequence throughput.

    python benchmarks/llamacpp_bench.py --model synthetic:llama-125m --outtype bf16 f16 f32 q8_0 \
        --threads 2 --rounds 5 --out results/llamacpp

1. The engine's model (any `LLM(...)` model: synthetic:NAME, a folder) is exported to GGUF with the `gguf`
   package (minimal_engine/tools/gguf_export.py) and read back: every tensor compared with the engine's.
2. Each round runs the engine (bfloat16) once and llama.cpp once per GGUF type, one after the other, so
   both meet the same load on a shared machine; the ratios are taken within a round and their median printed.
   * batch-1 decode: TPOT in ms (engine: 128-token prompt, 128 new tokens; llama-bench: `-n 128`, which
     decodes from an empty context: its KV reads are smaller, a small advantage to llama.cpp);
   * prefill: tok/s of one 512-token prompt, or max_model_len - 1 tokens for a shorter model (the default model:
     511) (engine: tokens / TTFT of a 1-token request; llama-bench `-p` the same length);
   * throughput: output tok/s of 32 sequences x (128 in, 128 out), prefill included in the time
     (engine: 32 requests at once; llama-batched-bench `-npp 128 -ntg 128 -npl 32`: B x TG / T).

`--int8` also runs the engine with INT8 weights (`quantization="int8"`) against llama.cpp's Q8_0 file (the pair
of 8-bit formats; q8_0 is exported for it). Each round records the load average; the JSON records the CPU model,
its SIMD flags and PyTorch's CPU capability.

llama.cpp is optional and not installed by the project. Either build it (cmake -B build -DGGML_NATIVE=ON &&
cmake --build build -j; put build/bin on PATH: the script calls `llama-bench` and `llama-batched-bench`),
or `pip install llama-cpp-python` (it compiles llama.cpp in a few minutes; it gives batch-1 and prefill,
not the 32-sequence figure). Without either, the script exports and verifies the files and says so.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.bench import random_requests, run_offline
from minimal_engine.tools.gguf_export import OUTTYPES, export_gguf, verify_gguf

METRICS = {"tpot_ms": "batch-1 TPOT ms (engine / llama.cpp; above 1 = engine slower)",
           "prefill_tok_s": "prefill of one long prompt (512 tokens or max_model_len - 1), tok/s (engine / llama.cpp)",
           "throughput_tok_s": "32 sequences x (128 in, 128 out), output tok/s (engine / llama.cpp)"}


# ---- the engine ---------------------------------------------------------------------------------------------
def prefill_len(max_model_len: int) -> int:
    """The long prompt: 512 tokens, or what leaves room for one new token (the default model has 512 positions)."""
    return min(512, max_model_len - 1)


def engine_round(llm, vocab: int, seed: int, batch: int = 32, io: tuple[int, int] = (128, 128)) -> dict:
    one = random_requests(1, io[0], io[1], vocab, seed=seed)
    tpot = run_offline(llm, one, 1, use_tqdm=False)["median_tpot_ms"]
    n = prefill_len(llm.config.max_model_len)
    prompt = random_requests(1, n, 1, vocab, seed=seed + 1)[0].prompt_ids
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=1, ignore_eos=True), use_tqdm=False)[0]
    many = random_requests(batch, io[0], io[1], vocab, seed=seed + 2)
    thr = run_offline(llm, many, batch, use_tqdm=False)["output_throughput"]
    return {"tpot_ms": tpot, "prefill_tok_s": n / out.metrics.ttft, "throughput_tok_s": thr}


def machine_info() -> dict:
    """The CPU model, its SIMD flags that matter here, PyTorch's CPU capability, the load average now."""
    import os
    import platform
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("", platform.machine()):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    wanted = sorted(f for f in flags if f in ("avx2", "fma", "f16c") or f.startswith(("avx512", "amx", "avx_vnni")))
    return {"cpu": model, "flags": wanted, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None}


# ---- llama.cpp: command-line tools ----------------------------------------------------------------------------
def parse_llama_bench(text: str) -> dict:
    """llama-bench -o json: one entry per test; pp = n_prompt > 0, tg = n_gen > 0; avg_ts in tok/s."""
    out = {}
    for e in json.loads(text):
        if e.get("n_gen", 0) > 0 and e.get("n_prompt", 0) == 0:
            out["tpot_ms"] = 1000.0 / e["avg_ts"]
        elif e.get("n_prompt", 0) > 0 and e.get("n_gen", 0) == 0:
            out["prefill_tok_s"] = e["avg_ts"]
    return out


def parse_batched_bench(text: str) -> float:
    """llama-batched-bench's table (| PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |):
    output tok/s = B x TG / T of the first data row."""
    header = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "PP" in cells and "TG" in cells and "B" in cells:
            header = cells
        elif header and len(cells) == len(header) and cells[0].replace(".", "").isdigit():
            row = dict(zip(header, cells))
            return int(row["B"]) * int(row["TG"]) / float(row["T s"])
    raise ValueError("no result table in llama-batched-bench's output")


def cli_round(gguf: Path, threads: int, prompt: int = 512) -> dict:
    r = subprocess.run(["llama-bench", "-m", str(gguf), "-t", str(threads), "-p", str(prompt), "-n", "128", "-r", "1",
                        "-o", "json"], capture_output=True, text=True, check=True)
    res = parse_llama_bench(r.stdout)
    if shutil.which("llama-batched-bench"):
        r = subprocess.run(["llama-batched-bench", "-m", str(gguf), "-t", str(threads), "-c", str(32 * 256 + 256),
                            "-b", "2048", "-ub", "512", "-npp", "128", "-ntg", "128", "-npl", "32"],
                           capture_output=True, text=True, check=True)
        res["throughput_tok_s"] = parse_batched_bench(r.stdout + r.stderr)
    return res


# ---- llama.cpp: llama-cpp-python ------------------------------------------------------------------------------
def python_round(gguf: Path, threads: int, vocab: int, seed: int, cache: dict, prompt: int = 512) -> dict:
    import llama_cpp
    import numpy as np
    if gguf not in cache:
        cache[gguf] = llama_cpp.Llama(model_path=str(gguf), n_ctx=1024, n_batch=512, n_threads=threads,
                                      n_threads_batch=threads, logits_all=False, verbose=False)
    m = cache[gguf]
    prompt = random_requests(1, 128, 1, vocab, seed=seed)[0].prompt_ids
    m.reset()
    m.eval(prompt)
    t0 = time.perf_counter()
    for _ in range(128):                          # greedy, one token at a time
        m.eval([int(np.argmax(m.scores[m.n_tokens - 1]))])
    tpot = (time.perf_counter() - t0) / 128 * 1000
    long = random_requests(1, prompt, 1, vocab, seed=seed + 1)[0].prompt_ids
    m.reset()
    t0 = time.perf_counter()
    m.eval(long)
    return {"tpot_ms": tpot, "prefill_tok_s": prompt / (time.perf_counter() - t0)}


def find_llama_cpp() -> str | None:
    if shutil.which("llama-bench"):
        return "cli"
    try:
        import llama_cpp  # noqa: F401
        return "python"
    except ImportError:
        return None


def ratios(engine: dict, other: dict) -> dict:
    return {k: engine[k] / other[k] for k in METRICS if k in engine and k in other and other[k]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="synthetic:llama-125m")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="the engine's dtype")
    ap.add_argument("--outtype", nargs="+", default=["bf16", "f16", "f32", "q8_0"], choices=OUTTYPES)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="results/llamacpp", help="folder for the GGUF files and the JSON (git ignores results/)")
    ap.add_argument("--export-only", action="store_true")
    ap.add_argument("--int8", action="store_true", help="also the engine with INT8 weights against the Q8_0 file")
    args = ap.parse_args(argv)
    if args.int8 and "q8_0" not in args.outtype:
        args.outtype = [*args.outtype, "q8_0"]
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    llm = LLM(args.model, dtype=args.dtype, device="cpu", max_num_seqs=32)
    vocab = llm.model_config.vocab_size
    files = {}
    for t in args.outtype:
        name = args.model.replace("synthetic:", "").replace("/", "_").strip("_")
        files[t] = export_gguf(llm, out / f"{name}-{t}.gguf", t)
        check = verify_gguf(llm, files[t])
        print(f"exported {files[t]} ({files[t].stat().st_size / 1e6:.0f} MB): {check['tensors']} tensors read back, "
              f"max |difference| {check['max_abs_error']:.2g}")
    backend = find_llama_cpp()
    if args.export_only or backend is None:
        if backend is None:
            print("no llama.cpp found (llama-bench on PATH, or the llama_cpp module): only exported and verified. "
                  "See this script's docstring for how to get one.")
        return 0
    rounds, cache, n = [], {}, prefill_len(llm.config.max_model_len)
    int8 = LLM(args.model, dtype=args.dtype, device="cpu", max_num_seqs=32, quantization="int8") if args.int8 else None
    machine = machine_info()
    print(f"CPU: {machine['cpu']} ({', '.join(machine['flags'])}; PyTorch {machine['torch_cpu_capability']}); "
          f"engine kernels: {llm.engine.runner.describe_kernels()}")
    for i in range(args.rounds):                  # engine, then each GGUF type: the same load for all
        row = {"round": i, "loadavg": machine_info()["loadavg"], "engine": engine_round(llm, vocab, seed=i)}
        if int8 is not None:
            row["engine_int8"] = engine_round(int8, vocab, seed=i)
        for t, f in files.items():
            row[t] = (cli_round(f, args.threads, n) if backend == "cli"
                      else python_round(f, args.threads, vocab, i, cache, n))
            row[f"ratio_{t}"] = ratios(row["engine"], row[t])
        if int8 is not None:
            row["ratio_int8_q8_0"] = ratios(row["engine_int8"], row["q8_0"])
        rounds.append(row)
        print(f"round {i + 1}: " + "; ".join(f"{t}: " + ", ".join(f"{k} {v:.2f}" for k, v in row[f"ratio_{t}"].items())
                                           for t in files))
    print(f"\nengine {args.dtype} vs llama.cpp ({backend}), {args.threads} threads, median of {args.rounds} "
          f"per-round ratios:")
    columns = [t.upper() for t in files] + (["INT8 vs Q8_0"] if int8 is not None else [])
    print("| | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns))
    summary = {}
    pairs = [(t, f"ratio_{t}") for t in files] + ([("int8/q8_0", "ratio_int8_q8_0")] if int8 is not None else [])
    if int8 is not None:
        print("(the last column: the engine with INT8 weights against Q8_0)")
    for k, label in METRICS.items():
        cells = []
        for t, key in pairs:
            vals = [r[key][k] for r in rounds if k in r[key]]
            summary[f"{k}/{t}"] = (statistics.median(vals), min(vals), max(vals)) if vals else None
            cells.append(f"{summary[f'{k}/{t}'][0]:.2f} ({min(vals):.2f}-{max(vals):.2f})" if vals else "-")
        print(f"| {label} | " + " | ".join(cells) + " |")
    (out / "llamacpp_bench.json").write_text(json.dumps(
        {"argv": sys.argv[1:] if argv is None else argv, "backend": backend, "threads": args.threads,
         "torch": torch.__version__, "machine": machine, "prefill_len": n, "rounds": rounds,
         "median_min_max_ratios": summary}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
