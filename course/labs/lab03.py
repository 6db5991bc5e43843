"""Lab 3 (第3章ラボ): KV キャッシュあり・なしで同じ生成をして、1ステップの時間と KV の量を比べる。

Three layers, as in lab 1 (tests call the first two; the notebook stays thin):

1. Experiments, plain functions that return data::

       res = run_kv_lab("default", prompt_len=64, output_len=128, repeats=3)
       res["positions"], res["cached_ms"], res["no_cache_ms"]    # step time (median of repeats) per position
       res["cached_total_s"], res["no_cache_total_s"], res["tokens_equal"], res["kv_bytes"], res["warnings"]

   The same random prompt is generated greedily twice per repeat: by the engine (KV cache; step times are
   its per-token metrics: TTFT for the first token, then each inter-token latency) and by
   ``course.demos.no_cache.generate_no_cache`` on the engine's own model object (no cache: every step recomputes
   the whole sequence). ``positions[i]`` is the context length of decode step i (prompt + tokens so far).
2. Plots and tables: ``plot_steps(res)`` (step time against position, both paths; KV bytes held), the
   readout and the run history (``readout_html``, ``history_html``, ``history_csv``).
3. The panel: ``course.panels.build(3)`` (``course.panels.lab03.Lab3App``).

What a run shows, and the tasks' predictions decided by their runs: ``course.labs.lab03_explain``.

The lab kit supplies the thread policy, the load check before and over the run (``labkit.load.LoadWatch``: a
disturbed run's predictions print 判定できません), medians and min-max of repeats (``labkit.aggregate``), and
its spaced HTML tables. ``COURSE_QUICK=1`` shrinks the default run.
"""
from __future__ import annotations

import statistics
import time

from course import labkit
from course.labkit.charts import figure
from course.labkit.history import to_csv
from course.labkit.load import LoadWatch, was_disturbed
from course.labkit.measure import check_repeats
from course.labkit.tables import history_table, table_html, warnings_html
from course.demos.no_cache import generate_no_cache, next_token_logits
from course.runtime import (MODEL_CHOICES, apply_thread_policy, available_devices, check_device, check_int,
                            check_model, get_llm, is_quick, max_model_len, random_prompts)
from minimal_engine import SamplingParams

PROMPT_LEN_RANGE = (1, 512)
OUTPUT_LEN_RANGE = (2, 384)


def defaults() -> dict:
    """The panel's first settings: seconds on a laptop CPU (smaller with COURSE_QUICK)."""
    return dict(prompt_len=32, output_len=32) if is_quick() else dict(prompt_len=64, output_len=160)


def default_repeats() -> int:
    return 1 if is_quick() else 3


def check_settings(model="default", prompt_len=64, output_len=160, device="cpu") -> dict:
    """Validate the controls; ValueError (日本語/English) when a value is out of range or too long for the model."""
    s = dict(model=check_model(model),
             prompt_len=check_int(prompt_len, "prompt_len", "プロンプト長", *PROMPT_LEN_RANGE),
             output_len=check_int(output_len, "output_len", "出力長", *OUTPUT_LEN_RANGE),
             device=check_device(device))
    limit = max_model_len(s["model"])
    if s["prompt_len"] + s["output_len"] > limit:
        raise ValueError(f"プロンプト長＋出力長（{s['prompt_len'] + s['output_len']}）がこのモデルの上限 {limit} "
                         f"トークンを超えています。 / prompt_len + output_len exceeds the model's {limit} tokens")
    return s


def _kv_per_token(llm) -> int:
    return llm.model_config.kv_bytes_per_token(llm.engine.runner.kv_caches[0][0].element_size())


def _kv_shape(llm) -> dict:
    """What the lesson's formula 2 x layers x KV heads x head_dim x bytes takes, read from the engine's pool."""
    k = llm.engine.runner.kv_caches[0][0]                         # layer 0's K: [KV heads, slots, head_dim]
    return {"layers": len(llm.engine.runner.kv_caches), "kv_heads": k.shape[0], "head_dim": k.shape[2],
            "bytes": k.element_size()}


def _held_blocks(llm, prompt, positions: list[int]) -> list[int]:
    """Blocks the engine's BlockManager holds for one request once the K/V of ``positions[i]`` tokens are
    written, read from ``num_blocks - num_free_blocks`` after each step of an untimed pass (one token more,
    so the last position is not recorded after the step that frees them)."""
    eng, bm = llm.engine, llm.engine.block_manager
    rid = eng.add_request(prompt, SamplingParams(temperature=0, max_tokens=positions[-1] - len(prompt) + 2,
                                                 ignore_eos=True))
    seq, held = eng.seqs[rid], {}
    while eng.has_unfinished_requests():
        eng.step()
        if not seq.is_finished:
            held[seq.num_computed_tokens] = bm.num_blocks - bm.num_free_blocks
    return [held[x] for x in positions]


def _one_position_ms(llm, ids: list[int], repeats: int = 7) -> float:
    """Median ms of a no-cache step over ``ids`` alone (1 position: every weight is read for one row), after a warm-up."""
    next_token_logits(llm.model, ids)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        int(next_token_logits(llm.model, ids).argmax())
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def run_kv_lab(model="default", prompt_len=None, output_len=None, device="cpu", repeats=None, threads=None,
               seed=0, progress=None, load_check=True) -> dict:
    """Generate the same prompt with and without the KV cache, ``repeats`` times each (alternating).

    Returns the settings and: ``positions`` (context length of each decode step), ``cached_ms`` /
    ``no_cache_ms`` with ``_min`` / ``_max`` lists (median and min-max over repeats, per step),
    ``first_cached_ms`` / ``first_no_cache_ms`` (the first token: both process the prompt once),
    ``cached_total_s`` / ``no_cache_total_s`` (whole generation, median, with _min/_max),
    ``tokens_equal`` (every repeat gave the same greedy tokens on both paths), ``first_difference`` (index
    of the first differing token, or None), ``kv_bytes_per_token``, ``kv_bytes`` (bytes of K and V written up to
    each decode step: the formula), ``held_blocks`` / ``held_bytes`` (blocks the engine's BlockManager holds
    after each step, and their bytes: measured), ``slot_bytes`` (the pool's bytes per token slot, measured from
    its tensors), ``block_size``, ``pool_bytes`` (the engine's whole preallocated pool), ``tokens_processed``
    (positions computed: cached vs no cache), ``dtype``, ``threads``, ``load``, ``warnings``, ``weight_bytes``
    (the model's weights, read by every cached step), ``kv_shape`` (layers, KV heads, head_dim, bytes) and
    ``no_cache_one_ms`` (a no-cache step of the prompt's first token alone, median of 7: beside the line's intercept).
    """
    d = defaults()
    s = check_settings(model, d["prompt_len"] if prompt_len is None else prompt_len,
                       d["output_len"] if output_len is None else output_len, device)
    repeats = check_repeats(default_repeats() if repeats is None else repeats)
    threads = apply_thread_policy(threads)
    watch = LoadWatch(threads) if load_check else None       # the check before, and the load over the run
    llm = get_llm(s["model"], s["device"])
    p, n = s["prompt_len"], s["output_len"]
    prompt = random_prompts(llm, p, 1, seed)[0]
    params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
    cached, nocache, equal, first_diff, processed = [], [], True, None, 0
    for r in range(repeats):
        t = time.perf_counter()
        out = llm.generate([prompt], params, use_tqdm=False)[0]
        cached.append({"steps": [out.metrics.ttft * 1e3] + [x * 1e3 for x in out.metrics.itl],
                       "total": time.perf_counter() - t, "tokens": out.token_ids})
        cb = None if progress is None else (lambda i, _n, r=r: progress(r * n + i, repeats * n))
        t = time.perf_counter()
        nc = generate_no_cache(llm.model, prompt, n, on_step=cb)
        nocache.append({"steps": [x * 1e3 for x in nc["step_s"]], "total": time.perf_counter() - t,
                        "tokens": nc["token_ids"]})
        processed = nc["tokens_processed"]
        if out.token_ids != nc["token_ids"]:
            equal = False
            if first_diff is None:
                first_diff = next(i for i, (a, b) in enumerate(zip(out.token_ids, nc["token_ids"])) if a != b)
    res = {**s, "repeats": repeats, "threads": threads, "seed": seed, "dtype": str(llm.dtype).replace("torch.", ""),
           "positions": [p + i for i in range(1, n)], "tokens_equal": equal, "first_difference": first_diff,
           "tokens": cached[-1]["tokens"], "kv_bytes_per_token": _kv_per_token(llm),
           "pool_bytes": llm.engine.runner.kv_cache_bytes,
           "tokens_processed": {"cached": p + n - 1, "no_cache": processed},
           "weight_bytes": sum(t.numel() * t.element_size() for t in llm.model.parameters()),
           "kv_shape": _kv_shape(llm)}
    for name, runs in (("cached", cached), ("no_cache", nocache)):
        per_step = list(zip(*[r["steps"] for r in runs]))
        res[f"first_{name}_ms"] = statistics.median(per_step[0])
        res[f"{name}_ms"] = [statistics.median(v) for v in per_step[1:]]
        res[f"{name}_ms_min"] = [min(v) for v in per_step[1:]]
        res[f"{name}_ms_max"] = [max(v) for v in per_step[1:]]
        agg = labkit.aggregate([{"t": r["total"]} for r in runs], ("t",))     # median, t_min, t_max
        res.update({f"{name}_total_s": agg["t"], f"{name}_total_s_min": agg["t_min"],
                    f"{name}_total_s_max": agg["t_max"]})
    res["kv_bytes"] = [res["kv_bytes_per_token"] * x for x in res["positions"]]   # written (the formula)
    k = llm.engine.runner.kv_caches[0][0]
    res["slot_bytes"] = res["pool_bytes"] // k.shape[1]            # measured: the pool's bytes per token slot
    res["block_size"] = llm.engine.block_manager.block_size
    res["held_blocks"] = _held_blocks(llm, prompt, res["positions"])             # measured: blocks the engine holds
    res["held_bytes"] = [b * res["block_size"] * res["slot_bytes"] for b in res["held_blocks"]]
    res["no_cache_one_ms"] = _one_position_ms(llm, prompt[:1])      # a no-cache step of 1 position (all weights read)
    res["load"] = load = watch.finish() if watch else None          # after the last timed step: disturbed or not
    warnings = load["warning"].splitlines() if load and load["warning"] else []   # before, and over the run
    if not equal:
        warnings.append(f"キャッシュあり・なしで {first_diff + 1} トークン目から出力が違いました（2つの経路は別のカーネルで"
                        f"計算するので {res['dtype']} の丸めの差があり、1位と2位が僅差のステップで入れ替わることがあります。"
                        "BF16 では float32 より起きやすくなります）。")
    res["warnings"] = warnings
    return res


# ---------------------------------------------------------------- readouts
def _ms(res: dict, key: str, i: int) -> str:
    lo, hi = res[key + "_min"][i], res[key + "_max"][i]
    return f"{res[key][i]:.2f}" + (f"（{lo:.2f}〜{hi:.2f}）" if res["repeats"] > 1 else "")


def _total(res: dict, name: str) -> str:
    lo, hi = res[name + "_total_s_min"], res[name + "_total_s_max"]
    return f"{res[name + '_total_s']:.2f} s" + (f"（{lo:.2f}〜{hi:.2f}）" if res["repeats"] > 1 else "")


def readout_rows(res: dict) -> list[tuple[str, str, str]]:
    first, last = 0, len(res["positions"]) - 1
    kv = res["kv_bytes"][-1]
    tp = res["tokens_processed"]
    return [
        ("出力トークン", "一致" if res["tokens_equal"] else f"{res['first_difference'] + 1} トークン目から違う",
         "キャッシュあり・なしの貪欲生成（temperature 0）が同じトークン列か"),
        (f"1ステップ（位置 {res['positions'][first]}）キャッシュあり", _ms(res, "cached_ms", first) + " ms",
         "最初の Decode ステップ"),
        (f"1ステップ（位置 {res['positions'][first]}）キャッシュなし", _ms(res, "no_cache_ms", first) + " ms",
         f"{res['positions'][first]} トークンを全部計算し直す"),
        (f"1ステップ（位置 {res['positions'][last]}）キャッシュあり", _ms(res, "cached_ms", last) + " ms",
         "最後の Decode ステップ"),
        (f"1ステップ（位置 {res['positions'][last]}）キャッシュなし", _ms(res, "no_cache_ms", last) + " ms",
         f"{res['positions'][last]} トークンを全部計算し直す"),
        ("合計時間 キャッシュあり", _total(res, "cached"), "エンジンでの生成全体（Prefill を含む）"),
        ("合計時間 キャッシュなし", _total(res, "no_cache"), "毎ステップ全系列を計算し直した生成全体"),
        ("計算した位置の数", f"{tp['cached']:,} / {tp['no_cache']:,}", "キャッシュあり / なし（トークン×ステップの合計）"),
        ("書き込んだ K・V（最後）", f"{kv / 2**20:.2f} MiB", f"1トークン {res['kv_bytes_per_token']:,} B × "
         f"{res['positions'][last]} トークン（{res['dtype']}、式から計算）"),
        ("エンジンが保持する KV（最後）", f"{res['held_bytes'][-1] / 2**20:.2f} MiB",
         f"BlockManager が貸し出した {res['held_blocks'][-1]} ブロック × {res['block_size']} トークン（測定）"),
        ("確保済みの KV プール", f"{res['pool_bytes'] / 2**20:.0f} MiB", "エンジンが起動時に確保した全ブロックの合計"),
    ]


def readout_html(res: dict) -> str:
    note = f"<div style='color:#555'>繰り返し {res['repeats']} 回の中央値（最小〜最大）</div>" if res["repeats"] > 1 else ""
    return note + table_html(readout_rows(res), ("指標", "値", "意味")) + warnings_html(res["warnings"])


def format_readout(res: dict) -> str:
    head = f"プロンプト {res['prompt_len']} + 出力 {res['output_len']} トークン  [{res['model']}, {res['device']}, {res['dtype']}]"
    return "\n".join([head] + [f"  {name}: {value}" for name, value, _ in readout_rows(res)]
                     + [f"  {w}" for w in res["warnings"]])


HISTORY_FIELDS = ("run", "model", "device", "dtype", "threads", "prompt_len", "output_len", "repeats",
                  "first_step_cached_ms", "last_step_cached_ms", "first_step_no_cache_ms", "last_step_no_cache_ms",
                  "cached_total_s", "no_cache_total_s", "tokens_equal", "kv_mib_last", "warnings")


def add_run(history: list[dict], res: dict) -> dict:
    """Append one run's row (the fields in HISTORY_FIELDS) to ``history``; returns it."""
    row = {"run": max((r["run"] for r in history), default=0) + 1,
           **{k: res[k] for k in ("model", "device", "dtype", "threads", "prompt_len", "output_len", "repeats",
                                  "cached_total_s", "no_cache_total_s", "tokens_equal")},
           "first_step_cached_ms": res["cached_ms"][0], "last_step_cached_ms": res["cached_ms"][-1],
           "first_step_no_cache_ms": res["no_cache_ms"][0], "last_step_no_cache_ms": res["no_cache_ms"][-1],
           "kv_mib_last": res["held_bytes"][-1] / 2**20, "warnings": " ".join(res["warnings"])}
    history.append(row)
    return row


def history_html(history: list[dict], last: int = 15) -> str:
    head = ("#", "プロンプト", "出力", "繰り返し", "スレッド", "最初 あり [ms]", "最後 あり [ms]", "最初 なし [ms]",
            "最後 なし [ms]", "合計 あり [s]", "合計 なし [s]", "トークン一致", "KV [MiB]")
    rows = [(r["run"], r["prompt_len"], r["output_len"], r["repeats"], r["threads"], f"{r['first_step_cached_ms']:.2f}",
             f"{r['last_step_cached_ms']:.2f}", f"{r['first_step_no_cache_ms']:.2f}", f"{r['last_step_no_cache_ms']:.2f}",
             f"{r['cached_total_s']:.2f}", f"{r['no_cache_total_s']:.2f}", "はい" if r["tokens_equal"] else "いいえ",
             f"{r['kv_mib_last']:.2f}") for r in history[-last:]]
    return history_table(rows, head, set(range(1, len(head))))


def history_csv(history: list[dict], learner: str = "") -> str:
    """The history as CSV text (HISTORY_FIELDS, plus the learner's name): the lab kit's writer."""
    return to_csv(history, learner, fields=("learner",) + HISTORY_FIELDS)


# ---------------------------------------------------------------- plots
def plot_steps(res: dict):
    """Left: each decode step's time against its position, with and without the cache (median, min-max band).
    Right: bytes the engine holds (blocks, measured), K/V written (formula). A disturbed run's title says so."""
    fig, (ax1, ax2) = figure(11, 3.9, 1, 2, gridspec_kw={"width_ratios": [3, 2]})
    x = res["positions"]
    for name, label, color in (("no_cache", "キャッシュなし（毎回すべて計算し直す）", "tab:red"),
                               ("cached", "キャッシュあり（エンジン）", "tab:blue")):
        ax1.plot(x, res[f"{name}_ms"], color=color, label=label, linewidth=1.2)
        if res["repeats"] > 1:
            ax1.fill_between(x, res[f"{name}_ms_min"], res[f"{name}_ms_max"], color=color, alpha=0.15, linewidth=0)
    ax1.set_xlabel("位置（そのステップの文脈のトークン数）")
    ax1.set_ylabel("1ステップの時間 [ms]")
    ax1.set_ylim(0, None)
    ax1.set_title(f"合計: キャッシュあり {res['cached_total_s']:.2f} s ・ なし {res['no_cache_total_s']:.2f} s"
                  f"（トークン{'一致' if res['tokens_equal'] else '不一致'}）", fontsize=10)
    ax1.legend(fontsize=8, loc="upper left")
    ax1.grid(alpha=0.3)
    ax2.step(x, [b / 2**20 for b in res["held_bytes"]], where="post", color="tab:green",
             label=f"エンジンが保持（{res['block_size']} トークンのブロック単位、測定）")
    ax2.plot(x, [b / 2**20 for b in res["kv_bytes"]], color="tab:gray", linestyle="--", linewidth=1,
             label=f"書き込んだ K・V（1トークン {res['kv_bytes_per_token']:,} B、式）")
    ax2.set_xlabel("位置（トークン数）")
    ax2.set_ylabel("KV キャッシュの量 [MiB]")
    ax2.set_ylim(0, None)
    ax2.legend(fontsize=7, loc="upper left")
    ax2.set_title(f"KV キャッシュの量（{res['dtype']}）", fontsize=10)
    ax2.grid(alpha=0.3)
    name = "既定モデル" if res["model"] == "default" else res["model"]
    busy = "\n⚠ 計測のあいだにほかのプログラムが CPU を使っていました。この図の時間は乱れているかもしれません" \
        if was_disturbed(res.get("load")) else ""
    fig.suptitle(f"{name}・プロンプト {res['prompt_len']} + 出力 {res['output_len']} トークン・{res['threads']} スレッド"
                 + (f"・繰り返し {res['repeats']} 回の中央値" if res["repeats"] > 1 else "") + busy,
                 fontsize=11, color="firebrick" if busy else "black")
    return fig


__all__ = ["HISTORY_FIELDS", "MODEL_CHOICES", "OUTPUT_LEN_RANGE", "PROMPT_LEN_RANGE", "add_run", "available_devices",
           "check_settings", "default_repeats", "defaults", "format_readout", "history_csv", "history_html",
           "plot_steps", "readout_html", "readout_rows", "run_kv_lab"]
