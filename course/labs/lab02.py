"""Lab 2 (第2章ラボ): 自分のマシンのルーフラインに、エンジンの実際のステップを点として置く。

Three layers, as in lab 1 (tests call the first two; notebooks stay thin):

1. Experiments, plain functions that return data::

       m = machine_peaks(threads=2)                       # this machine: GFLOP/s (fp32, bf16) and GB/s
       rows = threads_sweep([1, 2])                       # the same peaks at each thread count (two passes)
       res = run_roofline("default", context=64, batches=[1, 8, 32], chunks=[16, 128, 512], repeats=3)
       res["points"][0]  # kind, size, flops, bytes (weights, KV read, KV written), intensity,
                         # measured_ms (median) / _min / _max, predicted_ms, bound, achieved GFLOP/s and GB/s
       res["excess"]      # batch 1 with / without its Linear layers and those alone, alternately; load (labkit/excess)
       predict_on_gpu(res, "H100")                        # the same steps, predicted on a datasheet GPU

   Decode points: ``batch`` requests with ``context`` prompt tokens each, timed by the bench's
   ``decode_step_time`` (median of several engine steps). Prefill points: ``N`` prompt tokens in one
   request or a few (``prefill_lens``); the one engine step that prefills them is timed, and for the longest the
   model-shaped Linear kernel is timed between its repeats (``kernel_flops``). Each point's FLOPs and bytes come from
   ``minimal_engine.bench.roofline.step_cost`` (the bench's formula), its prediction is the larger of
   FLOPs / peak and bytes / bandwidth of the measured machine.
2. Plots, in ``course.labs.lab02_plots``: ``plot_roofline(res)``, ``plot_gpu_rooflines(...)``,
   ``plot_threads(rows)`` (Japanese labels).
3. The panel: ``course.panels.build(2)`` (``course.panels.lab02.Lab2App``).

The tasks' predictions (予想), decided from a run's numbers: ``course.labs.lab02_explain``.
The machine's peaks: ``machine_peaks`` (``bench.roofline.measure_machine``), each the largest of its
measurements; ``run_roofline`` raises the FLOP/s peak to the engine's own Linear kernel on the model's layer
shapes where that is faster (``course.labkit.peaks``), so no step beats its roof by using a faster kernel
than the one timed. ``COURSE_QUICK=1`` shrinks the lists and the repeats.
"""
from __future__ import annotations

import os
import statistics
import time

from minimal_engine.bench import roofline
from minimal_engine.bench.offline import decode_step_time
from minimal_engine.sampling_params import SamplingParams

from course.labkit import excess, thread_scaling
from course.labkit.load import LoadWatch
from course.labkit.machine import format_machine_ja, machine_peaks
from course.labkit.peaks import layer_shapes, model_linear_rate, model_peaks, peak_text, with_model_peak
from course.runtime import (MAX_NUM_SEQS, MODEL_CHOICES, apply_thread_policy, available_devices, check_device,
                            check_int, check_model, get_llm, is_quick, max_model_len, random_prompts)

GPU_CHOICES = ("A100", "H100", "H200", "B200", "MI300X", "MI355X")
CONTEXT_RANGE = (1, 1024)                  # prompt tokens of each decoding request
CHUNK_RANGE = (1, 1024)                    # prompt tokens of one prefill step
DEFAULT_CONTEXT = 64
DECODE_STEPS = 8                           # engine steps per decode measurement (their median)


def default_batches() -> list[int]:
    return [1, 8, 32] if is_quick() else [1, 2, 4, 8, 16, 32, 64]


def default_chunks() -> list[int]:
    return [16, 128, 512] if is_quick() else [16, 32, 64, 128, 256, 512, 1024]


def default_repeats() -> int:
    return 1 if is_quick() else 3


def thread_choices() -> list[int]:
    """1, 2, 4, ... up to the cores this process may use (and that number itself)."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    out, t = [], 1
    while t < n:
        out.append(t)
        t *= 2
    return out + [n]


# ---------------------------------------------------------------- the machine
def threads_sweep(threads_list=None, device: str = "cpu", quick: bool | None = None,
                  load_check: bool = True) -> list[dict]:
    """The peaks at each thread count (default ``thread_choices()``), the policy restored: one untimed warm-up,
    then a forward and a backward pass (``labkit.thread_scaling.best_of_passes``); each row has the ``load``."""
    counts = threads_list or thread_choices()
    watch = LoadWatch(max(counts)) if load_check else None
    machine_peaks(counts[0], device, quick)
    passes = [{t: machine_peaks(t, device, quick) for t in order} for order in (counts, counts[::-1])]
    rows = [thread_scaling.best_of_passes(passes[0][t], passes[1][t]) for t in counts]
    apply_thread_policy()
    load = watch.finish() if watch else None
    return [{**r, "load": load} for r in rows]


# ---------------------------------------------------------------- engine steps
def prefill_lens(n: int, max_prompt: int) -> list[int]:
    """Prompt lengths of a prefill step of ``n`` tokens: one request, or as few requests of nearly equal length
    (differing by at most one token) as fit ``max_prompt`` (1024 tokens with max_prompt 510, as run_roofline passes
    for a 512-position model: three requests of 342, 341 and 341)."""
    k = -(-n // max_prompt)
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def prefill_step_ms(llm, lens: list[int], seed: int = 0, warmup: bool = True) -> float:
    """Wall time (ms) of the one engine step that prefills requests of ``lens`` random prompt tokens
    (each then samples its first token). ``warmup``: the same step once before, untimed (first calls of a
    new shape are slow)."""
    engine = llm.engine
    if engine.has_unfinished_requests():
        raise RuntimeError("the engine still has requests: a measurement needs an idle engine")
    if sum(lens) > llm.config.max_num_batched_tokens:
        raise ValueError(f"a prefill step holds at most {llm.config.max_num_batched_tokens} tokens")
    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    for timed in ([False, True] if warmup else [True]):
        ids = [engine.add_request(p, params) for p in
               (random_prompts(llm, n, 1, seed * 1000 + i + 500 * timed)[0] for i, n in enumerate(lens))]
        try:
            t = time.perf_counter()
            engine.step()
            elapsed = (time.perf_counter() - t) * 1000
        finally:
            for rid in ids:
                engine.abort_request(rid)
    return elapsed


def _spread(values: list[float]) -> dict:
    return {"measured_ms": statistics.median(values), "measured_ms_min": min(values),
            "measured_ms_max": max(values)}


def _point(kind: str, size: int, context: int, cost: dict, times: list[float]) -> dict:
    p = {"kind": kind, "size": size, "context": context, **_spread(times),
         **{k: cost[k] for k in ("tokens", "flops", "weight_bytes", "kv_read_bytes", "kv_write_bytes", "bytes",
                                 "intensity", "bound")},
         "predicted_ms": cost["t_bound"] * 1000, "t_compute_ms": cost["t_compute"] * 1000,
         "t_memory_ms": cost["t_memory"] * 1000}
    s = p["measured_ms"] / 1000
    p.update(achieved_flops=cost["flops"] / s, achieved_bandwidth=cost["bytes"] / s,
             measured_over_predicted=p["measured_ms"] / p["predicted_ms"])
    return p


def check_sizes(values, lo: int, hi: int, what: str) -> list[int]:
    """A list of ints (or a text "1, 2, 4") within [lo, hi], sorted and distinct."""
    from course.labkit.measure import parse_sweep_list
    try:
        return parse_sweep_list(values, lo, hi)
    except ValueError as e:
        raise ValueError(f"{what}の一覧（{lo}〜{hi}）: {e}") from None


def run_roofline(model="default", device: str = "cpu", context: int = DEFAULT_CONTEXT, batches=None, chunks=None,
                 repeats: int | None = None, threads: int | None = None, seed: int = 0, progress=None,
                 machine: dict | None = None, load_check: bool = True) -> dict:
    """Measure the machine (unless ``machine`` is given), then every decode batch and prefill chunk.

    Returns the settings, ``machine``, ``flops_key`` (the peak of the model's dtype), ``dtype_bytes``,
    ``points`` (one dict per step, see the module docstring), ``skipped`` (sizes the model cannot hold),
    ``load`` (``LoadWatch``) and ``warnings`` (Japanese). ``progress(done, total)`` after each point.
    """
    model, device = check_model(model), check_device(device)
    limit = max_model_len(model)
    context = check_int(context, "context", "プロンプト長", CONTEXT_RANGE[0], min(CONTEXT_RANGE[1], limit - DECODE_STEPS - 20))
    batches = check_sizes(default_batches() if batches is None else batches, 1, MAX_NUM_SEQS, "Decode のバッチ")
    chunks = check_sizes(default_chunks() if chunks is None else chunks, *CHUNK_RANGE, "Prefill のトークン数")
    repeats = check_int(default_repeats() if repeats is None else repeats, "repeats", "繰り返し", 1, 20)
    threads = apply_thread_policy(threads)
    watch = LoadWatch(threads) if load_check else None     # the load before and over the whole run
    llm = get_llm(model, device)
    cfg, nbytes = llm.model_config, llm.dtype.itemsize
    machine = machine or with_model_peak(machine_peaks(threads, device), cfg, llm.dtype)
    key = "flops_bf16" if nbytes == 2 else "flops_fp32"
    pool = llm.engine.block_manager.num_blocks * llm.config.block_size
    skipped = [("decode", b) for b in batches if b * (context + DECODE_STEPS + 20) > pool]
    max_prompt = limit - 2                 # a prompt and its first token fit the model's positions
    skipped += [("prefill", n) for n in chunks if n > llm.config.max_num_batched_tokens]
    todo = [("decode", b) for b in batches if ("decode", b) not in skipped]
    todo += [("prefill", n) for n in chunks if ("prefill", n) not in skipped]
    points = []
    for i, (kind, size) in enumerate(todo):
        if kind == "decode":
            runs = [decode_step_time(llm, size, context, DECODE_STEPS, seed=seed + r) for r in range(repeats)]
            ctx = runs[0]["mean_context"]
            cost = roofline.step_cost(cfg, nbytes, decode_contexts=[round(ctx)] * size, machine=machine, flops_key=key)
            points.append(_point(kind, size, round(ctx), cost, [r["median_step_ms"] for r in runs]))
        else:
            lens, times, kernel = prefill_lens(size, max_prompt), [], []
            for r in range(repeats):       # the longest: the model-shaped kernel timed between its repeats
                times.append(prefill_step_ms(llm, lens, seed + r))
                if size == max(n for k, n in todo if k == "prefill"):
                    kernel.append(model_linear_rate(cfg, llm.dtype, device))
            cost = roofline.step_cost(cfg, nbytes, prefill_lens=lens, machine=machine, flops_key=key)
            points.append({**_point(kind, size, max(lens), cost, times), "requests": len(lens),
                           **({"kernel_flops": max(kernel)} if kernel else {})})
        if progress:
            progress(i + 1, len(todo))
    # batch 1's step without its Linear layers, the Linear layers alone, the load: where the excess goes (labkit/excess.py)
    fixed = excess.measure(llm, context, DECODE_STEPS, repeats, seed) if ("decode", 1) in todo else None
    load = watch.finish() if watch else None               # disturbed: its verdicts print 判定できません
    warnings = [load["warning"]] if load and load["warning"] else []
    if skipped:
        warnings.append("このモデルでは測れない大きさを飛ばしました（文脈長の上限か KV プールの容量を超えます）: "
                        + ", ".join(f"{'Decode バッチ' if k == 'decode' else 'Prefill'} {s}" for k, s in skipped))
    return {"model": model, "device": device, "context": context, "repeats": repeats, "threads": threads,
            "dtype": str(llm.dtype).replace("torch.", ""), "dtype_bytes": nbytes, "flops_key": key,
            "machine": machine, "points": points, "skipped": skipped, "warnings": warnings,
            "model_config": cfg, "excess": fixed, "load": load}


def predict_on_gpu(res: dict, gpu: str, dtype_bytes: int = 2) -> list[dict]:
    """The same steps (model shape, batches, chunks, contexts) on a datasheet GPU, in BF16: predicted only."""
    m = roofline.gpu_machine(gpu)
    out = []
    for p in res["points"]:
        kw = ({"decode_contexts": [p["context"]] * p["size"]} if p["kind"] == "decode"
              else {"prefill_lens": prefill_lens(p["size"], p["context"])})
        c = roofline.step_cost(res["model_config"], dtype_bytes, machine=m, flops_key="flops_bf16", **kw)
        out.append({"kind": p["kind"], "size": p["size"], "gpu": gpu, "flops": c["flops"], "bytes": c["bytes"],
                    "intensity": c["intensity"], "predicted_ms": c["t_bound"] * 1000, "bound": c["bound"]})
    return out


def point_at(res: dict, kind: str, size: int) -> dict | None:
    return next((p for p in res["points"] if p["kind"] == kind and p["size"] == size), None)


# ---------------------------------------------------------------- readouts
def points_table(res: dict, gpu: str | None = None) -> list[dict]:
    """One row per point (for a DataFrame or the readout): measured and predicted times, what bounds it."""
    pred = {(q["kind"], q["size"]): q for q in predict_on_gpu(res, gpu)} if gpu else {}
    rows = []
    for p in res["points"]:
        row = {"種類": "Decode" if p["kind"] == "decode" else "Prefill",
               "大きさ": f"バッチ {p['size']}" if p["kind"] == "decode" else
               f"{p['size']} トークン" + (f"（{p['requests']} リクエスト）" if p.get("requests", 1) > 1 else ""),
               "演算強度 [FLOP/B]": round(p["intensity"], 2), "MFLOP": round(p["flops"] / 1e6, 1),
               "MB（重み・KV読・KV書）": f"{p['bytes'] / 1e6:.1f}（{p['weight_bytes'] / 1e6:.1f}・"
                                      f"{p['kv_read_bytes'] / 1e6:.2f}・{p['kv_write_bytes'] / 1e6:.2f}）",
               "予測 [ms]": round(p["predicted_ms"], 3), "実測 [ms]": round(p["measured_ms"], 3),
               "実測/予測": round(p["measured_over_predicted"], 1),
               "律速（予測）": "帯域" if p["bound"] == "memory" else "演算"}
        if gpu:
            row[f"{gpu} 予測 [ms]"] = round(pred[(p["kind"], p["size"])]["predicted_ms"], 4)
        rows.append(row)
    return rows


def readout_html(res: dict, gpu: str | None = None) -> str:
    from course.labkit.tables import table_html
    rows = points_table(res, gpu)
    head = tuple(rows[0]) if rows else ()
    spread = "中央値" if res["repeats"] == 1 else f"繰り返し {res['repeats']} 回の中央値"
    note = (f"<div>このマシン: {format_machine_ja(res['machine'])}。モデル {res['model']}（{res['dtype']}）、"
            f"Decode の文脈 {res['context']} トークン。実測は{spread}。</div>")
    return note + table_html([tuple(r.values()) for r in rows], head, right=set(range(2, len(head))))


HISTORY_FIELDS = ("run", "time", "model", "device", "dtype", "threads", "context", "repeats", "gflops", "gb_s",
                  "kind", "size", "intensity", "predicted_ms", "measured_ms", "measured_ms_min", "measured_ms_max")


def history_rows(res: dict, run: int) -> list[dict]:
    """One history row per point of a run (the CSV's rows)."""
    m, stamp = res["machine"], time.strftime("%Y-%m-%d %H:%M:%S")
    return [{"run": run, "time": stamp, "model": res["model"], "device": res["device"], "dtype": res["dtype"],
             "threads": res["threads"], "context": res["context"], "repeats": res["repeats"],
             "gflops": m[res["flops_key"]] / 1e9, "gb_s": m["bandwidth"] / 1e9,
             **{k: p[k] for k in ("kind", "size", "intensity", "predicted_ms", "measured_ms", "measured_ms_min",
                                  "measured_ms_max")}} for p in res["points"]]


def history_html(history: list[dict], last: int = 12) -> str:
    """One line per run: settings, the machine, and the first decode and prefill points."""
    from course.labkit.tables import history_table
    runs = {}
    for r in history:
        runs.setdefault(r["run"], []).append(r)
    body = []
    for run, rows in list(runs.items())[-last:]:
        d = [r for r in rows if r["kind"] == "decode"]
        f = [r for r in rows if r["kind"] == "prefill"]
        fmt = lambda r: f"{r['measured_ms']:.2f} / {r['predicted_ms']:.2f}" if r else "-"   # noqa: E731
        body.append((run, rows[0]["model"], rows[0]["threads"], rows[0]["context"], f"{rows[0]['gflops']:.0f}",
                     f"{rows[0]['gb_s']:.1f}", fmt(d[0] if d else None), fmt(d[-1] if d else None),
                     fmt(f[-1] if f else None)))
    head = ("#", "モデル", "スレッド", "プロンプト長", "GFLOP/s", "GB/s", "最小バッチ 実測/予測 [ms]",
            "最大バッチ 実測/予測 [ms]", "最長 Prefill 実測/予測 [ms]")
    return history_table(body, head, set(range(2, len(head))))


def save_history_csv(history: list[dict], path) -> str:
    from pathlib import Path

    from course.labkit.history import to_csv
    Path(path).write_text(to_csv(history, fields=HISTORY_FIELDS), encoding="utf-8")
    return str(path)


__all__ = ["CONTEXT_RANGE", "GPU_CHOICES", "MODEL_CHOICES", "available_devices", "default_batches",
           "default_chunks", "default_repeats", "format_machine_ja", "history_html", "history_rows", "layer_shapes",
           "machine_peaks", "model_peaks", "peak_text", "point_at", "with_model_peak", "points_table", "predict_on_gpu",
           "prefill_lens", "prefill_step_ms", "readout_html", "run_roofline", "save_history_csv", "thread_choices", "threads_sweep"]
