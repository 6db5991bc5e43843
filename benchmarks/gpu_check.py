"""`make gpu-check`: one prepared run on a machine with a GPU (an H200: under 8 minutes), JSON + Markdown.

    PYTHONPATH=. python3 benchmarks/gpu_check.py --out results/gpu_check     # on the GPU
    PYTHONPATH=. python3 benchmarks/gpu_check.py --tiny --out /tmp/check     # the same code, tiny, on the CPU

Needs only torch, transformers, numpy, safetensors and tokenizers (nothing is installed or downloaded: the
models are random weights of real shapes, or the course's default model shipped in the repository).
Three sections, in order; a failure stops the run and the summary says where:
  1. correctness: greedy tokens equal transformers' on the same weights, for random Llama, Qwen2 and Qwen3
     models and the default model: each prompt alone, in a mixed batch, with chunked prefill, with
     preemption, without CUDA graphs, with the gather attention path. float32 must match exactly; bfloat16
     must match or, where it differs, every token the engine chose must be within max(BF16_TIE_ATOL,
     BF16_TIE_RTOL x largest |logit|) of transformers' best logit at that position, transformers scoring the
     engine's sequence (a near tie that bf16 rounding may break either way).
  2. speed, against transformers in the same process and the roofline bounds (minimal_engine/bench/roofline.py,
     bandwidth measured here with a device copy): batch-1 TPOT for the llama-3.2-1b and qwen3-0.6b shapes,
     decode step times at batch 1, 32, 128, 256, and nano-vllm's workload (qwen3-0.6b, 256 requests,
     input and output lengths uniform in 100-1024) through the engine, `generate` in static batches and
     transformers' continuous batching (`generate_batch`). Targets are recorded as met or missed; only an
     error stops the run here.
  3. memory: the KV pool sized from free GPU memory, peak memory.
Time on an H200 (benchmarks/gpu_check_budget.py, stored in the JSON as `estimates`): the speed section's steps
have a roofline bound of ~19 s in all (of which 10.6 s for `generate` in static batches) and ~10,000 forward
passes; at an assumed 6 ms of per-step overhead (not measured) it takes ~77 s, plus model building (random
weights of 0.6B and 1B parameters) and the correctness section's small models: well inside the 420 s budget.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.bench import (decode_step_time, hf_model_for, random_requests, run_hf_continuous, run_hf_static,
                                  run_offline)
from minimal_engine.llm import DEFAULT_MODEL
from minimal_engine.bench.roofline import measure_machine, step_cost

PROMPTS = [[5, 17, 33, 100, 7, 9, 200, 45, 3, 80, 81, 82, 90], [11, 12], list(range(40, 90)), [300, 2, 250] * 7]
NEW_TOKENS = 24
BF16_TIE_ATOL = 0.1         # logits; bf16 keeps ~3 significant digits, so |logit| ~ 1-10 rounds by 0.004-0.03
BF16_TIE_RTOL = 0.01        # ... and for large logits, 1 % of the position's largest |logit|
NANO_VLLM_TOK_S = 1434      # nano-vllm's README: Qwen3-0.6B, 256 requests, RTX 4070 Laptop (8 GB)
ARCHS = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config"}
# (hidden, layers, heads, kv heads, head_dim): small random models for the correctness cases
SIZES = {"tiny": (64, 2, 4, 2, 16), "gpu": (512, 4, 8, 2, 64)}


class CheckFailed(Exception):
    pass


def random_hf_folder(root: Path, arch: str, size: str) -> str:
    """A random transformers model of `arch` saved as a Hugging Face folder, with the default tokenizer."""
    import transformers
    hidden, layers, heads, kv, dh = SIZES[size]
    cfg = getattr(transformers, ARCHS[arch])(
        hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv, head_dim=dh, vocab_size=8192, max_position_embeddings=2048, eos_token_id=0,
        bos_token_id=None, pad_token_id=0, initializer_range=0.1, tie_word_embeddings=arch == "qwen3")
    torch.manual_seed(0)
    folder = root / f"{arch}-{size}"
    transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(folder)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DEFAULT_MODEL / f, folder / f)
    return str(folder)


def free():
    """Return memory once the caller has dropped its references (the KV pools are large on a GPU)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@torch.inference_mode()
def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@torch.inference_mode()
def tie_gap(model, prompt: list[int], tokens: list[int]) -> float:
    """transformers scores the engine's tokens: the largest (best logit - logit of the engine's token), in units
    of the tie tolerance at that position (max(BF16_TIE_ATOL, BF16_TIE_RTOL x largest |logit|)); <= 1 is a tie."""
    ids = torch.tensor([prompt + tokens], device=model.device)
    logits = model(ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(tokens)].float()
    chosen = logits.gather(1, torch.tensor(tokens, device=model.device)[:, None])[:, 0]
    tol = (logits.abs().max(-1).values * BF16_TIE_RTOL).clamp(min=BF16_TIE_ATOL)
    return ((logits.max(-1).values - chosen) / tol).max().item()


def compare(case: dict, ours: list[list[int]], ref: list[list[int]], hf, prompts, dtype: str) -> dict:
    exact = sum(a == b for a, b in zip(ours, ref))
    gap = max(tie_gap(hf, p, o) for p, o in zip(prompts, ours)) if exact < len(ref) else 0.0
    ok = exact == len(ref) or (dtype == "bfloat16" and gap <= 1.0)
    return dict(case, ok=ok, exact_sequences=exact, sequences=len(ref), max_tie_gap=round(gap, 4))


def correctness_cases(folder: str, dtype: str, device: str, prompts=PROMPTS, name=None) -> list[dict]:
    import transformers
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).to(device).eval()
    ref = [hf_greedy(hf, p, NEW_TOKENS) for p in prompts]
    greedy = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    settings = {"alone": {}, "mixed_batch": {}, "chunked_prefill": dict(max_num_batched_tokens=7),
                "preemption": dict(block_size=4, num_kv_blocks=20), "no_cuda_graphs": {},
                "gather_attention": dict(attention_backend="gathered")}
    results = []
    for case, kw in settings.items():
        llm = LLM(folder, dtype=dtype, device=device, **{"num_kv_blocks": 256, **kw})
        runner = llm.engine.runner
        if case in ("no_cuda_graphs", "gather_attention"):
            runner.set_cuda_graphs(False)
        if case == "alone":
            outs = [llm.generate([p], greedy, use_tqdm=False)[0] for p in prompts]
        else:
            outs = llm.generate(prompts, greedy, use_tqdm=False)
        info = {"model": name or Path(folder).name, "dtype": dtype, "case": case,
                "cuda_graphs": runner.graphs is not None, "attention_backend": runner.attention_backend}
        r = compare(info, [o.token_ids for o in outs], ref, hf, prompts, dtype)
        if case == "preemption":
            r["preemptions"] = sum(o.metrics.num_preemptions for o in outs)
            r["ok"] = r["ok"] and r["preemptions"] > 0
        results.append(r)
        llm = None
        free()
    return results


def check_correctness(device: str, tiny: bool, workdir: Path, log) -> dict:
    cases = []
    for arch in ARCHS:
        folder = random_hf_folder(workdir, arch, "tiny" if tiny else "gpu")
        for dtype in ("float32", "bfloat16"):
            cases += correctness_cases(folder, dtype, device)
            log(f"correctness {arch} {dtype}: {sum(c['ok'] for c in cases)}/{len(cases)} cases ok so far")
    from minimal_engine.model.tokenizer import Tokenizer
    tok = Tokenizer(DEFAULT_MODEL)
    texts = ["吾輩は猫である。", "東京の空は", "推論とは何か。答えは"]
    cases += correctness_cases(str(DEFAULT_MODEL), "float32", device, [tok.encode(t) for t in texts], "default_model")
    return {"ok": all(c["ok"] for c in cases), "cases": cases, "bf16_tie_atol": BF16_TIE_ATOL,
            "bf16_tie_rtol": BF16_TIE_RTOL}


def speed_models(tiny: bool, workdir: Path) -> dict:
    if tiny:   # the tiny random folders stand in for the two shapes
        return {"llama-3.2-1b": str(workdir / "llama-tiny"), "qwen3-0.6b": str(workdir / "qwen3-tiny")}
    return {"llama-3.2-1b": "synthetic:llama-3.2-1b", "qwen3-0.6b": "synthetic:qwen3-0.6b"}


def check_speed(device: str, tiny: bool, workdir: Path, machine: dict, deadline: float, log) -> dict:
    res = {"ok": True, "batch1": [], "decode_steps": [], "nano_vllm": None, "skipped": []}
    dev = torch.device(device)
    batches = (1, 4) if tiny else (1, 32, 128, 256)
    kv_mem = (1 << 28) if tiny else int(torch.cuda.mem_get_info(dev)[0] * 0.25)
    dtype = "float32" if tiny else "bfloat16"    # on the CPU, bf16's oneDNN kernels compile per shape: slow to start
    for shape, model in speed_models(tiny, workdir).items():
        llm = LLM(model, dtype=dtype, device=device, max_num_seqs=8 if tiny else 256, max_model_len=2048,
                  kv_cache_memory=kv_mem)
        hf = hf_model_for(llm)
        cfg, nbytes = llm.model_config, llm.dtype.itemsize
        reqs = random_requests(3, 32 if tiny else 128, 16 if tiny else 128, cfg.vocab_size, seed=0)
        ours = run_offline(llm, reqs, 1, use_tqdm=False)
        theirs = run_hf_static(hf, reqs, 1, use_tqdm=False)
        bound = step_cost(cfg, nbytes, [reqs[0].input_len + reqs[0].output_len // 2], machine=machine)["t_memory"]
        row = {"shape": shape, "engine_tpot_ms": ours["median_tpot_ms"], "hf_tpot_ms": theirs["median_tpot_ms"],
               "bound_ms": bound * 1000, "bandwidth_GBps": machine["bandwidth"] / 1e9}
        row["tpot_over_bound"] = row["engine_tpot_ms"] / row["bound_ms"]
        row["engine_over_hf"] = row["engine_tpot_ms"] / row["hf_tpot_ms"]
        res["batch1"].append(row)
        log(f"batch 1 {shape}: engine {row['engine_tpot_ms']:.2f} ms, transformers {row['hf_tpot_ms']:.2f} ms, "
            f"bound {row['bound_ms']:.2f} ms")
        for b in batches:
            for graphs in (True, False) if b <= 32 else (True,):
                llm.engine.runner.set_cuda_graphs(graphs if dev.type == "cuda" else False)
                d = decode_step_time(llm, b, 16 if tiny else 128)
                cost = step_cost(cfg, nbytes, [d["mean_context"]] * b, machine=machine)
                d.update(shape=shape, cuda_graphs=llm.engine.runner.graphs is not None,
                         bound_ms=cost["t_bound"] * 1000, bound_memory_ms=cost["t_memory"] * 1000,
                         bound_compute_ms=cost["t_compute"] * 1000)
                d["step_over_bound"] = d["median_step_ms"] / d["bound_ms"]
                res["decode_steps"].append(d)
        llm.engine.runner.set_cuda_graphs(None)
        if shape == "qwen3-0.6b":
            res["nano_vllm"] = nano_vllm_workload(llm, hf, tiny, deadline, res["skipped"], log)
        llm = hf = None
        free()
    return res


def nano_vllm_workload(llm, hf, tiny: bool, deadline: float, skipped: list, log) -> dict:
    n, top, low, static_batch = (8, 32, 8, 4) if tiny else (256, 1024, 100, 64)
    reqs = random_requests(n, top, top, llm.model_config.vocab_size, low / top, low / top, seed=0)
    out = {"requests": n, "lengths": f"uniform {low}-{top}", "static_batch": static_batch,
           "input_tokens": sum(r.input_len for r in reqs), "output_tokens": sum(r.output_len for r in reqs)}
    runs = {"engine": lambda: run_offline(llm, reqs, n, use_tqdm=False),
            "hf_generate_static": lambda: run_hf_static(hf, reqs, static_batch, use_tqdm=False),
            "hf_generate_batch": lambda: run_hf_continuous(hf, reqs, n, use_tqdm=False,
                                                           timeout_s=max(30.0, deadline - time.time()))}
    need_s = {"engine": 0, "hf_generate_static": 0 if tiny else 150, "hf_generate_batch": 0 if tiny else 30}
    for name, fn in runs.items():
        if time.time() > deadline - need_s[name]:
            skipped.append(f"nano_vllm {name}: not enough of the --budget-s time left")
            continue
        free()
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        try:
            r = fn()
        except Exception as e:   # a baseline that fails is reported, not hidden; the engine failing stops
            if name == "engine":
                raise
            out[name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        out[name] = {"output_tok_s": r["output_throughput"], "wall_s": r["duration"],
                     "median_tpot_ms": r["median_tpot_ms"], "median_ttft_ms": r["median_ttft_ms"]}
        if torch.cuda.is_available():
            out[name]["peak_memory_GB"] = torch.cuda.max_memory_allocated() / 1e9
        log(f"nano-vllm workload {name}: {r['output_throughput']:.0f} output tok/s")
    eng = out["engine"]["output_tok_s"]
    for name in ("hf_generate_static", "hf_generate_batch"):
        if "output_tok_s" in out.get(name, {}):
            out[f"engine_over_{name}"] = eng / out[name]["output_tok_s"]
    return out


def check_memory(device: str, tiny: bool) -> dict:
    """The KV pool sized from free memory (LLM's default), one generate, peak memory."""
    from minimal_engine.llm_setup import CPU_KV_BUDGET, GPU_KV_FRACTION
    cuda = torch.device(device).type == "cuda"
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.mem_get_info()[0] if cuda else None
    model = str(DEFAULT_MODEL) if tiny else "synthetic:qwen3-0.6b"
    llm = LLM(model, dtype="bfloat16", device=device, max_num_seqs=8 if tiny else 256)
    weights = sum(p.numel() * p.element_size() for p in llm.model.parameters())
    budget = (before - weights) * GPU_KV_FRACTION if cuda else CPU_KV_BUDGET
    pool = llm.engine.runner.kv_cache_bytes
    llm.generate([list(range(1, 200))] * 8, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True),
                 use_tqdm=False)
    res = {"model": llm.model_name, "num_blocks": llm.engine.block_manager.num_blocks, "kv_pool_GB": pool / 1e9,
           "budget_GB": budget / 1e9, "weights_GB": weights / 1e9,
           "pool_over_budget": pool / budget, "free_before_GB": before / 1e9 if cuda else None}
    if cuda:
        res["peak_allocated_GB"] = torch.cuda.max_memory_allocated() / 1e9
        res["total_GB"] = torch.cuda.get_device_properties(0).total_memory / 1e9
    else:
        import resource
        res["peak_rss_GB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    # the pool never exceeds its budget (plus the one scratch block) and fills most of it (or all requests)
    wanted = llm.config.max_num_seqs * -(-llm.config.max_model_len // llm.config.block_size)
    per_block = pool / (res["num_blocks"] + 1)
    res["ok"] = pool <= budget + 2 * per_block and (res["num_blocks"] == wanted or pool >= 0.9 * budget)
    llm = None
    free()
    return res


def targets(speed: dict) -> list[dict]:
    """The issue's targets on the H200, each marked met or missed."""
    out = []
    for row in speed.get("batch1", []):
        if row["shape"] == "llama-3.2-1b":
            out.append({"target": "batch-1 TPOT <= 1.5x the bandwidth bound (llama-3.2-1b)",
                        "value": row["tpot_over_bound"], "met": row["tpot_over_bound"] <= 1.5})
    nano = speed.get("nano_vllm") or {}
    for name, need in (("hf_generate_static", 3.0), ("hf_generate_batch", 1.5)):
        key = f"engine_over_{name}"
        if key in nano:
            out.append({"target": f"nano-vllm workload output tok/s >= {need}x {name}", "value": nano[key],
                        "met": nano[key] >= need})
    return out


def versions() -> dict:
    import transformers
    v = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
         "cuda": torch.version.cuda, "platform": platform.platform()}
    try:
        import triton
        v["triton"] = triton.__version__
    except ImportError:
        v["triton"] = None
    if torch.cuda.is_available():
        v["gpu"] = torch.cuda.get_device_name(0)
    return v


def fmt(x, digits=2):
    return "-" if x is None else (f"{x:,.{digits}f}" if isinstance(x, float) else str(x))


def markdown(report: dict) -> str:
    v = report["versions"]
    lines = [f"# GPU check ({report['mode']})", "",
             f"{v.get('gpu') or report['device']}; torch {v['torch']} (CUDA {v['cuda']}), transformers "
             f"{v['transformers']}, Triton {v['triton']}; {report['wall_s']:.0f} s. "
             f"Result: **{'OK' if report['ok'] else 'FAILED at ' + str(report['stopped_at'])}**", ""]
    if report.get("error"):
        lines += ["```", report["error"], "```", ""]
    corr = report.get("correctness")
    if corr:
        bad = [c for c in corr["cases"] if not c["ok"]]
        lines += ["## 1. Correctness (greedy tokens vs transformers)", "",
                  f"{len(corr['cases']) - len(bad)}/{len(corr['cases'])} cases OK "
                  f"(bf16: where a sequence differs, every token the engine chose must be within "
                  f"max({corr['bf16_tie_atol']}, {corr.get('bf16_tie_rtol')} x largest |logit|) of transformers' best "
                  f"logit; the gap column is in units of that tolerance).", "",
                  "| model | dtype | case | exact sequences | max gap / tolerance | ok |", "|---|---|---|---|---|---|"]
        lines += [f"| {c['model']} | {c['dtype']} | {c['case']} | {c['exact_sequences']}/{c['sequences']} | "
                  f"{c['max_tie_gap']} | {'yes' if c['ok'] else '**NO**'} |" for c in corr["cases"]]
        lines.append("")
    sp = report.get("speed")
    if sp:
        m = report["machine"]
        lines += ["## 2. Speed", "", f"Measured here: copy bandwidth {m['bw_copy'] / 1e9:,.0f} GB/s, bf16 matmul "
                  f"{m['flops_bf16'] / 1e12:,.3g} TFLOP/s (bound uses {m['bandwidth'] / 1e9:,.0f} GB/s).", "",
                  "| shape | engine TPOT ms | transformers TPOT ms | bound ms | TPOT / bound | engine / transformers |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['shape']} | {fmt(r['engine_tpot_ms'])} | {fmt(r['hf_tpot_ms'])} | {fmt(r['bound_ms'])} | "
                  f"{fmt(r['tpot_over_bound'])} | {fmt(r['engine_over_hf'])} |" for r in sp["batch1"]]
        lines += ["", "| shape | batch | CUDA graphs | step ms | bound ms (memory / compute) | step / bound |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {d['shape']} | {d['batch_size']} | {d['cuda_graphs']} | {fmt(d['median_step_ms'])} | "
                  f"{fmt(d['bound_ms'])} ({fmt(d['bound_memory_ms'])} / {fmt(d['bound_compute_ms'])}) | "
                  f"{fmt(d['step_over_bound'])} |" for d in sp["decode_steps"]]
        nano = sp.get("nano_vllm")
        if nano:
            lines += ["", f"nano-vllm's workload: {nano['requests']} requests, lengths {nano['lengths']} "
                      f"({nano['input_tokens']:,} input, {nano['output_tokens']:,} output tokens); "
                      f"nano-vllm reports {NANO_VLLM_TOK_S:,} tok/s on an RTX 4070 Laptop GPU.", "",
                      "| backend | output tok/s | wall s | engine / this |", "|---|---|---|---|"]
            for name in ("engine", "hf_generate_static", "hf_generate_batch"):
                r = nano.get(name) or {"error": "not run"}
                if "error" in r:
                    lines.append(f"| {name} | error: {r['error'][:120]} | | |")
                else:
                    lines.append(f"| {name} | {fmt(r['output_tok_s'], 0)} | {fmt(r['wall_s'], 1)} | "
                                 f"{fmt(nano.get('engine_over_' + name))} |")
        lines += ["", "| target | value | met |", "|---|---|---|"]
        lines += [f"| {t['target']} | {fmt(t['value'])} | {'yes' if t['met'] else 'no'} |" for t in report["targets"]]
        lines += [f"- skipped: {s}" for s in sp["skipped"]]
        lines.append("")
    mem = report.get("memory")
    if mem:
        lines += ["## 3. Memory", "", f"{mem['model']}: KV pool {mem['kv_pool_GB']:.2f} GB in {mem['num_blocks']:,} "
                  f"blocks, budget {mem['budget_GB']:.2f} GB (pool / budget {mem['pool_over_budget']:.2f}); "
                  f"peak {fmt(mem.get('peak_allocated_GB', mem.get('peak_rss_GB')))} GB. "
                  f"{'OK' if mem['ok'] else '**NOT OK**'}", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "results/gpu_check", help="folder for the JSON and .md")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU (CI): the same code path")
    ap.add_argument("--budget-s", type=float, default=420, help="skip the remaining baselines after this")
    args = ap.parse_args(argv)
    start = time.time()
    deadline = start + args.budget_s
    if args.tiny:
        device = "cpu"
        torch.set_num_threads(1)     # CI machines are small and shared: more threads than free cores thrash
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        print("no CUDA GPU here: run with --tiny for the CPU version of this check", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(f"[{time.time() - start:6.1f} s] {msg}", flush=True)

    report = {"mode": "tiny" if args.tiny else "gpu", "device": device, "versions": versions(), "ok": False,
              "stopped_at": None, "argv": sys.argv[1:] if argv is None else list(argv)}
    try:                                  # the H200 estimate, next to the measured wall time
        from gpu_check_budget import section_estimates
        report["estimates"] = section_estimates("H200")
    except Exception as e:                # noqa: BLE001 - an estimate must never stop the check
        report["estimates"] = {"error": f"{type(e).__name__}: {e}"}
    section = "correctness"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            report["correctness"] = check_correctness(device, args.tiny, Path(tmp), log)
            if not report["correctness"]["ok"]:
                raise CheckFailed("greedy tokens differ from transformers' (see the cases)")
            section = "speed"
            report["machine"] = measure_machine(device, quick=args.tiny)
            report["speed"] = check_speed(device, args.tiny, Path(tmp), report["machine"], deadline, log)
            report["targets"] = targets(report["speed"])
            section = "memory"
            report["memory"] = check_memory(device, args.tiny)
            if not report["memory"]["ok"]:
                raise CheckFailed("the KV pool was not sized from free memory as expected")
        report["ok"] = True
    except Exception as e:
        report["stopped_at"] = section
        report["error"] = "".join(traceback.format_exception_only(type(e), e)).strip()
        if not isinstance(e, CheckFailed):
            report["traceback"] = traceback.format_exc()
            traceback.print_exc()
    report["wall_s"] = time.time() - start
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2, ensure_ascii=False, default=str))
    (out / "gpu_check.md").write_text(markdown(report), encoding="utf-8")
    log(f"{'OK' if report['ok'] else 'FAILED at ' + section}: wrote {out / 'gpu_check.json'} and gpu_check.md")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
