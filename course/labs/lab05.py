"""Lab 5 (第5章ラボ): 同じリクエストの流れを、連続バッチング・静的バッチング・transformers の generate で処理して比べる。

Plain functions (tests call them; the notebook stays thin)::

    res = run_batching_lab(prompt_len=64, concurrency=4, num_requests=16, output_len=64)
    res["policies"]["continuous"]["tok_s"], res["policies"]["static"]["tok_s"], res["policies"]["hf_static"]["tok_s"]
    res["policies"]["continuous"]["ttft_ms_list"], res["policies"]["static"]["goodput_rps"]

The stream: ``num_requests`` random prompts of ``prompt_len`` tokens; output lengths uniform in
[output_len / 4, output_len] (seeded), so that members of a static batch finish at different times. The
same token ids and lengths go through

* ``continuous``: the engine, ``LLM(max_num_seqs=concurrency)`` (continuous batching, its default);
* ``static``: the same engine with ``batching="static"``: groups of ``concurrency`` run to completion;
* ``hf_static``: transformers ``generate`` on static batches of ``concurrency``
  (``minimal_engine.bench.hf_baselines.run_hf_static``, which pads left to the longest prompt: every prompt
  here has ``prompt_len`` tokens, so no padding is added; its TTFT counts from each batch's start).

Arrivals: all at once (``rate=None``) or Poisson at ``rate`` requests/s (engine policies; transformers
takes the batches as they are). ``kv_blocks`` > 0 shrinks the engine's KV pool to that many blocks to
show preemptions. Every policy is run ``repeats`` times (alternating); figures are medians.
``prefill_step_share`` (engine policies): the share of decode steps that also ran a prompt's
prefill (such a step is heavier, and it enters TPOT); ``lab05_explain`` holds the tasks' predictions.
``engine_kernels``: the engine's Linear kernels (``course.labkit.hf_gap.kernels_of``), for the transformers gap;
``linear_ms``: those layers timed at 1-8 rows (``course.labkit.linear_rows``), for a step time that falls with the batch.
"""
from __future__ import annotations

import random
import statistics
import time

from course.labkit.hf_gap import kernels_of
from course.labkit.history import add_variant_rows, to_csv
from course.labkit.load import LoadWatch
from course.labkit.measure import check_repeats
from course.labkit.tables import history_table, table_html, warnings_html
from course.labs import lab05_plots
from course.labs.lab05_plots import plot_run
from course.labkit.linear_rows import linear_ms
from course.runtime import apply_thread_policy, cached_llm, check_device, check_int, get_llm, is_quick, random_prompts
from minimal_engine import LLM, SamplingParams
from minimal_engine import calculators as calc
from minimal_engine.engine.metrics import summarize

PROMPT_LEN_RANGE = (1, 512)
CONCURRENCY_RANGE = (1, 32)
NUM_REQUESTS_RANGE = (1, 128)
OUTPUT_LEN_RANGE = (4, 256)
# The chapter's SLO (lesson 5 §5, the lab's code cells and the panel's default): TTFT ≤ 1 s, TPOT ≤ 200 ms
SLO = {"ttft_slo_ms": 1000, "tpot_slo_ms": 200}
TTFT_SLO_RANGE, TPOT_SLO_RANGE = (50, 10_000), (5, 1000)
POLICIES = {"continuous": "連続バッチング（エンジン）", "static": "静的バッチング（エンジン）",
            "hf_static": "transformers generate（静的バッチ）"}


def defaults() -> dict:
    if is_quick():
        return dict(prompt_len=32, concurrency=4, num_requests=8, output_len=24)
    return dict(prompt_len=64, concurrency=4, num_requests=16, output_len=64)


def default_repeats() -> int:
    return 1 if is_quick() else 3


def _engine(batching: str, concurrency: int, kv_blocks: int, device: str):
    def make():
        base = get_llm("default", device)
        kw = dict(num_kv_blocks=kv_blocks) if kv_blocks else dict(kv_cache_memory=base.engine.runner.kv_cache_bytes)
        llm = LLM(None, device=device, max_num_seqs=concurrency, max_model_len=base.engine.max_model_len,
                  batching=batching, **kw)
        llm.generate(random_prompts(llm, 16, 2), SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                     use_tqdm=False)                        # first steps are slow: not measured
        return llm
    return cached_llm(("lab5", "llm", batching, concurrency, kv_blocks, device), make)   # course.runtime's cache


def _hf_model(device: str):
    def make():
        from transformers.utils import logging as hf_logging

        from minimal_engine.bench.hf_baselines import hf_model_for
        hf_logging.disable_progress_bar()                   # no "Loading weights" bar in the notebooks
        return hf_model_for(get_llm("default", device))
    return cached_llm(("lab5", "hf", device), make)


def _run_engine(llm, prompts, lens, offsets) -> dict:
    """Add each request at its arrival time, step the engine until all finish; summary + per-request lists."""
    engine, outs, ids, pending = llm.engine, {}, {}, list(range(len(prompts)))
    decode_steps = mixed_steps = 0              # steps with a decode; those that also ran a prefill
    t0 = time.perf_counter()
    while pending or len(outs) < len(ids):
        now = time.perf_counter()
        for i in [i for i in pending if t0 + offsets[i] <= now]:
            ids[i] = engine.add_request(prompts[i], SamplingParams(temperature=0, max_tokens=lens[i], ignore_eos=True),
                                        arrival_time=t0 + offsets[i])
            pending.remove(i)
        if not engine.has_unfinished_requests():
            time.sleep(max(0.0, min(t0 + offsets[i] for i in pending) - time.perf_counter()))
            continue
        step = engine.step()
        if any(len(o.token_ids) > 1 for o in step):                 # someone decoded in this step
            decode_steps += 1                   # more tokens than outputs: a prompt's chunk ran too
            mixed_steps += engine.last_step.num_scheduled_tokens > len(step)
        outs.update((o.request_id, o) for o in step if o.finished)
    metrics = [outs[ids[i]].metrics for i in range(len(prompts))]
    last = max(m.token_times[-1] for m in metrics)
    res = summarize(metrics, duration=last - t0)
    res["ttft_ms_list"] = [m.ttft * 1e3 for m in metrics]
    res["tpot_ms_list"] = [m.tpot * 1e3 if m.tpot is not None else float("nan") for m in metrics]
    res["num_preemptions"] = sum(m.num_preemptions for m in metrics)
    res["tokens"] = [outs[ids[i]].token_ids for i in range(len(prompts))]
    res["prefill_step_share"] = mixed_steps / decode_steps if decode_steps else 0.0
    return res


def run_batching_lab(prompt_len=None, concurrency=None, num_requests=None, output_len=None, device="cpu",
                     repeats=None, threads=None, rate=None, kv_blocks=0, ttft_slo_ms=SLO["ttft_slo_ms"],
                     tpot_slo_ms=SLO["tpot_slo_ms"],
                     policies=tuple(POLICIES), seed=0, load_check=True) -> dict:
    d = defaults()
    p = check_int(d["prompt_len"] if prompt_len is None else prompt_len, "prompt_len", "プロンプト長", *PROMPT_LEN_RANGE)
    c = check_int(d["concurrency"] if concurrency is None else concurrency, "concurrency", "同時リクエスト数",
                  *CONCURRENCY_RANGE)
    n = check_int(d["num_requests"] if num_requests is None else num_requests, "num_requests", "リクエスト数",
                  *NUM_REQUESTS_RANGE)
    o = check_int(d["output_len"] if output_len is None else output_len, "output_len", "出力長", *OUTPUT_LEN_RANGE)
    kv_blocks = check_int(kv_blocks, "kv_blocks", "KV ブロック数", 0, 100_000)
    device, repeats = check_device(device), check_repeats(default_repeats() if repeats is None else repeats)
    unknown = [x for x in policies if x not in POLICIES]
    if unknown:
        raise ValueError(f"方式 {unknown} はありません（{list(POLICIES)}）。 / unknown policies {unknown}")
    threads = apply_thread_policy(threads)
    watch = LoadWatch(threads) if load_check else None     # the check before, and the load over the whole run
    base = get_llm("default", device)
    if p + o > base.engine.max_model_len:
        raise ValueError(f"プロンプト長＋出力長（{p + o}）がモデルの上限 {base.engine.max_model_len} を超えています。"
                         f" / prompt_len + output_len exceeds max_model_len")
    if kv_blocks and kv_blocks * base.engine.config.block_size < p + o:
        raise ValueError("KV ブロックが少なすぎて1件も入りません。 / kv_blocks too small for one request")
    rng = random.Random(seed)
    lens = [rng.randint(max(1, o // 4), o) for _ in range(n)]
    prompts = random_prompts(base, p, n, seed)
    offsets, t = [], 0.0
    for _ in range(n):
        offsets.append(t)
        t += rng.expovariate(rate) if rate else 0.0
    runs = {k: [] for k in policies}
    for _ in range(repeats):
        for k in policies:
            if k == "hf_static":
                from minimal_engine.bench.hf_baselines import run_hf_static
                from minimal_engine.bench.workload import BenchRequest
                reqs = [BenchRequest(pr, ln) for pr, ln in zip(prompts, lens)]
                runs[k].append(run_hf_static(_hf_model(device), reqs, c, use_tqdm=False, warmup=not runs[k]))
            else:
                runs[k].append(_run_engine(_engine(k, c, kv_blocks, device), prompts, lens, offsets))
    out = {}
    for k, rs in runs.items():
        mid = sorted(rs, key=lambda r: r["output_throughput"])[len(rs) // 2]     # the median run by tok/s
        tok = [r["output_throughput"] for r in rs]
        row = {"label": POLICIES[k], "tok_s": statistics.median(tok), "tok_s_min": min(tok), "tok_s_max": max(tok),
               "tok_s_per_user": statistics.median(r["tok_s_per_user"] for r in rs),
               "ttft_ms": statistics.median(r["median_ttft_ms"] for r in rs),
               "p90_ttft_ms": statistics.median(r["p90_ttft_ms"] for r in rs),
               "tpot_ms": statistics.median(r["median_tpot_ms"] for r in rs), "duration_s": mid["duration"],
               "tpot_ms_min": min(r["median_tpot_ms"] for r in rs), "tpot_ms_max": max(r["median_tpot_ms"] for r in rs),
               "ttft_ms_list": mid.get("ttft_ms_list"), "tpot_ms_list": mid.get("tpot_ms_list"),
               "num_preemptions": mid.get("num_preemptions"), "tokens": mid.get("tokens"),
               "prefill_step_share": mid.get("prefill_step_share")}
        row["goodput_rps"] = (calc.goodput_rps(row["ttft_ms_list"], row["tpot_ms_list"], mid["duration"], ttft_slo_ms,
                                               tpot_slo_ms) if row["ttft_ms_list"] else float("nan"))
        out[k] = row
    res = {"prompt_len": p, "concurrency": c, "num_requests": n, "output_len": o, "output_lens": lens,
           "rate": rate, "kv_blocks": kv_blocks, "device": device, "repeats": repeats, "threads": threads,
           "ttft_slo_ms": ttft_slo_ms, "tpot_slo_ms": tpot_slo_ms, "policies": out, "load": None,
           "idle_share": calc.static_batches_idle_share(lens, c) if lens else 0.0}          # all groups, as the readings use
    engine = next((k for k in policies if k != "hf_static"), None)       # its Linear kernels, probed at load
    res["engine_kernels"] = kernels_of(_engine(engine, c, kv_blocks, device)) if engine else None
    res["linear_ms"] = linear_ms(_engine(engine, c, kv_blocks, device)) if engine and device == "cpu" else None
    if "continuous" in out and "static" in out:
        res["same_tokens"] = out["continuous"]["tokens"] == out["static"]["tokens"]
    res["load"] = load = watch.finish() if watch else None      # after the last timing (linear_ms)
    warnings = [load["warning"]] if load and load["warning"] else []
    if rate and "hf_static" in out:
        warnings.append("transformers の静的バッチは到着時刻を待たずにまとめて処理しています（到着レートは連続・静的のエンジンだけに効きます）。")
    res["warnings"] = warnings
    return res


# ---------------------------------------------------------------- readouts and history
def _v(x, fmt=".1f") -> str:
    return "—" if x is None or x != x else format(x, fmt)


HF_TTFT_NOTE = ("※ transformers の TTFT は各バッチの開始から数えた値です（前のバッチを待った時間を含みません。"
                "そのためグッドプットは計算しません）。エンジンの2方式はリクエストの到着から数えるので、TTFT は直接比べず、tok/s で比べてください。")


def _mark(k: str, text: str) -> str:
    """transformers' TTFT counts from its batch's start, not from the arrival: marked ※ wherever it is shown."""
    return f"{text} ※" if k == "hf_static" and text != "—" else text


def readout_html(res: dict) -> str:
    rows = []
    for k, r in res["policies"].items():
        span = f"（{r['tok_s_min']:.1f}〜{r['tok_s_max']:.1f}）" if res["repeats"] > 1 else ""
        rows.append((r["label"], f"{r['tok_s']:.1f}{span}", _v(r["tok_s_per_user"]), _mark(k, _v(r["ttft_ms"], ".0f")),
                     _mark(k, _v(r["p90_ttft_ms"], ".0f")), _v(r["tpot_ms"]), _mark(k, _v(r["goodput_rps"], ".2f")),
                     _v(r["num_preemptions"], "")))
    head = ("方式", "出力 tok/s", "tok/s/user", "TTFT 中央値 [ms]", "TTFT p90 [ms]", "TPOT [ms]",
            f"グッドプット [件/s]（TTFT≤{res['ttft_slo_ms']:.0f} ms, TPOT≤{res['tpot_slo_ms']:.0f} ms）", "プリエンプション")
    note = f"<div style='color:#555'>繰り返し {res['repeats']} 回の中央値（最小〜最大）</div>" if res["repeats"] > 1 else ""
    foot = f"<div style='color:#555;font-size:90%'>{HF_TTFT_NOTE}</div>" if "hf_static" in res["policies"] else ""
    return (note + table_html(rows, head, right=set(range(1, len(head))), whole_words=True) + foot
            + warnings_html(res["warnings"]))


HISTORY_FIELDS = ("run", "device", "threads", "prompt_len", "output_len", "concurrency", "num_requests", "rate",
                  "kv_blocks", "repeats", "ttft_slo_ms", "tpot_slo_ms", "policy", "tok_s",
                  "tok_s_min", "tok_s_max", "tok_s_per_user", "ttft_ms", "tpot_ms", "goodput_rps",
                  "num_preemptions")


def add_run(history: list[dict], res: dict) -> list[dict]:
    """One history row per policy of this run (same run number), with the run's warnings."""
    rows = add_variant_rows(history, res, HISTORY_FIELDS, "policy", res["policies"])
    for r in rows:
        r["warnings"] = " ".join(res.get("warnings", []))
    return rows


def _other_settings(r: dict) -> str:
    """The settings of a run that have no column of their own (repeats, threads, device, arrivals, KV pool)."""
    parts = [f"{r['repeats']}回", f"{r['threads'] or '-'}スレッド", r["device"]]
    parts += [f"到着 {r['rate']:g} 件/s" if r.get("rate") else "一斉到着"]
    parts += [f"KV {r['kv_blocks']} ブロック"] if r.get("kv_blocks") else []
    return "・".join(str(x) for x in parts)


def _tok_s(r: dict) -> str:
    """Median output tok/s, with the min to max over the repeats when there were several."""
    lo, hi = r.get("tok_s_min"), r.get("tok_s_max")
    span = f"（{lo:.1f}〜{hi:.1f}）" if (r.get("repeats") or 1) > 1 and lo is not None else ""
    return _v(r["tok_s"]) + span


def _noisy_at_one(rows: list[dict]) -> list[str]:
    """At concurrency 1 the two engine policies schedule alike: tok/s ranges that do not overlap
    mean the machine's load, not the policy, set the run's figures."""
    out = []
    for run in sorted({r["run"] for r in rows if r["concurrency"] == 1}):
        p = {r["policy"]: r for r in rows if r["run"] == run}
        c, s = p.get("continuous"), p.get("static")
        if c and s and c.get("tok_s_min") is not None and s.get("tok_s_min") is not None and (
                c["tok_s_max"] < s["tok_s_min"] or s["tok_s_max"] < c["tok_s_min"]):
            out.append(f"⚠ 実行 {run}: 同時リクエスト数 1 では連続と静的は同じ動きをするはずですが、出力 tok/s の"
                       f"幅が重なりません（連続 {_tok_s(c)}、静的 {_tok_s(s)}）。混み具合に左右された計測です。")
    return out


def history_html(history: list[dict], last: int = 24) -> str:
    """Every setting of each run (so that two runs that differ in one setting never look the same), then its
    figures (tok/s with its min to max) and ⚠ where the run was measured on a busy machine, its
    warnings below; transformers' TTFT and goodput marked ※ (counted from its batch's start)."""
    head = ("#", "方式", "プロンプト長", "出力長（最大）", "同時リクエスト数", "リクエスト数", "SLO TTFT / TPOT [ms]",
            "そのほかの設定", "出力 tok/s（最小〜最大）", "tok/s/user", "TTFT [ms]", "グッドプット [件/s]", "警告")
    shown = history[-last:]
    rows = [(r["run"], POLICIES[r["policy"]], r["prompt_len"], r["output_len"], r["concurrency"], r["num_requests"],
             f"{r['ttft_slo_ms']:.0f} / {r['tpot_slo_ms']:.0f}", _other_settings(r), _tok_s(r),
             _v(r["tok_s_per_user"]), _mark(r["policy"], _v(r["ttft_ms"], ".0f")),
             _mark(r["policy"], _v(r["goodput_rps"], ".2f")), "⚠" if r.get("warnings") else "")
            for r in shown]
    foot = (f"<div style='color:#555;font-size:90%'>{HF_TTFT_NOTE}</div>"
            if any(r["policy"] == "hf_static" for r in shown) else "")
    warned = {r["run"]: r["warnings"] for r in shown if r.get("warnings")}
    foot += warnings_html([f"実行 {run}: {w}" for run, w in warned.items()] + _noisy_at_one(shown))
    right = set(range(2, 7)) | set(range(8, len(head) - 1))
    return history_table(rows, head, right, "実行するとここに方式ごとに1行ずつ増えます", whole_words=True) + foot


def history_csv(history: list[dict], learner: str = "") -> str:
    """The history as CSV text (HISTORY_FIELDS, plus the learner's name): the lab kit's writer."""
    return to_csv(history, learner, fields=("learner",) + HISTORY_FIELDS + ("warnings",))


def plot_pareto(history: list[dict]):
    """Every run of the history: tok/s (bars: min to max) against tok/s/user, a line per policy."""
    return lab05_plots.plot_pareto(history, POLICIES)


__all__ = ["CONCURRENCY_RANGE", "HF_TTFT_NOTE", "HISTORY_FIELDS", "NUM_REQUESTS_RANGE", "OUTPUT_LEN_RANGE", "POLICIES",
           "PROMPT_LEN_RANGE", "add_run", "default_repeats", "defaults", "history_csv", "history_html",
           "plot_pareto", "plot_run", "readout_html", "run_batching_lab", "SLO", "TPOT_SLO_RANGE",
           "TTFT_SLO_RANGE"]
