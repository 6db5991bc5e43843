"""Lab 4 (第4章ラボ): KV キャッシュのメモリ管理。共有プロンプトの実験、連続確保とページングの比較、容量の計算。

Plain functions (tests call them; the notebook stays thin)::

    res = run_prefix_lab(shared_len=256, num_requests=6)        # TTFT with prefix caching off (and on)
    res["ttft_off_ms"], res["ttft_on_ms"], res["hit_rate"], res["cached_tokens"]
    sim = kv_sim.compare(kv_sim.request_stream(200), pool_tokens=32_768)   # contiguous vs paged (course.demos.kv_sim)
    capacity_rows(["Llama 3.1 8B"], ["H100"], [4096, 32768])    # users that fit, from minimal_engine.calculators

The prefix experiment sends ``num_requests`` prompts one after the other; each is ``shared_len`` tokens of
one shared "system prompt" followed by ``own_len`` tokens of its own. With prefix caching off every request
computes its whole prompt; with it on (``LLM(..., enable_prefix_caching=True)``, when the engine has it)
requests 2.. reuse the full blocks of the shared part. TTFT is the median over requests 2.. (and repeats).
``lab04_explain`` holds the lab's predictions (the sweep and the tasks), decided by these runs.
"""
from __future__ import annotations

import inspect
import statistics
import time

from course import labkit
from course.labkit.history import to_csv
from course.labkit.load import LoadWatch
from course.labkit.measure import check_repeats
from course.labkit.tables import history_table, table_html, warnings_html
from course.runtime import apply_thread_policy, cached_llm, check_device, check_int, get_llm, is_quick, random_prompts
from minimal_engine import LLM, SamplingParams
from minimal_engine import calculators as calc

SHARED_LEN_RANGE = (0, 480)        # + OWN_LEN + OUTPUT_LEN within the default model's 512
NUM_REQUESTS_RANGE = (2, 32)
OWN_LEN = 16
OUTPUT_LEN = 4


def prefix_caching_available() -> bool:
    """Does this engine accept ``LLM(..., enable_prefix_caching=True)``?"""
    return "enable_prefix_caching" in inspect.signature(LLM.__init__).parameters


def defaults() -> dict:
    return dict(shared_len=256, num_requests=4) if is_quick() else dict(shared_len=256, num_requests=8)


def default_repeats() -> int:
    return 1 if is_quick() else 3


def _llm(caching: bool, device: str):
    if not caching:
        return get_llm("default", device)
    base = get_llm("default", device)
    return cached_llm(("lab4", "prefix", device), lambda: _warm(LLM(   # the course's one engine cache (course.runtime)
        None, device=device, max_model_len=base.engine.max_model_len, kv_cache_memory=base.engine.runner.kv_cache_bytes,
        enable_prefix_caching=True)))


def _warm(llm):
    """Run the caching engine's first prefills before any is timed, as get_llm does for the other engine:
    two requests sharing a 32-token prefix, so the cached path (a hit read from the pool) has run once too."""
    shared = random_prompts(llm, 32, 1, seed=-1)[0]
    warm = SamplingParams(temperature=0, max_tokens=OUTPUT_LEN, ignore_eos=True)
    for own in random_prompts(llm, OWN_LEN, 2, seed=-2):
        llm.generate([shared + own], warm, use_tqdm=False)
    return llm


def _one_pass(llm, prompts, params) -> tuple[list[float], list[int]]:
    ttft, cached = [], []
    for p in prompts:
        out = llm.generate([p], params, use_tqdm=False)[0]
        ttft.append(out.metrics.ttft * 1e3)
        cached.append(getattr(out, "num_cached_tokens", 0) or 0)
    return ttft, cached


def run_prefix_lab(shared_len=None, num_requests=None, device="cpu", repeats=None, threads=None, seed=0,
                   load_check=True) -> dict:
    """TTFT of requests that share a prefix, with prefix caching off and (when available) on."""
    d = defaults()
    shared = check_int(d["shared_len"] if shared_len is None else shared_len, "shared_len", "共有プロンプト長",
                       *SHARED_LEN_RANGE)
    n = check_int(d["num_requests"] if num_requests is None else num_requests, "num_requests", "リクエスト数",
                  *NUM_REQUESTS_RANGE)
    device = check_device(device)
    repeats = check_repeats(default_repeats() if repeats is None else repeats)
    threads = apply_thread_policy(threads)
    watch = LoadWatch(threads) if load_check else None   # the check before, and the load over the whole run
    off = _llm(False, device)
    params = SamplingParams(temperature=0, max_tokens=OUTPUT_LEN, ignore_eos=True)
    block = off.engine.config.block_size
    res = {"shared_len": shared, "num_requests": n, "own_len": OWN_LEN, "device": device, "repeats": repeats,
           "threads": threads, "block_size": block, "available": prefix_caching_available(),
           "expected_hit_rate": calc.prefix_hit_rate(shared, OWN_LEN, block, n),
           "expected_cached_tokens": calc.cached_prefix_tokens(min(shared, shared + OWN_LEN - 1), block)}
    # warm this shape before timing it: an untimed pass of both engines over a throwaway prefix of the same
    # length, so the first calls of its shapes (the full prefill, the 16 queries over this many cached tokens)
    # are not timed (blind reading 10, ch04 #1)
    spare = random_prompts(off, shared, 1, seed - 1 - time.time_ns() % 1_000_003)[0] if shared else []
    spare = [spare + own for own in random_prompts(off, OWN_LEN, min(n, 3), seed - 7)]
    _one_pass(off, spare, params)
    if res["available"]:
        _one_pass(_llm(True, device), spare, params)
    runs = {"off": [], "on": []}
    counters = None
    cached_seen = []
    for r in range(repeats):
        # a shared prefix never sent before (salted with the clock), so that the cache starts cold each time
        salt = time.time_ns() % 1_000_000_007
        common = random_prompts(off, shared, 1, seed + salt + r)[0] if shared else []
        prompts = [common + own for own in random_prompts(off, OWN_LEN, n, seed + r)]
        runs["off"].append(_one_pass(off, prompts, params)[0])
        if res["available"]:
            cache = getattr(_llm(True, device).engine.block_manager, "cache", None)
            before = (cache.queries, cache.hits) if cache is not None else None
            ttft, cached = _one_pass(_llm(True, device), prompts, params)
            if before is not None:              # the engine's own counters (vLLM's prefix cache queries / hits)
                counters = (cache.queries - before[0], cache.hits - before[1])
            runs["on"].append(ttft)
            cached_seen.append(cached)
    res["load"] = load = watch.finish() if watch else None
    for key, vals in runs.items():
        if vals:
            later = [t for run in vals for t in run[1:]]
            res[f"ttft_{key}_ms"] = statistics.median(later)
            res[f"ttft_{key}_ms_min"], res[f"ttft_{key}_ms_max"] = min(later), max(later)
            res[f"first_ttft_{key}_ms"] = statistics.median(run[0] for run in vals)
        else:
            res[f"ttft_{key}_ms"] = res[f"ttft_{key}_ms_min"] = res[f"ttft_{key}_ms_max"] = float("nan")
            res[f"first_ttft_{key}_ms"] = float("nan")
    res["cached_tokens"] = cached_seen[-1] if cached_seen else None
    prompt_total = n * (shared + OWN_LEN)
    res["hit_rate"] = sum(cached_seen[-1]) / prompt_total if cached_seen else float("nan")
    res["counter_hit_rate"] = counters[1] / counters[0] if counters and counters[0] else float("nan")
    res["ratio"] = res["ttft_off_ms"] / res["ttft_on_ms"] if res["available"] else float("nan")
    warnings = [load["warning"]] if load and load["warning"] else []
    if not res["available"]:
        warnings.append("このバージョンのエンジンにはプレフィックスキャッシュ（enable_prefix_caching）がまだありません。"
                        "キャッシュありの列は後のバージョンで埋まります（いまはキャッシュなしだけを測っています）。")
    res["warnings"] = warnings
    return res


# ---------------------------------------------------------------- readouts and history
def _ms(res, key) -> str:
    v = res[f"{key}_ms"]
    if v != v:
        return "—（後のバージョン）"
    s = f"{v:.1f} ms"
    return s + (f"（{res[key + '_ms_min']:.1f}〜{res[key + '_ms_max']:.1f}）" if res["repeats"] > 1 else "")


def readout_rows(res: dict) -> list[tuple[str, str, str]]:
    rows = [("TTFT キャッシュなし（2件目以降）", _ms(res, "ttft_off"), "毎回プロンプト全体を Prefill する"),
            ("TTFT キャッシュあり（2件目以降）", _ms(res, "ttft_on"), "共有部分の満杯のブロックは再利用する"),
            ("比（なし / あり）", "—" if res["ratio"] != res["ratio"] else f"{res['ratio']:.2f} 倍", "すべての繰り返しの2件目以降を合わせた中央値どうしの比"),
            ("再利用できるトークン（計算）", f"{res['expected_cached_tokens']} / {res['shared_len'] + res['own_len']}",
             f"満杯のブロック（{res['block_size']} トークン）の分だけ"),
            ("ヒット率（計算）", f"{res['expected_hit_rate'] * 100:.1f} %", "1件目は全部計算、2件目以降が共有部分を再利用"),
            ("ヒット率（エンジン）", "—" if res["hit_rate"] != res["hit_rate"] else f"{res['hit_rate'] * 100:.1f} %",
             "num_cached_tokens の合計 / プロンプトトークンの合計"),
            ("ヒット率（エンジンのカウンタ）",
             "—" if res["counter_hit_rate"] != res["counter_hit_rate"] else f"{res['counter_hit_rate'] * 100:.1f} %",
             "プレフィックスキャッシュのヒット ÷ 問い合わせ（トークン、最後の繰り返し）")]
    return rows


def readout_html(res: dict) -> str:
    note = (f"<div style='color:#555'>TTFT は、繰り返し {res['repeats']} 回の2件目以降の全リクエストを合わせた"
            f"中央値（最小〜最大）</div>" if res["repeats"] > 1 else "")
    return note + table_html(readout_rows(res), ("指標", "値", "意味")) + warnings_html(res["warnings"])


HISTORY_FIELDS = ("run", "device", "threads", "shared_len", "own_len", "num_requests", "repeats", "ttft_off_ms",
                  "ttft_off_ms_min", "ttft_off_ms_max", "ttft_on_ms", "ttft_on_ms_min", "ttft_on_ms_max", "ratio",
                  "expected_hit_rate", "hit_rate", "warnings")


def add_run(history: list[dict], res: dict) -> dict:
    row = {"run": max((r["run"] for r in history), default=0) + 1,
           **{k: res[k] for k in HISTORY_FIELDS[1:-1]}, "warnings": " ".join(res["warnings"])}
    history.append(row)
    return row


def _f(v, fmt) -> str:
    return "—" if v != v else format(v, fmt)


def history_html(history: list[dict], last: int = 15) -> str:
    head = ("#", "共有プロンプト長", "リクエスト数", "繰り返し", "スレッド", "TTFT なし [ms]", "TTFT あり [ms]", "比",
            "ヒット率（計算）")
    rows = [(r["run"], r["shared_len"], r["num_requests"], r["repeats"], r["threads"], _f(r["ttft_off_ms"], ".1f"),
             _f(r["ttft_on_ms"], ".1f"), _f(r["ratio"], ".2f"), f"{r['expected_hit_rate'] * 100:.1f} %")
            for r in history[-last:]]
    return history_table(rows, head, set(range(1, len(head))))


def history_csv(history: list[dict], learner: str = "") -> str:
    """The history as CSV text (HISTORY_FIELDS, plus the learner's name): the lab kit's writer."""
    return to_csv(history, learner, fields=("learner",) + HISTORY_FIELDS)


def plot_prefix(res: dict):
    from course.labkit.charts import figure
    fig, ax = figure(6.5, 3.4)
    vals = [res["ttft_off_ms"], res["ttft_on_ms"]]
    ax.bar(["キャッシュなし", "キャッシュあり"], [0 if v != v else v for v in vals], color=["tab:red", "tab:blue"])
    for i, v in enumerate(vals):
        ax.text(i, 0 if v != v else v, "後のバージョン" if v != v else f"{v:.1f} ms", ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("TTFT の中央値（2件目以降）[ms]")
    ax.set_title(f"共有プロンプト {res['shared_len']} + 各自 {res['own_len']} トークン・{res['num_requests']} 件", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    return fig


# ---------------------------------------------------------------- capacity planning (calculators only)
def capacity_rows(models, gpus, context_lens, dtype="bf16", kv_dtype="bf16", gpu_count=1) -> list[dict]:
    """Users whose whole context fits in the KV memory left after the weights, per model x GPU x context."""
    rows = []
    for m in models:
        w = calc.weight_bytes(m, dtype)
        for g in gpus:
            mem = calc.gpu_memory_bytes(g, gpu_count)
            for ctx in context_lens:
                users = calc.max_concurrent_users(m, ctx, mem, kv_dtype, w) if w < mem else 0
                rows.append({"model": m, "gpu": g, "gpu_count": gpu_count, "context_len": ctx,
                             "kv_bytes_per_token": calc.kv_bytes_per_token(m, kv_dtype), "weight_gb": w / 1e9,
                             "memory_gb": mem / 1e9, "users": users, "weights_fit": w < mem})
    return rows


def capacity_html(rows: list[dict]) -> str:
    body = [(r["model"], f"{r['gpu']} × {r['gpu_count']}", f"{r['context_len']:,}", f"{r['kv_bytes_per_token']:,}",
             f"{r['weight_gb']:.1f}", f"{r['memory_gb']:.1f}",            # one decimal: 70B's 141.2 vs H200's 141.0
             f"{r['users']:,}" if r["users"] else ("1件も入らない" if r.get("weights_fit", True) else "重みが入らない"))
            for r in rows]
    return table_html(body, ("モデル", "GPU", "文脈長", "KV [B/トークン]", "重み [GB]", "メモリ [GB]", "同時に入るリクエスト数"),
                      right={2, 3, 4, 5, 6})


__all__ = ["HISTORY_FIELDS", "NUM_REQUESTS_RANGE", "SHARED_LEN_RANGE", "add_run", "capacity_html",
           "capacity_rows", "default_repeats", "defaults", "history_csv", "history_html", "labkit", "plot_prefix",
           "prefix_caching_available", "readout_html", "readout_rows", "run_prefix_lab"]
