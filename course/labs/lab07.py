"""Lab 7 (第7章ラボ): テンソル並列（TP）を自分のマシンで動かし、データセンターでの TP/DP を予測する。

Plain functions (tests call them; the notebook stays thin)::

    res = run_tp_lab(prompt_len=64, batch_size=1, tp=2)      # measured on this machine
    res["runs"][2]["decode_ms"], res["runs"][2]["decode_comm_share"], res["same_tokens"]  # TP=2 == TP=1 tokens
    allreduce_bytes_per_token("llama-3.3-70b")              # 2 x hidden x 2 B per layer (bf16)
    tp_dp_table("llama-3.3-70b", "H100", ...)               # predicted (予測) by minimal_engine.calculators.simulator
Measured part: the default model in float32, TP=1 against TP=N (gloo workers, features/tensor_parallel/model.py):
medians over ``repeats`` of a prefill step and a decode step, TP=N's communication (all-reduce calls plus sending the
step), and every rank's record of each all-reduce (``res["calls"]``, course.labkit.tp_calls). Threads: TP=N's processes get
max(1, threads // N) each (the engine's rule); TP=1 gets N x that up to the usable cores, and is also timed with one
rank's threads (``tp1_own_*``); ``res["threads_per_config"]`` records them, and the load check counts them all.
``res["load"]``: LoadWatch over the timed steps; ``verdicts(preds, res["load"])`` reads 判定できません when disturbed.
"""
from __future__ import annotations

import statistics
import time

import torch

from course.labkit.history import to_csv
from course.labkit.load import LoadWatch, usable_cpus
from course.labkit.measure import check_repeats
from course.labkit.tables import history_table, table_html, warnings_html
from course.labkit.tp_calls import best_speedup, call_stats, configs, lm_head_share, pair_calls, rank0_share
from course.runtime import apply_thread_policy, cached_llm, check_device, check_int, clear_llm_cache, is_quick
from minimal_engine import LLM, SamplingParams
from minimal_engine.bench.offline import decode_step_time
from minimal_engine.bench.workload import random_requests
from minimal_engine.calculators import tp_allreduce_bytes

PROMPT_LEN_RANGE = (8, 384)
BATCH_RANGE = (1, 16)
TP_RANGE = (2, 4)
CHECK_PROMPTS = ["吾輩は猫である。", "山路を登りながら、こう考えた。", "今日は"]
# Links between GPUs, GB/s in one direction per GPU (what a ring all-reduce's bytes cross)
LINKS = {
    "NVLink 4（H100 SXM）": (450, "docs/published_points.md §G（InferenceX-app gpu-specs.ts: scale-up 450 GB/s）"),
    "NVLink 5（B200）": (900, "docs/published_points.md §G（InferenceX-app gpu-specs.ts: scale-up 900 GB/s）"),
    "PCIe 5.0 x16": (64, "公称値（PCI-SIG の PCIe 5.0 仕様）: 32 GT/s × 16 レーン ≈ 64 GB/s（片方向）"),
    "InfiniBand NDR（400 Gb/s）": (50, "公称値（NVIDIA ConnectX-7）: 400 Gb/s = 50 GB/s（片方向、NIC 1枚）"),
}


def defaults() -> dict:
    return dict(prompt_len=64, batch_size=1, tp=2)


def default_repeats() -> int:   # the first rep is warm too: run_tp_lab runs each shape once untimed
    return 1 if is_quick() else 3


def _engine(tp: int, device: str, threads: int = 0) -> LLM:
    def make():
        llm = LLM(None, dtype="float32", device=device, tensor_parallel_size=tp, max_num_seqs=BATCH_RANGE[1])
        llm.generate(["今日は"], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)   # warm-up
        return llm
    # course.runtime's one engine cache: its workers stay up until the engine is dropped from it or close_all()
    return cached_llm(("lab7", tp, device, threads), make)   # TP=N's per-rank threads are fixed at construction


def close_all() -> None:   # every worker process this lab started (also done at interpreter exit)
    clear_llm_cache("lab7")


def _comm(engine) -> float:
    c = engine.comm_stats
    return 0.0 if c is None else c["seconds"] + c["send_seconds"]


def _traced(llm: LLM, k: int, fn):
    """fn() with every rank's all-reduces recorded (engine's TensorParallelModel.trace_calls) when k > 1."""
    if k == 1:
        return fn(), None
    llm.model.trace_calls(True)
    try:
        out = fn()
    finally:
        traces = llm.model.trace_calls(False)
    return out, traces


def prefill_step(llm: LLM, prompt_len: int, seed: int = 0) -> dict:
    """Time one engine step that computes a whole prompt of prompt_len tokens (and samples its first token)."""
    engine = llm.engine
    req = random_requests(1, prompt_len, 1, llm.model_config.vocab_size, seed=seed)[0]
    rid = engine.add_request(req.prompt_ids, SamplingParams(temperature=0, max_tokens=1, ignore_eos=True))
    c0, t0 = _comm(engine), time.perf_counter()
    try:
        engine.step()
        return {"ms": (time.perf_counter() - t0) * 1000, "comm_ms": (_comm(engine) - c0) * 1000}
    finally:
        engine.abort_request(rid)


def run_tp_lab(prompt_len=None, batch_size=None, tp=None, device="cpu", repeats=None, threads=None,
               num_steps: int = 8, load_check: bool = True) -> dict:
    d = defaults()
    p = check_int(d["prompt_len"] if prompt_len is None else prompt_len, "prompt_len", "プロンプト長", *PROMPT_LEN_RANGE)
    b = check_int(d["batch_size"] if batch_size is None else batch_size, "batch_size", "バッチサイズ", *BATCH_RANGE)
    n = check_int(d["tp"] if tp is None else tp, "tp", "TP の大きさ（並列度）", *TP_RANGE)
    device, repeats = check_device(device), check_repeats(default_repeats() if repeats is None else repeats)
    threads = apply_thread_policy(threads)
    # every thread of the run (engine's rule); the watch also reads the load over the whole run (workers are its own)
    watch = LoadWatch(n * max(1, threads // n)) if load_check else None
    tp_model = _engine(n, device, threads).model        # features/tensor_parallel/model.py
    per_rank = tp_model.per_rank             # torch threads of each rank: max(1, threads // n)
    tp1_threads = max(per_rank, min(n * per_rank, usable_cpus()))   # same total, never more than the cores
    samples, own = {k: [] for k in (1, n)}, []   # own: TP=1 (prefill, decode) with one rank's threads
    calls = {"prefill": [], "decode": []}    # TP=N's all-reduces as every rank recorded them (course.labkit.tp_calls)
    per_step = 2 * tp_model.config.num_layers
    for k in samples:                        # untimed: each shape's first call (allocations, page faults) before timing
        torch.set_num_threads(tp1_threads if k == 1 else threads)
        prefill_step(_engine(k, device, threads), p), decode_step_time(_engine(k, device, threads), b, p, num_steps=1)
    for rep in range(repeats):               # TP=1, TP=N, TP=1, ...: both meet the same load
        for k in samples:
            llm = _engine(k, device, threads)
            torch.set_num_threads(tp1_threads if k == 1 else threads)
            try:
                pre, tr = _traced(llm, k, lambda: prefill_step(llm, p, seed=rep))
                calls["prefill"] += pair_calls(tr) if tr else []
                dec, tr = _traced(llm, k, lambda: decode_step_time(llm, b, p, num_steps=num_steps, seed=rep))
                calls["decode"] += pair_calls([t[-(num_steps + 1) * per_step:] for t in tr]) if tr else []
                if k == 1:
                    torch.set_num_threads(per_rank)
                    own.append((prefill_step(llm, p, seed=rep)["ms"],
                                decode_step_time(llm, b, p, num_steps=num_steps, seed=rep)["median_step_ms"]))
            finally:
                torch.set_num_threads(threads)
            samples[k].append((pre["ms"], pre["comm_ms"], dec["median_step_ms"], dec.get("comm_ms", 0.0)))
    load = watch.finish() if watch else None   # after the last timed step: a disturbed run decides nothing
    greedy = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    tokens = {k: [o.token_ids for o in _engine(k, device, threads).generate(CHECK_PROMPTS, greedy, use_tqdm=False)]
              for k in samples}
    cfg, runs = _engine(1, device, threads).model_config, {}
    for k, rows in samples.items():
        med = [statistics.median(col) for col in zip(*rows)]
        runs[k] = {"prefill_ms": med[0], "prefill_comm_ms": med[1], "decode_ms": med[2], "decode_comm_ms": med[3],
                   "prefill_comm_share": med[1] / med[0], "decode_comm_share": med[3] / med[2],
                   "decode_ms_min": min(r[2] for r in rows), "decode_ms_max": max(r[2] for r in rows),
                   **{f"{n_}_comm_share_{f.__name__}": f(r[i + 1] / r[i] for r in rows)      # over the repeats
                      for n_, i in (("prefill", 0), ("decode", 2)) for f in (min, max)}}
    res = {"prompt_len": p, "batch_size": b, "tp": n, "device": device, "repeats": repeats, "threads": threads,
           "threads_per_config": {1: (tp1_threads, 1), n: (per_rank, n)},   # (torch threads per process, processes)
           "tp1_own_prefill_ms": statistics.median(o[0] for o in own),
           "tp1_own_decode_ms": statistics.median(o[1] for o in own), "load_warned": bool(load and load["warning"]),
           "calls": {kind: call_stats(c) for kind, c in calls.items()},
           "runs": runs, "load": load, "same_tokens": tokens[1] == tokens[n],
           "decode_speedup": runs[1]["decode_ms"] / runs[n]["decode_ms"],
           "prefill_speedup": runs[1]["prefill_ms"] / runs[n]["prefill_ms"],
           # TP=N's non-communication time over TP=1's step (lab07_explain.ratio_reading)
           "decode_compute_ratio": (runs[n]["decode_ms"] - runs[n]["decode_comm_ms"]) / runs[1]["decode_ms"],
           "prefill_compute_ratio": (runs[n]["prefill_ms"] - runs[n]["prefill_comm_ms"]) / runs[1]["prefill_ms"],
           "allreduces_per_step": 2 * cfg.num_layers, "lm_head_share": lm_head_share(cfg),
           "rank0": rank0_share(cfg, n, b, b),            # decode: every row samples; prefill: the last row only
           "prefill_rank0_share": rank0_share(cfg, n, p, 1)["share"],
           "decode_allreduce_bytes": tp_allreduce_bytes(cfg.num_layers, cfg.hidden_size, b, 4),
           "prefill_allreduce_bytes": tp_allreduce_bytes(cfg.num_layers, cfg.hidden_size, p, 4)}
    for kind, share in (("decode", res["rank0"]["share"]), ("prefill", res["prefill_rank0_share"])):
        # rank 0 computes on TP=1's per-rank threads: between its matmul share (all time in matmuls) and all
        # (all time fixed per layer) of TP=1's time with those threads, over TP=1's step with its own threads
        scale = res[f"tp1_own_{kind}_ms"] / runs[1][f"{kind}_ms"]
        res[f"{kind}_expected_range"] = (share * scale, scale)
    res["warnings"] = [load["warning"]] if load and load["warning"] else []
    if not res["same_tokens"]:
        res["warnings"].append("TP=1 と TP の貪欲トークンが一致しませんでした。float32 でも TP は部分和を足す順序が変わり、"
                               "logit が float32 の丸め誤差ほど違うので、1位と2位がほぼ同じ位置ではトークンが入れ替わることがあります"
                               "（ふつうは一致します）。その位置の1位と2位の差を確かめてください。")
    return res


# ---------------------------------------------------------------- datacenter: formulas and the simulator (予測)
def allreduce_bytes_per_token(model: str, bytes_per_value: float = 2) -> dict:
    """All-reduce payload of TP per token: 2 per layer of hidden values (after o_proj and after down_proj)."""
    from minimal_engine.calculators.simulator import get_sim_model
    m = get_sim_model(model)
    per_layer = 2 * m.hidden * bytes_per_value
    return {"model": m.name, "hidden": m.hidden, "layers": m.shape.layers, "bytes_per_layer": per_layer,
            "bytes_per_token": per_layer * m.shape.layers}


def ring_allreduce_us(nbytes: float, tp: int, link_gb_s: float, latency_us: float = 0.0) -> float:
    """Time of one ring all-reduce: each GPU sends and receives 2 (tp - 1) / tp of the payload over its link."""
    if tp < 2:
        return 0.0
    return latency_us + 2 * (tp - 1) / tp * nbytes / (link_gb_s * 1e9) * 1e6


def tp_dp_table(model: str = "llama-3.3-70b", gpu: str = "H100", input_len: int = 1024, output_len: int = 1024,
                concurrency: int = 32, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                gpu_counts=(1, 2, 4, 8)) -> list[dict]:
    """Predicted (予測) serving for every (GPUs, TP) with TP dividing the GPUs; DP = GPUs / TP replicas."""
    from minimal_engine.calculators.simulator import simulate
    rows = []
    for g in gpu_counts:
        for t in (x for x in (1, 2, 4, 8) if x <= g and g % x == 0):
            r = simulate(model, gpu, num_gpus=g, tp=t, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                         input_len=input_len, output_len=output_len, concurrency=concurrency)
            rows.append({"num_gpus": g, "tp": t, "dp": g // t, **{k: r[k] for k in (
                "fits", "max_concurrency", "ttft_ms", "tpot_ms", "interactivity", "output_tok_s_per_gpu")}})
    return rows


def tp_dp_html(rows: list[dict]) -> str:
    head = ("GPU 数", "TP", "DP", "載るか", "同時実行の上限", "TTFT [ms]（予測）", "TPOT [ms]（予測）",
            "tok/s/user（予測）", "出力 tok/s/GPU（予測）")
    body = [(r["num_gpus"], r["tp"], r["dp"], "○" if r["fits"] else "×", r["max_concurrency"], _v(r["ttft_ms"], ".0f"),
             _v(r["tpot_ms"]), _v(r["interactivity"]), _v(r["output_tok_s_per_gpu"])) for r in rows]
    return table_html(body, head, right=set(range(4, len(head))))


# ---------------------------------------------------------------- readouts and history
def _v(x, fmt=".1f") -> str:
    return "—" if x is None or x != x else format(x, fmt)


def threads_ja(res: dict) -> str:
    """「TP=1 は 2 スレッド、TP=2 は 1 スレッド × 2 プロセス（合計が同じ）」."""
    parts = [f"TP={k} は {t} スレッド" + (f" × {p} プロセス" if p > 1 else "")
             for k, (t, p) in res["threads_per_config"].items()]
    same = len({t * p for t, p in res["threads_per_config"].values()}) == 1
    return "、".join(parts) + ("（合計のスレッド数は同じ）" if same else "（TP=1 はコア数まで）")


def readout_html(res: dict) -> str:
    n = res["tp"]
    rows = [(label, _v(pre), "—" if not pc else f"{100 * pc / pre:.0f}%", _v(dec), "—" if not dc else f"{100 * dc / dec:.0f}%")
            for label, pre, pc, dec, dc in configs(res)]
    head = (f"構成", f"Prefill {res['prompt_len']} トークン [ms]", "うち通信", f"Decode（バッチ {res['batch_size']}）[ms]",
            "うち通信")
    (sp, tp_), (sd, td) = best_speedup(res, "prefill"), best_speedup(res, "decode")
    note = (f"<div>{threads_ja(res)}。TP={n} の速さ ÷ TP=1 の速いほう（判定と同じ比べ方）: Prefill {sp:.2f} 倍（TP=1 は "
            f"{tp_} スレッド）、Decode {sd:.2f} 倍（TP=1 は {td} スレッド）。1 より小さければ TP={n} のほうが遅くなっています。"
            f"TP={n} の通信以外の時間 ÷ TP=1（{res['threads_per_config'][1][0]} スレッド）の"
            f"1ステップ: Prefill {res['prefill_compute_ratio']:.2f}、Decode {res['decode_compute_ratio']:.2f}（読み方は"
            f"下の説明）。貪欲トークンの一致: {'○' if res['same_tokens'] else '×'}。 1ステップの all-reduce: "
            f"{res['allreduces_per_step']} 回、Decode {res['decode_allreduce_bytes']:,} B、Prefill {res['prefill_allreduce_bytes']:,} B。</div>")
    reps = f"<div style='color:#555'>繰り返し {res['repeats']} 回の中央値</div>" if res["repeats"] > 1 else ""
    return reps + table_html(rows, head, right={1, 2, 3, 4}) + note + warnings_html(res["warnings"])


HISTORY_FIELDS = ("run", "device", "threads", "prompt_len", "batch_size", "repeats", "tp_size", "prefill_ms",
                  "prefill_comm_share", "decode_ms", "decode_comm_share", "same_tokens")


def add_run(history: list[dict], res: dict) -> list[dict]:
    """One history row per configuration (TP=1 and TP=N) of this run."""
    run = max((r["run"] for r in history), default=0) + 1
    rows = [{"run": run, "device": res["device"], "threads": res["threads"], "prompt_len": res["prompt_len"],
             "batch_size": res["batch_size"], "repeats": res["repeats"], "tp_size": k,
             **{f: r[f] for f in ("prefill_ms", "prefill_comm_share", "decode_ms", "decode_comm_share")},
             "same_tokens": res["same_tokens"], "load_warned": res.get("load_warned", False),
             "tp1_own_decode_ms": res.get("tp1_own_decode_ms")} for k, r in res["runs"].items()]
    history.extend(rows)
    return rows


def history_html(history: list[dict], last: int = 24) -> str:
    head = ("#", "TP", "プロンプト長", "バッチサイズ", "Prefill [ms]", "通信の割合", "Decode [ms]", "通信の割合")
    rows = [(r["run"], r["tp_size"], r["prompt_len"], r["batch_size"], _v(r["prefill_ms"]),
             f"{100 * r['prefill_comm_share']:.0f}%", _v(r["decode_ms"]), f"{100 * r['decode_comm_share']:.0f}%")
            for r in history[-last:]]
    return history_table(rows, head, set(range(2, len(head))), "実行すると TP=1 と TP=N の2行ずつ増えます")


def history_csv(history: list[dict], learner: str = "") -> str:
    return to_csv(history, learner, fields=("learner",) + HISTORY_FIELDS)


def plot_run(res: dict):
    """Step time of TP=1 (on its threads and on one rank's) and TP=N, split into computation and communication
    (prefill left, decode right): the same three the verdict compares (``configs``)."""
    from course.labkit.charts import figure
    fig, axes = figure(10, 3.6, 1, 2)
    rows = configs(res)
    labels = [r[0].replace("（", "\n（") for r in rows]
    for a, (col, title) in zip(axes, ((1, f"Prefill（{res['prompt_len']} トークン）"),
                                      (3, f"Decode（バッチ {res['batch_size']}）"))):
        total, comm = [r[col] for r in rows], [r[col + 1] for r in rows]
        a.bar(labels, [t - c for t, c in zip(total, comm)], color="tab:blue", label="計算など")
        a.bar(labels, comm, bottom=[t - c for t, c in zip(total, comm)], color="tab:orange",
              label="通信（all-reduce の待ち＋ワーカーへの入力の送信）")
        for x, t in enumerate(total):
            a.annotate(f"{t:.1f}", (x, t), ha="center", va="bottom", fontsize=8)
        a.set_ylabel("1ステップの時間 [ms]")
        a.set_ylim(0, max(total) * 1.25)
        a.set_title(title, fontsize=10)
        a.tick_params(axis="x", labelsize=8)
        a.legend(fontsize=7)
    fig.suptitle(f"このマシンでの TP=1 と TP={res['tp']}（実測。TP=1 は2つのスレッド数で測り、判定は速いほうと比べます）",
                 fontsize=10)
    return fig


__all__ = ["BATCH_RANGE", "HISTORY_FIELDS", "LINKS", "PROMPT_LEN_RANGE", "TP_RANGE", "add_run",
           "allreduce_bytes_per_token", "best_speedup", "close_all", "configs", "default_repeats", "defaults", "history_csv",
           "history_html", "lm_head_share", "plot_run", "prefill_step", "rank0_share", "readout_html",
           "ring_allreduce_us", "run_tp_lab", "threads_ja", "tp_dp_html", "tp_dp_table"]
