"""Lab 10 (第10章ラボ): 自分のマシンのパレートフロンティアとコスト、シミュレーターの予測とデータセンターGPU。

Plain functions (tests call them; the notebook stays thin)::

    res = run_pareto_lab(prompt_len=64, output_len=32, max_concurrency=16)   # own sweep + prediction + cost
    res["table"]        # per concurrency: measured and predicted (予測) TTFT, TPOT, tok/s, and the error
    res["rows"]         # the measured sweep (``course.labkit.measure.sweep``, chapter 1's) with $/M tokens and J/token
    dc = datacenter_frontiers(input_len=1024, output_len=1024)     # simulator sweeps (予測) per configuration
    plot_frontiers(res, dc)                                        # both on the same log axes
    best = cheapest_meeting_slo(ttft_slo_ms=2000, tpot_slo_ms=50)  # configurations that meet the SLO, cheapest first

The learner's machine enters the simulator as a "GPU" (``minimal_engine.tools.sim_calibration.machine_spec``): its
measured GFLOP/s and GB/s (``course.labkit.machine.machine_peaks``, chapter 2's), plus the engine's per-layer and
per-request overheads and its matmul efficiency fitted on the smallest and largest concurrency of the sweep;
the concurrencies between are predicted, not fitted (interpolated between the two fitted ends; lab10_explain's
``extrapolation`` refits without the largest one and predicts it). Every simulated number is labelled 予測.
"""
from __future__ import annotations

from pathlib import Path

from course.labkit.backends import local_backend
from course.labkit.history import to_csv
from course.labkit.machine import format_machine_ja, machine_peaks as measure_peaks
from course.labkit.measure import check_repeats, cost, sweep
from course.labkit.tables import history_table, table_html, warnings_html
from course.runtime import check_device, check_int, is_quick
from minimal_engine.tools.sim_calibration import fit_machine_all, machine_spec, machine_table
from minimal_engine.calculators.sim_tables import SIM_GPUS, inferencex_cost_inputs
from minimal_engine.calculators.simulator import simulate, simulate_sweep
from course.labs.lab10_plots import plot_frontiers, plot_run  # noqa: F401  (re-exported: lab10.plot_run)

DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[2] / "minimal_engine" / "default_model"
PROMPT_LEN_RANGE = (1, 448)
OUTPUT_LEN_RANGE = (2, 64)
MAX_CONCURRENCY_RANGE = (1, 32)
COST_EXAMPLE = {"usd_per_hour": 0.10, "watts": 65.0}     # an example laptop: replace with your own figures
DC_CONFIGS = [
    dict(label="H100×2 TP2 FP8", gpu="H100", num_gpus=2, tp=2, weight_dtype="fp8"),
    dict(label="H200×1 FP8", gpu="H200", num_gpus=1, tp=1, weight_dtype="fp8"),
    dict(label="B200×1 FP4", gpu="B200", num_gpus=1, tp=1, weight_dtype="fp4"),
    dict(label="MI355X×1 FP8", gpu="MI355X", num_gpus=1, tp=1, weight_dtype="fp8"),
]
_PEAKS: dict = {}                 # (device, threads) -> measured peaks (measured once per session)


def defaults() -> dict:
    if is_quick():
        return dict(prompt_len=32, output_len=16, max_concurrency=4)
    return dict(prompt_len=64, output_len=32, max_concurrency=16)     # chapter 1's sweep


def default_repeats() -> int:
    return 1 if is_quick() else 3


def sweep_concurrencies(max_concurrency: int) -> list[int]:
    """1, 2, 4, ... up to max_concurrency (doubling, as InferenceX), max_concurrency included."""
    out, c = [], 1
    while c < max_concurrency:
        out.append(c)
        c *= 2
    return out + [max_concurrency]


def engine_dtype(device: str = "cpu") -> str:
    """The precision the engine runs the default model in on ``device`` ("fp32" on a CPU)."""
    import torch

    from minimal_engine.model.loader import resolve_dtype
    from course.runtime import model_config
    dt = resolve_dtype(None, torch.device(device), model_config(None))
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dt]


def machine_peaks(device: str = "cpu", threads: int | None = None) -> dict:
    key = (device, threads)
    if key not in _PEAKS:
        _PEAKS[key] = measure_peaks(threads, device)
    return _PEAKS[key]


def run_pareto_lab(prompt_len=None, output_len=None, max_concurrency=None, device="cpu", repeats=None, threads=None,
                   usd_per_hour: float = COST_EXAMPLE["usd_per_hour"], watts: float = COST_EXAMPLE["watts"]) -> dict:
    """Measure the concurrency sweep of chapter 1 (all requests at once), predict it with the simulator from
    this machine's measured peaks, and price every point ($/M tokens, J/token) with ``usd_per_hour`` and
    ``watts`` (the whole machine)."""
    d = defaults()
    p = check_int(d["prompt_len"] if prompt_len is None else prompt_len, "prompt_len", "プロンプト長", *PROMPT_LEN_RANGE)
    o = check_int(d["output_len"] if output_len is None else output_len, "output_len", "出力長", *OUTPUT_LEN_RANGE)
    mc = check_int(d["max_concurrency"] if max_concurrency is None else max_concurrency, "max_concurrency",
                   "最大同時リクエスト数", *MAX_CONCURRENCY_RANGE)
    device, repeats = check_device(device), check_repeats(default_repeats() if repeats is None else repeats)
    concs = sweep_concurrencies(mc)
    sw = sweep(local_backend("default", device), p, o, concs, repeats, threads=threads)   # all at once
    rows = [dict(r, **cost(usd_per_hour, watts, r["tok_s"], r["total_tok_s"])) for r in sw["rows"]]
    peaks = machine_peaks(device, threads)
    dtype = engine_dtype(device)
    spec = fit_machine_all(machine_spec(peaks), DEFAULT_MODEL_DIR, rows, p, o, dtype)
    table = machine_table(spec, DEFAULT_MODEL_DIR, rows, p, o, dtype)
    return {"prompt_len": p, "output_len": o, "max_concurrency": mc, "concurrencies": concs, "device": device,
            "repeats": repeats, "threads": peaks.get("threads"), "dtype": dtype, "rows": rows, "peaks": peaks,
            "spec": spec, "table": table, "usd_per_hour": usd_per_hour, "watts": watts, "load": sw["load"],
            "warnings": sw["warnings"]}


# ---------------------------------------------------------------- the simulator's datacenter curves (予測)
def datacenter_frontiers(configs=None, model="llama-3.3-70b", input_len=1024, output_len=1024, kv_dtype="fp8",
                         concurrencies=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512)) -> dict:
    """label -> simulate_sweep rows (予測), priced with InferenceX's hyperscaler $/GPU-hr and all-in kW;
    points that do not fit in memory are dropped, and the largest concurrency that fits (below the
    grid's largest) is added as each curve's last point, so a coarse grid does not cut a curve short."""
    out = {}
    for c in configs or DC_CONFIGS:
        kw = {k: v for k, v in c.items() if k != "label"}
        kw.setdefault("kv_dtype", kv_dtype)
        m, gpu = kw.pop("model", model), kw.pop("gpu")
        kw.update(input_len=input_len, output_len=output_len, **inferencex_cost_inputs(c["gpu"]))
        rows = [r for r in simulate_sweep(m, gpu, concurrencies=list(concurrencies), **kw) if r["fits"]]
        cap = rows[-1]["max_concurrency"] if rows else 0
        if rows and rows[-1]["concurrency"] < cap < max(concurrencies):
            rows += simulate_sweep(m, gpu, concurrencies=[cap], **kw)
        out[c["label"]] = rows
    return out


def pareto_front(points: list[dict], x: str = "interactivity", y: str = "output_tok_s_per_gpu") -> list[dict]:
    """Points no other point dominates (higher is better for both x and y), sorted by x.

    q dominates p when q is at least as good on both axes and better on at least one
    (two points equal on both axes dominate neither)."""
    ok = [p for p in points if p[x] == p[x] and p[y] == p[y]]
    front = [p for p in ok if not any(q[x] >= p[x] and q[y] >= p[y] and (q[x] > p[x] or q[y] > p[y]) for q in ok)]
    return sorted(front, key=lambda p: p[x])


def at_interactivity(rows: list[dict], target: float) -> dict | None:
    """Output and total tok/s/GPU of a sweep at ``target`` tok/s/user, interpolated on log axes between the two
    points around it (予測); None when the curve does not reach that interactivity."""
    import math
    pts = sorted((r for r in rows if r["interactivity"] == r["interactivity"]), key=lambda r: r["interactivity"])
    for a, b in zip(pts, pts[1:]):
        if a["interactivity"] <= target <= b["interactivity"]:
            w = math.log(target / a["interactivity"]) / math.log(b["interactivity"] / a["interactivity"])
            return {k: math.exp((1 - w) * math.log(a[k]) + w * math.log(b[k]))
                    for k in ("output_tok_s_per_gpu", "total_tok_s_per_gpu")}
    return None


def cost_at_interactivity(dc: dict, target: float) -> list[dict]:
    """Per configuration of ``datacenter_frontiers``: tok/s/GPU, $/M output and total tokens and J/token at
    ``target`` tok/s/user (InferenceX hyperscaler prices), and perf/TCO = output tok/s/GPU per $/GPU-hr."""
    from minimal_engine import calculators as calc
    out = []
    for label, rows in dc.items():
        at = at_interactivity(rows, target)
        if at is None or not rows:
            continue
        c = inferencex_cost_inputs(rows[0]["gpu"])
        out.append({"label": label, "output_tok_s_per_gpu": at["output_tok_s_per_gpu"],
                    "total_tok_s_per_gpu": at["total_tok_s_per_gpu"], "usd_per_gpu_hour": c["usd_per_gpu_hour"],
                    "usd_per_m_output_tokens": calc.usd_per_million_tokens(c["usd_per_gpu_hour"], at["output_tok_s_per_gpu"]),
                    "usd_per_m_total_tokens": calc.usd_per_million_tokens(c["usd_per_gpu_hour"], at["total_tok_s_per_gpu"]),
                    "j_per_total_token": calc.joules_per_token(c["kw_per_gpu"], at["total_tok_s_per_gpu"]),
                    "perf_per_tco": at["output_tok_s_per_gpu"] / c["usd_per_gpu_hour"]})
    return out


def native_dtypes(gpu: str) -> list[str]:
    """Weight precisions a GPU runs on its own tensor cores (BF16 always; FP8 / FP4 where the table has them)."""
    g = SIM_GPUS[gpu]
    return ["bf16"] + (["fp8"] if g.fp8_tflops else []) + (["fp4"] if g.fp4_tflops else [])


def cheapest_meeting_slo(ttft_slo_ms: float, tpot_slo_ms: float, model="llama-3.3-70b", input_len=1024,
                         output_len=1024, gpus=("H100", "H200", "B200", "MI300X", "MI355X"), tps=(1, 2, 4, 8),
                         concurrencies=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512)) -> list[dict]:
    """For each GPU x precision x TP: the highest-throughput concurrency whose predicted TTFT and TPOT meet the
    SLO and whose KV fits; returned cheapest first by $/M output tokens (InferenceX hyperscaler prices). The
    grid (capped at the memory limit, which is added) brackets the largest passing concurrency, and bisection
    finds it to one request, so neither the grid's end nor its step decides a row. All values are 予測."""
    best = []
    for gpu in gpus:
        for dtype in native_dtypes(gpu):
            for tp in tps:
                kw = dict(num_gpus=tp, tp=tp, weight_dtype=dtype, kv_dtype="fp8" if dtype != "bf16" else "bf16",
                          input_len=input_len, output_len=output_len, **inferencex_cost_inputs(gpu))
                run = {}

                def ok(c: int) -> bool:
                    r = run.setdefault(c, simulate(model, gpu, concurrency=c, **kw))
                    return r["fits"] and r["ttft_ms"] <= ttft_slo_ms and r["tpot_ms"] <= tpot_slo_ms
                cap = simulate(model, gpu, concurrency=1, **kw)["max_concurrency"]
                grid = sorted({c for c in concurrencies if c < cap} | ({cap} if cap >= 1 else set()))
                good = [c for c in grid if ok(c)]
                if not good:
                    continue
                lo, hi = good[-1], next((c for c in grid if c > good[-1]), None)
                while hi is not None and hi - lo > 1:                  # TTFT and TPOT grow with concurrency
                    mid = (lo + hi) // 2
                    lo, hi = (mid, hi) if ok(mid) else (lo, mid)
                best.append(max((run[c] for c in run if ok(c)), key=lambda r: r["output_tok_s_per_gpu"]))
    return sorted(best, key=lambda r: r["usd_per_m_output_tokens"])


def cheapest_table_html(best: list[dict], top: int = 8) -> str:
    head = ("GPU", "精度", "TP", "同時リクエスト数", "メモリに入る同時リクエスト数", "TTFT [ms]（予測）", "TPOT [ms]（予測）",
            "出力 tok/s/GPU（予測）", "$/M 出力トークン（予測）", "J/token（合計、予測）")
    rows = [(r["gpu"], r["weight_dtype"].upper(), r["tp"], r["concurrency"], r["max_concurrency"], f"{r['ttft_ms']:,.0f}",
             f"{r['tpot_ms']:.1f}", f"{r['output_tok_s_per_gpu']:,.0f}", f"{r['usd_per_m_output_tokens']:.3f}",
             f"{r['joules_per_token']:.2f}")
            for r in best[:top]]
    return table_html(rows, head, right=set(range(2, len(head))))


# ---------------------------------------------------------------- readouts and history
def readout_html(res: dict) -> str:
    head = ("同時リクエスト数", "TTFT 実測 [ms]", "TTFT 予測 [ms]", "TPOT 実測 [ms]", "TPOT 予測 [ms]", "出力 tok/s 実測",
            "出力 tok/s 予測", "予測の誤差（tok/s）", "当てはめ", "$/M 出力トークン", "J/token（出力）")
    rows = [(t["concurrency"], f"{t['ttft_ms']:.0f}", f"{t['pred_ttft_ms']:.0f}", f"{t['tpot_ms']:.1f}",
             f"{t['pred_tpot_ms']:.1f}", f"{t['tok_s']:.1f}", f"{t['pred_tok_s']:.1f}",
             "0%" if round(t["err_tok_s"] * 100) == 0 else f"{t['err_tok_s']:+.0%}",   # never "-0%"
             "使った" if t["split"] == "fit" else "内挿（予測）", f"{r['usd_per_m_output_tokens']:.3f}",
             f"{r['j_per_output_token']:.3f}") for t, r in zip(res["table"], res["rows"])]
    pk = res["peaks"]
    note = (f"<div style='color:#555'>このマシン: {format_machine_ja(pk)}。エンジンの精度 {res['dtype']}。"
            f"料金 ${res['usd_per_hour']:.2f}/時間、電力 {res['watts']:.0f} W（例の値。自分の値に変えられます）。"
            f"「当てはめ」が「使った」の同時リクエスト数で固定の時間と Prefill の効率を決め、その間は内挿の予測です。</div>")
    return note + table_html(rows, head, right=set(range(1, len(head)))) + warnings_html(res["warnings"])


HISTORY_FIELDS = ("run", "device", "threads", "prompt_len", "output_len", "repeats", "concurrency", "tok_s",
                  "pred_tok_s", "tpot_ms", "pred_tpot_ms", "ttft_ms", "pred_ttft_ms", "usd_per_m_output_tokens",
                  "j_per_output_token")


def add_run(history: list[dict], res: dict) -> list[dict]:
    """One history row per concurrency of this run (same run number)."""
    run = max((r["run"] for r in history), default=0) + 1
    rows = [{"run": run, **{k: res[k] for k in HISTORY_FIELDS[1:6]}, **{k: t[k] for k in HISTORY_FIELDS[6:13]},
             "usd_per_m_output_tokens": r["usd_per_m_output_tokens"], "j_per_output_token": r["j_per_output_token"]}
            for t, r in zip(res["table"], res["rows"])]
    history.extend(rows)
    return rows


def history_html(history: list[dict], last: int = 24) -> str:
    head = ("#", "プロンプト長", "出力長", "同時リクエスト数", "出力 tok/s 実測", "出力 tok/s 予測", "TPOT 実測 [ms]",
            "TPOT 予測 [ms]", "$/M 出力トークン")
    rows = [(r["run"], r["prompt_len"], r["output_len"], r["concurrency"], f"{r['tok_s']:.1f}", f"{r['pred_tok_s']:.1f}",
             f"{r['tpot_ms']:.1f}", f"{r['pred_tpot_ms']:.1f}", f"{r['usd_per_m_output_tokens']:.3f}")
            for r in history[-last:]]
    return history_table(rows, head, set(range(1, len(head))), "実行すると同時リクエスト数ごとに1行ずつ増えます")


def history_csv(history: list[dict], learner: str = "") -> str:
    return to_csv(history, learner, fields=("learner",) + HISTORY_FIELDS)


__all__ = ["COST_EXAMPLE", "DC_CONFIGS", "HISTORY_FIELDS", "add_run", "at_interactivity", "cheapest_meeting_slo",
           "cost_at_interactivity", "cheapest_table_html", "datacenter_frontiers", "default_repeats", "defaults",
           "history_csv", "history_html", "native_dtypes", "pareto_front", "plot_frontiers",
           "plot_run", "readout_html", "run_pareto_lab", "sweep_concurrencies"]
