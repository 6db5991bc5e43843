"""Lab 9 (第9章ラボ): Decode 中に長いプロンプトが届くと、何が起きるか。チャンク予算と Disaggregation で比べる。

Plain functions (tests call them; the notebook stays thin)::

    res = run_interference_lab(prompt_len=384, num_decodes=4, output_len=48, budgets=(16, 64, 512))
    res["setups"]["chunk_16"]["p99_itl_ms"], res["setups"]["chunk_512"]["long_ttft_ms"]
    res["setups"]["disagg"]["kv_bytes_per_request"], res["setups"]["disagg"]["itl_points"]

The stream (course.labkit.arrivals): ``num_decodes`` short requests (``SHORT_PROMPT_LEN`` tokens, ``output_len``
new tokens) arrive at once ("late_long") or at a Poisson rate ("poisson"); ``num_long`` long prompts of
``prompt_len`` tokens (``LONG_OUTPUT_LEN`` new tokens) arrive while they decode, each after a given number of
output tokens, so the timing holds on a fast or a slow machine. The same token ids go through

* ``chunk_B`` for each budget B: one engine, ``LLM(max_num_batched_tokens=B)``: a long prompt is prefilled in
  chunks of at most B tokens minus the step's decodes (chunked prefill; B >= prompt_len: all in one step);
* ``disagg``: ``minimal_engine.disagg.llm.DisaggregatedLLM``: prefill in a second process, KV handed to the decode
  engine (on this machine both processes share the same CPU cores, unlike two GPUs).

Per setup: ITL of the short requests over time, their p99 and max ITL, TTFT of the long prompts, TPOT,
output tok/s and tok/s/user (vLLM's formulas, minimal_engine.engine.metrics), the KV moved per long and per short
prompt (their mean mixes the two), the long prompts' first-token times and how many short requests decode at each
gap. The sentences and the tasks' verdicts printed from a result are in ``lab09_explain``. Greedy in float32: every setup gives the
same tokens (in bfloat16, different chunkings round differently and a random model's near-ties may flip).
Before any setup is timed, each engine runs the stream's shapes once, untimed (``warm_up``): a first call of a shape
(kernel set-up, fresh KV pages, allocator growth) then falls outside the measured p99.
"""
from __future__ import annotations

import statistics
import time
import timeit

from course.labkit.arrivals import arrival_plan, check_arrivals, check_rate
from course.labkit.load import LoadWatch
from course.labkit.measure import check_repeats
from course.labs.lab09_plots import (HISTORY_FIELDS, add_run, history_csv, history_html, plot_budget, plot_itl,
                                     plot_pareto, readout_html)
from course.runtime import (apply_thread_policy, cached_llm, check_device, check_int, check_model, clear_llm_cache,
                            engine_model_arg, get_llm, is_quick, max_model_len, random_prompts)
from minimal_engine import LLM, SamplingParams
from minimal_engine.engine.metrics import percentile, summarize

PROMPT_LEN_RANGE = (16, 1200)         # the long prompt (the default model: at most 504, its 512 positions)
NUM_DECODES_RANGE = (1, 16)
OUTPUT_LEN_RANGE = (8, 64)
NUM_LONG_RANGE = (1, 4)
BUDGET_RANGE = (8, 2048)
SHORT_PROMPT_LEN = 16
LONG_OUTPUT_LEN = 8
NUM_KV_BLOCKS = 256                   # 4,096 token slots: the largest stream fits without preemption
ARRIVAL_KINDS = ("late_long", "poisson")
PREFILL_THREADS = 1                   # Disaggregation's prefill process (the decode process gets the lab's threads)


def defaults() -> dict:
    if is_quick():
        return dict(prompt_len=256, num_decodes=3, output_len=24, num_long=1, budgets=(16, 512))
    return dict(prompt_len=384, num_decodes=4, output_len=48, num_long=2, budgets=(16, 32, 64, 128, 512))


def default_repeats() -> int:
    return 1


def _single(model: str, budget: int, device: str):
    """One engine per model and chunk budget (an engine's EngineConfig is fixed when it is built)."""
    def make():
        llm = LLM(engine_model_arg(model), dtype="float32", device=device, max_num_seqs=32, num_kv_blocks=NUM_KV_BLOCKS,
                  max_model_len=max_model_len(model), max_num_batched_tokens=budget)
        llm.generate(random_prompts(llm, 16, 2), SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                     use_tqdm=False)                        # first steps are slow: not measured
        return llm
    return cached_llm(("lab9", "single", model, device, budget), make).engine   # course.runtime's one cache


def _disagg(model: str, device: str):
    def make():
        from minimal_engine.disagg.llm import DisaggregatedLLM
        pair = DisaggregatedLLM(engine_model_arg(model), dtype="float32", device=device, prefill_threads=PREFILL_THREADS,
                                max_num_seqs=32, max_num_batched_tokens=max(BUDGET_RANGE), num_kv_blocks=NUM_KV_BLOCKS,
                                max_model_len=max_model_len(model))
        pair.generate(random_prompts(pair.llm, 16, 2), SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                      timeout=120)
        return pair
    return cached_llm(("lab9", "disagg", model, device), make)          # closed (its process stopped) when dropped


def close_engines() -> None:
    """Stop the disaggregated pair's prefill process (also done at exit) and forget the engines."""
    clear_llm_cache("lab9")


def build_stream(prompt_len: int, num_decodes: int, output_len: int, num_long: int = 1, arrivals: str = "late_long",
                 rate: float = 20.0, seed: int = 0, model: str = "default") -> list[dict]:
    """The requests of a run, from the lab kit's arrival plan: short decodes first, then the long prompts.
    Long prompt k (0-based) arrives once the run has produced (k + 1) / (num_long + 1) x num_decodes x output_len
    output tokens, counting every request's tokens (earlier long prompts' too; run_stream counts them all)."""
    base = get_llm(model, "cpu")
    plan = arrival_plan("poisson" if arrivals == "poisson" else "all", num_decodes, SHORT_PROMPT_LEN, output_len,
                        seed, rate)
    total = num_decodes * output_len
    for k in range(num_long):
        plan.append({"prompt_len": prompt_len, "offset_s": None, "late": True,
                     "after_tokens": max(1, total * (k + 1) // (num_long + 1))})
    shorts = random_prompts(base, SHORT_PROMPT_LEN, num_decodes, seed)
    longs = random_prompts(base, prompt_len, num_long, seed + 1)
    for req in plan:
        req["ids"] = longs.pop(0) if req["late"] else shorts.pop(0)
        req["max_tokens"] = LONG_OUTPUT_LEN if req["late"] else output_len
    return plan


def run_stream(runner, stream: list[dict]) -> dict:
    """Send the stream through `runner` (LLMEngine or DisaggregatedLLM: add_request / step), return its outputs
    in stream order and the arrival times (s after the start) of the long prompts."""
    outs, ids, pending, tokens = {}, {}, list(range(len(stream))), 0
    t0 = time.perf_counter()
    while pending or len(outs) < len(ids):
        now = time.perf_counter()
        due = [i for i in pending if (stream[i]["offset_s"] is not None and t0 + stream[i]["offset_s"] <= now)
               or (stream[i]["after_tokens"] is not None and tokens >= stream[i]["after_tokens"])]
        if not due and pending and not runner.has_unfinished_requests() and stream[pending[0]]["offset_s"] is None:
            due = [pending[0]]                  # nothing runs, so its token count would never come: send it now
        for i in due:
            r = stream[i]
            sp = SamplingParams(temperature=0, max_tokens=r["max_tokens"], ignore_eos=True)
            ids[i] = runner.add_request(r["ids"], sp, arrival_time=now if r["offset_s"] is None else t0 + r["offset_s"])
            pending.remove(i)
        if not runner.has_unfinished_requests():
            time.sleep(0.001)
            continue
        for o in runner.step():
            tokens += len(o.new_token_ids)
            if o.finished:
                outs[o.request_id] = o
    return {"t0": t0, "outputs": [outs[ids[i]] for i in range(len(stream))]}


def warm_up(runner, stream: list[dict], model: str) -> None:
    """One untimed pass of the run's shapes: a long prompt of the stream's length (other token ids) beside its short
    requests, all at once, so the chunk steps' first calls (kernel set-up for a new shape, first touch of the KV pages,
    allocator growth) happen before the timed run, not inside its p99."""
    longs = [r for r in stream if r["late"]]
    if not longs:
        return
    shorts = [r for r in stream if not r["late"]]
    warm = random_prompts(get_llm(model, "cpu"), len(longs[0]["ids"]), 1, seed=10_007)
    plan = [{"ids": r["ids"], "max_tokens": LONG_OUTPUT_LEN, "late": False, "offset_s": 0.0, "after_tokens": None}
            for r in shorts] + [{"ids": warm[0], "max_tokens": 2, "late": True, "offset_s": 0.0, "after_tokens": None}]
    run_stream(runner, plan)


def _measure(run: dict, stream: list[dict]) -> dict:
    t0, outs = run["t0"], run["outputs"]
    short = [o.metrics for o, r in zip(outs, stream) if not r["late"]]
    longs = [o.metrics for o, r in zip(outs, stream) if r["late"]]
    gaps = [g * 1e3 for m in short for g in m.itl]
    s = summarize([o.metrics for o in outs])
    kv = [getattr(o.metrics, "kv_transfer_bytes", 0) for o in outs]
    kv_s = [getattr(o.metrics, "kv_transfer_s", 0.0) * 1e3 for o in outs]
    late = [r["late"] for r in stream]
    spans = [(m.token_times[0], m.token_times[-1]) for m in short if m.token_times]
    ends = [t for m in short for t in m.token_times[1:]]         # each gap's end: how many short ones decode then
    return {"p99_itl_ms": percentile(gaps, 99), "max_itl_ms": max(gaps) if gaps else float("nan"), "itl_count": len(gaps),
            "median_itl_ms": percentile(gaps, 50), "tpot_ms": s["median_tpot_ms"],
            "long_ttft_ms": statistics.fmean(m.ttft * 1e3 for m in longs) if longs else float("nan"),
            "median_ttft_ms": s["median_ttft_ms"], "tok_s": s["output_throughput"], "tok_s_per_user": s["tok_s_per_user"],
            "duration_s": s["duration"], "itl_points": [(t - t0, (t - a) * 1e3) for m in short
                                                        for a, t in zip(m.token_times, m.token_times[1:])],
            "long_arrivals_s": [m.arrival_time - t0 for m in longs], "tokens": [o.token_ids for o in outs],
            "kv_bytes_per_request": statistics.fmean(kv) if any(kv) else 0.0,       # all requests mixed
            "kv_transfer_ms": statistics.fmean(kv_s),
            "kv_bytes_long": _mean_of(kv, late, True), "kv_bytes_short": _mean_of(kv, late, False),
            "kv_ms_long": _mean_of(kv_s, late, True), "kv_ms_short": _mean_of(kv_s, late, False),
            "long_first_token_s": [m.first_token_time - t0 for m in longs if m.first_token_time is not None],
            "long_prefill_done_s": [m.prefill_done_time - t0 if getattr(m, "prefill_done_time", None) is not None
                                    else None for m in longs if m.first_token_time is not None],   # Disaggregation
            **_handoff(longs),
            "mean_decoding": statistics.fmean(sum(a < t <= b for a, b in spans) for t in ends) if ends else float("nan")}


def _handoff(longs: list) -> dict:
    """Disaggregation only: a long prompt's TTFT split (means, ms) into arrival -> prefill done (the prefill process),
    the copy out + pipe (kv_transfer_s) and the rest (waiting in the decode side's inbox, inject_kv_blocks, admit)."""
    ms = [m for m in longs if getattr(m, "prefill_done_time", None) is not None]
    if not ms:
        return {}
    pre = [(m.prefill_done_time - m.arrival_time) * 1e3 for m in ms]
    kv = [m.kv_transfer_s * 1e3 for m in ms]
    queue = [(m.first_scheduled_time - m.arrival_time) * 1e3 for m in ms if m.first_scheduled_time is not None]
    return {"prefill_ms_long": statistics.fmean(pre), "admit_ms_long": statistics.fmean(
        m.ttft * 1e3 - a - b for m, a, b in zip(ms, pre, kv)),
        **({"queue_ms_long": statistics.fmean(queue)} if len(queue) == len(ms) else {})}   # arrival -> first scheduled


def copy_ms(nbytes: int, reps: int = 5) -> float:
    """One copy of nbytes inside this process (median of reps, ms): the byte copy alone, without pipe or threads."""
    src = bytearray(max(1, int(nbytes)))
    return statistics.median(timeit.repeat(lambda: bytes(src), number=1, repeat=reps)) * 1e3


def _mean_of(values: list, late: list[bool], want: bool) -> float:
    xs = [v for v, x in zip(values, late) if x == want]
    return statistics.fmean(xs) if xs else 0.0


def run_interference_lab(prompt_len=None, num_decodes=None, output_len=None, num_long=None, budgets=None,
                         disagg=True, arrivals="late_long", rate=20.0, model="default", device="cpu", repeats=None,
                         threads=None, seed=0, load_check=True) -> dict:
    d = defaults()
    model = check_model(model)
    p = check_int(d["prompt_len"] if prompt_len is None else prompt_len, "prompt_len", "プロンプト長", *PROMPT_LEN_RANGE)
    n = check_int(d["num_decodes"] if num_decodes is None else num_decodes, "num_decodes", "Decode 中のリクエスト数",
                  *NUM_DECODES_RANGE)
    o = check_int(d["output_len"] if output_len is None else output_len, "output_len", "出力長", *OUTPUT_LEN_RANGE)
    k = check_int(d["num_long"] if num_long is None else num_long, "num_long", "長いプロンプトの数", *NUM_LONG_RANGE)
    budgets = d["budgets"] if budgets is None else budgets
    if not budgets or not isinstance(budgets, (list, tuple)):
        raise ValueError("チャンク予算（budgets）は1つ以上の整数のリストで指定してください。 / budgets must be a non-empty list")
    budgets = sorted({check_int(b, "budget", "チャンク予算", *BUDGET_RANGE) for b in budgets})
    if arrivals not in ARRIVAL_KINDS:
        check_arrivals(arrivals)             # a kind the lab kit knows but this lab does not use: say which
        raise ValueError(f"このラボの到着のしかたは {ARRIVAL_KINDS} です。 / arrivals must be one of {ARRIVAL_KINDS}")
    rate = check_rate(rate)
    if p + LONG_OUTPUT_LEN > max_model_len(model):
        raise ValueError(f"プロンプト長＋{LONG_OUTPUT_LEN}（{p + LONG_OUTPUT_LEN}）がモデルの上限 {max_model_len(model)} を"
                         f"超えています。 / prompt_len + {LONG_OUTPUT_LEN} exceeds the model's max_model_len")
    device, repeats = check_device(device), check_repeats(default_repeats() if repeats is None else repeats)
    threads = apply_thread_policy(threads)
    watch = LoadWatch(threads) if load_check else None      # the check before, and the load over the run
    stream = build_stream(p, n, o, k, arrivals, rate, seed, model)
    setups = {f"chunk_{b}": (lambda b=b: _single(model, b, device)) for b in budgets}
    if disagg:
        setups["disagg"] = lambda: _disagg(model, device)
    runs = {name: [] for name in setups}
    for name, get in setups.items():
        warm_up(get(), stream, model)                         # each engine meets the run's shapes before it is timed
    for _ in range(repeats):
        for name, get in setups.items():
            runs[name].append(_measure(run_stream(get(), stream), stream))
    load = watch.finish() if watch else None                 # disturbed: its verdicts print 判定できません
    out = {}
    for name, rs in runs.items():
        row = sorted(rs, key=lambda r: r["p99_itl_ms"])[len(rs) // 2]          # the median run by p99 ITL
        row["label"] = "Disaggregation（2プロセス）" if name == "disagg" else f"1エンジン・予算 {name[6:]}"
        row["budget"] = None if name == "disagg" else int(name[6:])
        out[name] = row
    if out.get("disagg", {}).get("kv_bytes_long"):
        out["disagg"]["copy_ms_long"] = copy_ms(out["disagg"]["kv_bytes_long"])
    tokens = [r["tokens"] for r in out.values()]
    warnings = [load["warning"]] if load and load["warning"] else []
    per_token = get_llm(model, "cpu").model_config.kv_bytes_per_token(4)            # float32, as the engines here
    return {"model": model, "prompt_len": p, "short_prompt_len": SHORT_PROMPT_LEN, "kv_bytes_per_token": per_token,
            "num_decodes": n, "output_len": o, "num_long": k, "budgets": budgets,
            "arrivals": arrivals, "rate": rate, "device": device, "repeats": repeats, "threads": threads,
            "prefill_threads": PREFILL_THREADS,
            "setups": out, "same_tokens": all(t == tokens[0] for t in tokens), "load": load, "warnings": warnings}


plot_run = plot_budget               # the panel's chart: p99 ITL and TTFT against the budget


__all__ = ["BUDGET_RANGE", "HISTORY_FIELDS", "NUM_DECODES_RANGE", "OUTPUT_LEN_RANGE", "PROMPT_LEN_RANGE", "add_run",
           "build_stream", "close_engines", "defaults", "history_csv", "history_html", "plot_budget",
           "plot_itl", "plot_pareto", "plot_run", "readout_html", "run_interference_lab", "run_stream", "warm_up"]
