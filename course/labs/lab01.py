"""Lab 1 (第1章ラボ): Prefill と Decode をタイムラインで見る。Built on the lab kit (``course.labkit``).

Three layers, each usable on its own (tests call the first two; notebooks stay thin):

1. Experiments, plain functions that return data (no widgets, no plots)::

       res = run_timeline("default", prompt_len=64, output_len=32, concurrency=4, device="cpu")
       res["ttft_ms"], res["tpot_ms"], res["tok_s"], res["total_tok_s"], res["max_itl_ms"], res["warnings"]
       res = run_timeline(prompt_len=64, output_len=32, concurrency=4, arrivals="late_long", late_prompt_len=448)
       m = measure_lab(prompt_len=64, output_len=32, concurrency=4, repeats=3)     # median and min-max
       rows = run_concurrency_sweep("default", prompt_len=64, output_len=32, concurrencies=[1, 2, 4, 8])

   ``concurrency`` requests of ``prompt_len`` random token ids (as InferenceX's client: random tokens, no
   prefix-cache hits) each generate exactly ``output_len`` tokens (``ignore_eos``); they arrive all at
   once, at a fixed rate, or with one long prompt arriving late (``course.labkit.arrivals``). Times come
   from the engine's per-request metrics; the run summary from ``minimal_engine.engine.metrics.summarize``.
2. Plots, functions of that data: ``plot_timeline(res)`` (marks the longest token gap, the ITL spike)
   and ``plot_sweep(rows)`` return a matplotlib ``Figure`` with Japanese labels.
3. The panel (``course.panels.build(1)``, ``course.panels.lab01.Lab1App``) only wires controls to 1 and 2 and the kit.

Models are loaded through ``course.runtime.get_llm`` (re-exported here), which keeps them loaded.
``COURSE_QUICK=1`` (set by ``make test``) shrinks the sweep and the repeats.
"""
from __future__ import annotations

from course import labkit
from course.labkit.arrivals import ARRIVALS, DEFAULT_RATE, arrival_plan, check_arrivals
from course.labkit.backends import local_backend, run_plan
from course.labkit.charts import figure, plot_sweeps
from course.labkit.load import LoadWatch
from course.labkit.tables import readout_html, readout_rows
from course.runtime import (MAX_CONTEXT, MAX_NUM_SEQS, MODEL_CHOICES, apply_thread_policy, available_devices,
                            check_device, check_int, check_model, clear_llm_cache, get_llm, is_quick, max_model_len,
                            random_prompts)

# ---------------------------------------------------------------- settings and their ranges
PROMPT_LEN_RANGE = (1, 1024)       # tokens
OUTPUT_LEN_RANGE = (2, 256)        # tokens; TPOT needs at least 2 output tokens
CONCURRENCY_RANGE = (1, MAX_NUM_SEQS)   # requests sent at the same time, at most one engine step's worth
MAX_SWEEP_POINTS = 8
DEFAULTS = dict(prompt_len=64, output_len=32, concurrency=4)   # seconds on a laptop CPU
assert PROMPT_LEN_RANGE[1] + OUTPUT_LEN_RANGE[1] <= MAX_CONTEXT


def sweep_concurrencies() -> list[int]:
    """Concurrencies of the default sweep: doubling, as InferenceX sweeps max concurrency."""
    return [1, 2, 4] if is_quick() else [1, 2, 4, 8, 16]


def default_repeats() -> int:
    """Repeats of the lab's panel: 3 (median and min-max), 1 with COURSE_QUICK."""
    return 1 if is_quick() else 3


# ---------------------------------------------------------------- input validation
def check_settings(model="default", prompt_len=DEFAULTS["prompt_len"], output_len=DEFAULTS["output_len"],
                   concurrency=DEFAULTS["concurrency"], device="cpu") -> dict:
    """Validate every control of the lab; return the settings as a dict, or raise ValueError (日本語/English)."""
    return dict(model=check_model(model),
                prompt_len=check_int(prompt_len, "prompt_len", "プロンプト長", *PROMPT_LEN_RANGE),
                output_len=check_int(output_len, "output_len", "出力長", *OUTPUT_LEN_RANGE),
                concurrency=check_int(concurrency, "concurrency", "同時リクエスト数", *CONCURRENCY_RANGE),
                device=check_device(device))


def check_concurrencies(concurrencies) -> list[int]:
    """A sweep's concurrencies: a list of ints or a text such as "1, 2, 4, 8"; 1 to MAX_SWEEP_POINTS distinct
    values in CONCURRENCY_RANGE, sorted."""
    if not isinstance(concurrencies, (str, list, tuple)):
        raise ValueError(f"同時リクエスト数の一覧（concurrencies）は「1, 2, 4」か整数のリストで指定してください。"
                         f" / concurrencies must be a list of integers or a text, got {concurrencies!r}")
    return labkit.parse_sweep_list(concurrencies, *CONCURRENCY_RANGE, max_points=MAX_SWEEP_POINTS)


def _late_len(arrivals: str, prompt_len: int, late_prompt_len) -> int | None:
    if arrivals != "late_long":
        return None
    n = 4 * prompt_len if late_prompt_len is None else late_prompt_len
    return check_int(n, "late_prompt_len", "遅れて届くプロンプトの長さ", *PROMPT_LEN_RANGE)


# ---------------------------------------------------------------- experiments
def run_timeline(model="default", prompt_len: int = DEFAULTS["prompt_len"],
                 output_len: int = DEFAULTS["output_len"], concurrency: int = DEFAULTS["concurrency"],
                 device: str = "cpu", seed: int = 0, progress=None, arrivals: str = "all",
                 rate: float = DEFAULT_RATE, late_prompt_len: int | None = None, threads: int | None = None,
                 load_check: bool = True) -> dict:
    """Send the requests and record when each one arrived, was prefilled and got each token.

    Returns a dict: the settings; ``requests`` (one dict per request with ``arrival_ms``,
    ``prefill_start_ms``, ``first_token_ms``, ``token_times_ms`` measured from the run's start, its own
    ``ttft_ms`` / ``tpot_ms``, ``late`` for the late long prompt); ``steps`` (each engine step's start/end
    and tokens out); and the run's ``ttft_ms``, ``tpot_ms``, ``itl_ms`` (medians), ``p99_itl_ms``,
    ``max_itl_ms`` and ``spike`` (where the longest gap was), ``tok_s`` (output tokens / wall time),
    ``total_tok_s`` (input + output), ``tok_s_per_user`` (1000 / median TPOT), ``duration_s``,
    ``num_preemptions``, ``summary`` (all of ``minimal_engine.engine.metrics.summarize``), ``threads``,
    ``load`` (``LoadWatch``: the check before and over the run, None without ``load_check``; pass it to
    ``verdicts``) and ``warnings`` (Japanese: the machine was busy before or during the run).
    ``progress(done_tokens, total_tokens)`` is called after every engine step.
    """
    s = check_settings(model, prompt_len, output_len, concurrency, device)
    arrivals = check_arrivals(arrivals)
    late = _late_len(arrivals, prompt_len, late_prompt_len)
    plan = arrival_plan(arrivals, concurrency, prompt_len, output_len, seed, rate, late)
    threads = apply_thread_policy(threads)
    watch = LoadWatch(threads) if load_check else None
    res = run_plan(local_backend(s["model"], s["device"]), plan, output_len, seed, progress, threads)
    load = watch.finish() if watch else None
    warnings = [load["warning"]] if load and load["warning"] else []
    return {**s, "arrivals": arrivals, "rate": rate if arrivals == "poisson" else None, "late_prompt_len": late,
            **res, "load": load, "warnings": warnings}


SWEEP_FIELDS = ("concurrency", "ttft_ms", "tpot_ms", "tok_s", "total_tok_s", "tok_s_per_user", "duration_s")


def run_concurrency_sweep(model="default", prompt_len: int = DEFAULTS["prompt_len"],
                          output_len: int = DEFAULTS["output_len"], concurrencies=None, device: str = "cpu",
                          seed: int = 0, progress=None) -> list[dict]:
    """run_timeline at each concurrency (default: ``sweep_concurrencies()``), once each; one row per
    concurrency with the fields in SWEEP_FIELDS. ``progress(done_tokens, total_tokens)`` counts over the
    whole sweep. For repeats (median and min-max) and the sweep's self-check use ``sweep_lab``."""
    concurrencies = check_concurrencies(sweep_concurrencies() if concurrencies is None else concurrencies)
    check_settings(model, prompt_len, output_len, concurrencies[0], device)
    total = output_len * sum(concurrencies)
    rows, before = [], 0
    for c in concurrencies:
        cb = None if progress is None else (lambda d, _t, b=before: progress(b + d, total))
        res = run_timeline(model, prompt_len, output_len, c, device, seed, cb, load_check=False)
        rows.append({k: res[k] for k in SWEEP_FIELDS})
        before += output_len * c
    return rows


def measure_lab(model="default", prompt_len=DEFAULTS["prompt_len"], output_len=DEFAULTS["output_len"],
                concurrency=DEFAULTS["concurrency"], device="cpu", repeats=None, arrivals="all",
                rate=DEFAULT_RATE, late_prompt_len=None, threads=None, seed=0, progress=None, backend=None) -> dict:
    """``labkit.measure`` with this lab's checks: ``repeats`` runs (default ``default_repeats()``); the
    median and min-max of every metric, ``runs`` (each run's timeline), ``warnings``. ``backend``: a
    ``labkit.openai_backend(...)`` to measure a server instead of the local engine."""
    s = check_settings(model if backend is None else "default", prompt_len, output_len, concurrency, device)
    late = _late_len(check_arrivals(arrivals), prompt_len, late_prompt_len)
    backend = backend or local_backend(s["model"], s["device"])
    return labkit.measure(backend, prompt_len, output_len, concurrency, default_repeats() if repeats is None else repeats,
                          arrivals, rate, late, seed, threads, progress)


def sweep_lab(model="default", prompt_len=DEFAULTS["prompt_len"], output_len=DEFAULTS["output_len"],
              concurrencies=None, device="cpu", repeats=None, arrivals="all", rate=DEFAULT_RATE,
              late_prompt_len=None, threads=None, seed=0, progress=None, backend=None) -> dict:
    """``labkit.sweep`` with this lab's checks: ``rows`` (median and min-max per concurrency) and
    ``warnings`` (a busy machine; output tok/s falling by more than the repeats' spread)."""
    concurrencies = check_concurrencies(sweep_concurrencies() if concurrencies is None else concurrencies)
    s = check_settings(model if backend is None else "default", prompt_len, output_len, concurrencies[0], device)
    late = _late_len(check_arrivals(arrivals), prompt_len, late_prompt_len)
    backend = backend or local_backend(s["model"], s["device"])
    return labkit.sweep(backend, prompt_len, output_len, concurrencies, default_repeats() if repeats is None else repeats,
                        arrivals, rate, late, seed, threads, progress)


def timeline_of(m: dict, repeat: int = -1) -> dict:
    """One repeat of a ``measure_lab`` result, with the settings, for ``plot_timeline``."""
    return {**{k: v for k, v in m.items() if k != "runs"}, **m["runs"][repeat]}


# ---------------------------------------------------------------- readouts
def _width(text: str) -> int:
    """Columns ``text`` takes in a monospace font (full-width characters take two)."""
    import unicodedata
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def format_readout(res: dict) -> str:
    """The metrics of a run (or of ``measure_lab``: median and min-max) as plain text."""
    head = (f"{res['concurrency']} リクエスト × (プロンプト {res['prompt_len']} + 出力 {res['output_len']} トークン)"
            f"  [{res['model']}, {res['device'] or res.get('backend', '')}"
            + (f", {res['dtype']}" if res.get("dtype") else "") + "]")
    if res.get("late_prompt_len"):
        head += f"\n  遅れて届いた長いプロンプト: {res['late_prompt_len']} トークン"
    if res.get("repeats", 1) > 1:
        head += f"\n  繰り返し {res['repeats']} 回の中央値（最小〜最大）"
    width = max(_width(name) for name, _, _ in readout_rows(res)) + 2
    lines = [f"  {name}{' ' * (width - _width(name))}: {value}" for name, value, _ in readout_rows(res)]
    return "\n".join([head] + lines + [f"  {w}" for w in res.get("warnings", [])])


def format_sweep(rows: list[dict]) -> str:
    """A sweep's rows as plain text (medians)."""
    lines = [f"{'同時リクエスト数':>8} {'TTFT[ms]':>9} {'TPOT[ms]':>9} {'tok/s（出力）':>12} {'合計 tok/s':>10} {'tok/s/user':>10}"]
    lines += [f"{r['concurrency']:>16} {r['ttft_ms']:9.1f} {r['tpot_ms']:9.1f} {r['tok_s']:14.1f} "
              f"{r['total_tok_s']:12.1f} {r['tok_s_per_user']:10.1f}" for r in rows]
    return "\n".join(lines)


def sweep_html(rows: list[dict]) -> str:
    """A sweep's rows as a spaced HTML table (median, and min-max when repeated)."""
    from course.labkit.tables import spread, table_html
    body = [(r["concurrency"], spread(r, "ttft_ms"), spread(r, "tpot_ms"), spread(r, "p99_itl_ms") if "p99_itl_ms" in r
             else "-", spread(r, "tok_s"), spread(r, "total_tok_s"), spread(r, "tok_s_per_user")) for r in rows]
    return table_html(body, ("同時リクエスト数", "TTFT [ms]", "TPOT [ms]", "ITL p99 [ms]", "tok/s（出力）", "合計 tok/s", "tok/s/user"),
                      right=set(range(7)))


# ---------------------------------------------------------------- plots
def _bar_label(server: bool, late: bool) -> str:
    what = "到着〜最初のトークン（サーバー内の待ち＋Prefill）" if server else "Prefill（プロンプト処理）"
    return f"遅れて届いた長いプロンプトの{what}" if late else what


def plot_timeline(res: dict, max_rows: int = 32):
    """One row per request: grey = waiting, orange bar = prefill (until the first token), blue ticks = each
    output token, a triangle = a request arriving after the start; a red band marks the longest gap
    between two tokens (the ITL spike) when it is 3x the median. Returns a matplotlib Figure."""
    reqs = res["requests"][:max_rows]
    fig, ax = figure(9, 1.9 + 0.32 * len(reqs))
    labeled = set()
    server = res.get("backend") == "openai"

    def label(name):                    # each legend entry once
        if name in labeled:
            return None
        labeled.add(name)
        return name

    end = max(r["token_times_ms"][-1] for r in reqs)
    for r in reqs:
        y = r["index"]
        if r["prefill_start_ms"] - r["arrival_ms"] > 0.01 * end:       # waited visibly before its prefill
            ax.broken_barh([(r["arrival_ms"], r["prefill_start_ms"] - r["arrival_ms"])], (y - 0.3, 0.6), color="0.85",
                           label=label("待ち（キュー）"))
        ax.broken_barh([(r["prefill_start_ms"], r["first_token_ms"] - r["prefill_start_ms"])], (y - 0.3, 0.6),
                       color="tab:purple" if r["late"] else "tab:orange",
                       label=label(_bar_label(server, r["late"])))
        ax.vlines(r["token_times_ms"][1:], y - 0.35, y + 0.35, color="tab:blue", linewidth=0.8,
                  label=label("Decode（1トークンごと）"))
        ax.plot([r["first_token_ms"]], [y], marker="o", color="tab:red", markersize=4, linestyle="none",
                label=label("最初のトークン（TTFT）"))
        if r["arrival_ms"] > 0.005 * end:
            ax.plot([r["arrival_ms"]], [y], marker=">", color="black", markersize=5, linestyle="none",
                    label=label("到着"))
    spike = res.get("spike")
    if spike and res.get("max_itl_ms", 0) > 3 * res.get("itl_ms", float("inf")):
        ax.axvspan(spike["start_ms"], spike["end_ms"], color="tab:red", alpha=0.15,
                   label=label(f"いちばん長いトークン間隔（ITL 最大 {res['max_itl_ms']:.0f} ms）"))
    ax.set_yticks([r["index"] for r in reqs], [f"#{r['index']}" + (" 長" if r["late"] else "") for r in reqs])
    ax.invert_yaxis()
    ax.set_xlabel("実行開始からの時間 [ms]")
    ax.set_ylabel("リクエスト")
    shown = "" if len(reqs) == len(res["requests"]) else f"（先頭の {len(reqs)} 件を表示）"
    late = f" ＋ 遅れて長いプロンプト {res['late_prompt_len']}" if res.get("late_prompt_len") else ""
    ax.set_title(f"プロンプト {res['prompt_len']} トークン × 出力 {res['output_len']} トークン × "
                 f"同時 {res['concurrency']} リクエスト{late}{shown}\nTTFT {res['ttft_ms']:.0f} ms ・ TPOT "
                 f"{res['tpot_ms']:.1f} ms ・ ITL p99 {res['p99_itl_ms']:.0f} ms / 最大 {res['max_itl_ms']:.0f} ms"
                 f" ・ {res['tok_s']:.0f} tok/s（出力）・ {res['tok_s_per_user']:.1f} tok/s/user", fontsize=10)
    ax.set_xlim(0, end * 1.02)
    fig.legend(loc="outside lower center", ncols=3, fontsize=8)
    return fig


def plot_sweep(rows: list[dict], label: str = "このスイープ"):
    """Output tok/s (y) against interactivity (tok/s/user, x), one point per concurrency, as on
    InferenceX's charts: up is cheaper, right is faster for each user. Returns a matplotlib Figure."""
    return plot_sweeps([rows], [label])


__all__ = ["ARRIVALS", "CONCURRENCY_RANGE", "DEFAULTS", "MODEL_CHOICES", "OUTPUT_LEN_RANGE", "PROMPT_LEN_RANGE",
           "available_devices", "check_concurrencies", "check_settings", "clear_llm_cache", "default_repeats",
           "format_readout", "format_sweep", "get_llm", "is_quick", "max_model_len", "measure_lab",
           "plot_sweep", "plot_timeline", "random_prompts", "readout_html", "run_concurrency_sweep",
           "run_timeline", "sweep_concurrencies", "sweep_html", "sweep_lab", "timeline_of"]
