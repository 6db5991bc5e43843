"""Measurements that hold up: repeats (median and min-max), sweeps, the load check, and cost.

    m = measure(local_backend(), prompt_len=64, output_len=32, concurrency=4, repeats=3)
    m["tpot_ms"], m["tpot_ms_min"], m["tpot_ms_max"], m["warnings"], m["runs"][-1]["requests"]
    s = sweep(local_backend(), 64, 32, parse_sweep_list("1, 2, 4, 8"), repeats=3)
    s["rows"], s["warnings"]
    cost(usd_per_hour=2.0, watts=700, tok_s=m["tok_s"], total_tok_s=m["total_tok_s"], ...)

Repeats of a sweep alternate (repeat 1 at every concurrency, then repeat 2, ...), so a slow drift of the
machine touches every point alike. The thread policy is applied first; the load is checked before and over
the whole run (``course.labkit.load.LoadWatch``).
"""
from __future__ import annotations

import statistics
import unicodedata

from minimal_engine import calculators as calc

from course.runtime import apply_thread_policy, check_int
from course.labkit.arrivals import DEFAULT_RATE, arrival_plan, check_arrivals
from course.labkit.backends import Backend, run_plan
from course.labkit.load import LoadWatch, sweep_warnings

METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "p99_itl_ms", "max_itl_ms", "tok_s", "total_tok_s", "tok_s_per_user",
           "duration_s")
REPEATS_RANGE = (1, 20)
MAX_SWEEP_POINTS = 12


def check_repeats(repeats) -> int:
    return check_int(repeats, "repeats", "繰り返し", *REPEATS_RANGE)


def aggregate(results: list[dict], metrics=METRICS) -> dict:
    """For each metric: its median over ``results`` under the metric's name, and ``NAME_min`` / ``NAME_max``."""
    out = {}
    for k in metrics:
        values = [r[k] for r in results]
        out[k], out[f"{k}_min"], out[f"{k}_max"] = statistics.median(values), min(values), max(values)
    return out


def parse_sweep_list(text, lo: int = 1, hi: int = 64, max_points: int = MAX_SWEEP_POINTS) -> list[int]:
    """"1, 2, 4, 8, 16" (commas, 、 or spaces; full-width digits too) -> [1, 2, 4, 8, 16], sorted, distinct.
    A list of ints is accepted as is. Bad input: ValueError in Japanese and English."""
    if isinstance(text, (list, tuple)):
        parts = list(text)
    elif isinstance(text, str):
        norm = unicodedata.normalize("NFKC", text).replace("、", ",").replace(",", " ")
        parts = norm.split()
        bad = [p for p in parts if not p.isdigit()]
        if bad:
            raise ValueError(f"スイープの一覧は「1, 2, 4, 8, 16」のように整数をカンマで区切って書いてください"
                             f"（読めなかった部分: {bad[0]!r}）。 / the sweep list must be integers separated by"
                             f" commas, could not read {bad[0]!r}")
        parts = [int(p) for p in parts]
    else:
        raise ValueError(f"スイープの一覧は「1, 2, 4」のような文字列か整数のリストで指定してください。"
                         f" / the sweep list must be a string or a list of integers, got {text!r}")
    values = sorted({check_int(p, "concurrency", "同時リクエスト数", lo, hi) for p in parts})
    if not 1 <= len(values) <= max_points:
        raise ValueError(f"スイープの一覧には 1〜{max_points} 個の値を書いてください（今は {len(values)} 個）。"
                         f" / the sweep list must hold 1 to {max_points} values, got {len(values)}")
    return values


def _prepare(backend: Backend, threads):
    threads = apply_thread_policy(threads) if backend.kind == "local" else None
    return threads, LoadWatch(threads or 1)


def measure(backend: Backend, prompt_len: int, output_len: int, concurrency: int, repeats: int = 1,
            arrivals: str = "all", rate: float = DEFAULT_RATE, late_prompt_len: int | None = None, seed: int = 0,
            threads: int | None = None, progress=None) -> dict:
    """``repeats`` runs of the same requests. Returns the settings, ``runs`` (every run's result), the
    aggregate (median, _min, _max of METRICS), ``load`` (the checks before and during, ``LoadWatch``) and ``warnings`` (Japanese)."""
    repeats, arrivals = check_repeats(repeats), check_arrivals(arrivals)
    if arrivals == "late_long" and late_prompt_len is None:
        late_prompt_len = 4 * prompt_len
    plan = arrival_plan(arrivals, concurrency, prompt_len, output_len, seed, rate, late_prompt_len)
    threads, watch = _prepare(backend, threads)
    total = output_len * len(plan) * repeats
    runs = []
    for i in range(repeats):
        cb = None if progress is None else (lambda d, _t, b=i * output_len * len(plan): progress(b + d, total))
        runs.append(run_plan(backend, plan, output_len, seed, cb, threads))
    load = watch.finish()
    settings = dict(backend=backend.kind, base_url=backend.base_url or "", model=backend.model, device=backend.device,
                    threads=threads, arrivals=arrivals, rate=rate if arrivals == "poisson" else None,
                    late_prompt_len=late_prompt_len if arrivals == "late_long" else None, prompt_len=prompt_len,
                    output_len=output_len, concurrency=concurrency, repeats=repeats, seed=seed)
    summary = runs[-1]["summary"]
    return {**settings, **aggregate(runs), "runs": runs, "load": load,
            "input_tokens": summary["total_input_tokens"], "output_tokens": summary["total_output_tokens"],
            "warnings": [load["warning"]] if load["warning"] else []}


def sweep(backend: Backend, prompt_len: int, output_len: int, concurrencies, repeats: int = 1,
          arrivals: str = "all", rate: float = DEFAULT_RATE, late_prompt_len: int | None = None, seed: int = 0,
          threads: int | None = None, progress=None) -> dict:
    """``measure`` at each concurrency (repeats alternate over the points). Returns ``rows`` (one per
    concurrency: the settings and the aggregate), ``load`` and ``warnings`` (the load check, and points
    whose output tok/s falls by more than the repeats' spread)."""
    concurrencies = parse_sweep_list(concurrencies)
    repeats, arrivals = check_repeats(repeats), check_arrivals(arrivals)
    if arrivals == "late_long" and late_prompt_len is None:
        late_prompt_len = 4 * prompt_len
    plans = {c: arrival_plan(arrivals, c, prompt_len, output_len, seed, rate, late_prompt_len) for c in concurrencies}
    threads, watch = _prepare(backend, threads)
    total = output_len * sum(len(p) for p in plans.values()) * repeats
    runs = {c: [] for c in concurrencies}
    before = 0
    for _ in range(repeats):
        for c in concurrencies:
            cb = None if progress is None else (lambda d, _t, b=before: progress(b + d, total))
            runs[c].append(run_plan(backend, plans[c], output_len, seed, cb, threads))
            before += output_len * len(plans[c])
    load = watch.finish()
    base = dict(backend=backend.kind, base_url=backend.base_url or "", model=backend.model, device=backend.device,
                threads=threads, arrivals=arrivals, rate=rate if arrivals == "poisson" else None,
                late_prompt_len=late_prompt_len if arrivals == "late_long" else None, prompt_len=prompt_len,
                output_len=output_len, repeats=repeats, seed=seed)
    rows = [{**base, "concurrency": c, **aggregate(runs[c])} for c in concurrencies]
    warnings = ([load["warning"]] if load["warning"] else []) + sweep_warnings(rows)
    return {"rows": rows, "runs": runs, "load": load, "warnings": warnings}


def order_held(rows: list[dict], key: str = "tok_s") -> bool:
    """True when ``key`` (median) never falls as the concurrency grows (the sweep's expected order)."""
    values = [r[key] for r in sorted(rows, key=lambda r: r["concurrency"])]
    return all(b >= a for a, b in zip(values, values[1:]))


# ---------------------------------------------------------------- cost
def _check_nonnegative(value, name: str, ja: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{ja}（{name}）は 0 以上の数で指定してください。 / {name} must be a number >= 0, got {value!r}")
    return float(value)


def cost(usd_per_hour: float, watts: float, tok_s: float, total_tok_s: float) -> dict:
    """The learner's own throughput priced: $/100万トークン and J/トークン, per output token and per token
    of input + output ("total"), with ``calculators.cost_per_million_tokens`` and ``energy_per_token``.
    ``usd_per_hour``: the machine's price; ``watts``: its all-in power draw; ``tok_s``: measured output
    tok/s; ``total_tok_s``: measured input + output tok/s (their ratio stands for input_len : output_len)."""
    usd = _check_nonnegative(usd_per_hour, "usd_per_hour", "1時間あたりの料金")
    w = _check_nonnegative(watts, "watts", "全込み電力（all-in）")
    input_share, output_share = total_tok_s - tok_s, tok_s
    out = dict(calc.cost_per_million_tokens(usd, tok_s, input_share, output_share))
    out.update(calc.energy_per_token(w, tok_s, input_share, output_share))
    return {k: out[k] for k in ("usd_per_m_output_tokens", "usd_per_m_total_tokens", "j_per_output_token",
                                "j_per_total_token")}


__all__ = ["METRICS", "REPEATS_RANGE", "aggregate", "check_repeats", "cost", "measure", "order_held",
           "parse_sweep_list", "sweep"]
