"""Lab 8 (第8章ラボ): 投機的デコードの k と方式を変えて、提案の採用率・受理率 α・受理長・tok/s・TPOT を投機なしと比べる。

Plain functions (tests call them; the notebook stays thin)::

    res = run_spec_lab(prompt_len=64, k=4, concurrency=1, output_len=64, text="repetitive")
    res["methods"]["ngram"]["speedup"], res["methods"]["draft_model"]["acceptance_rate"]
    res["methods"]["none"]["tpot_ms"], res["same_tokens"]

The same prompts go through three engines of the default model, alternating, ``repeats`` times each (medians).
``speedup``: median of the paired ratios (repeat i over no speculation's repeat i), with its min / max:

* ``none``: no speculation (the baseline);
* ``ngram``: ``{"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 3, "prompt_lookup_min": 1}``;
* ``draft_model``: the shipped draft (``minimal_engine/draft_model``, distilled from the default model) proposes k;
* ``draft_model_lm`` (only when asked for in ``methods``): the earlier draft (``minimal_engine/draft_model_lm``,
  trained on the corpus alone, not distilled): the counter-example whose acceptance is too low to pay for it.

``text``: ``"repetitive"`` (each prompt is one sentence repeated: the continuation copies it, where n-gram
lookup shines) or ``"ordinary"`` (a different passage per request, no repetition in the prompt). Every request
has ``prompt_len`` tokens and generates ``output_len`` tokens (ignore_eos); all ``concurrency`` requests start
at once. ``temperature`` 0 is greedy (then every method gives the same tokens: ``same_tokens``); above 0 the
rejection sampler keeps the target's distribution (the tokens differ run to run, the distribution does not).
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

from course.labkit.history import add_variant_rows, to_csv
from course.labkit.load import LoadWatch
from course.labkit.measure import check_repeats
from course.labkit.spec import alpha_from_length
from course.labkit.tables import history_table, table_html, warnings_html
from course.labs.lab08_plots import METHODS, TEXTS, plot_run   # the labels live with the figure
from course.runtime import apply_thread_policy, cached_llm, check_device, check_int, is_quick
from minimal_engine import LLM, SamplingParams
from minimal_engine.features.spec_decode.decoder import expected_speedup, expected_tokens_per_step

PROMPT_LEN_RANGE = (8, 256)
K_RANGE = (1, 8)
CONCURRENCY_RANGE = (1, 16)
OUTPUT_LEN_RANGE = (8, 192)
DEFAULT_METHODS = ("none", "ngram", "draft_model")
DRAFT_LM = Path(__file__).resolve().parents[2] / "minimal_engine" / "draft_model_lm"
# 青空文庫（パブリックドメイン）の冒頭の一節: 夏目漱石「吾輩は猫である」「草枕」「坊っちゃん」、太宰治「走れメロス」
PASSAGES = [
    "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。何でも薄暗いじめじめした所でニャーニャー"
    "泣いていた事だけは記憶している。吾輩はここで始めて人間というものを見た。",
    "山路を登りながら、こう考えた。智に働けば角が立つ。情に棹させば流される。意地を通せば窮屈だ。とかくに人の世は"
    "住みにくい。住みにくさが高じると、安い所へ引き越したくなる。",
    "親譲りの無鉄砲で小供の時から損ばかりしている。小学校に居る時分学校の二階から飛び降りて一週間ほど腰を抜かした"
    "事がある。なぜそんな無闇をしたと聞く人があるかも知れぬ。",
    "メロスは激怒した。必ず、かの邪智暴虐の王を除かなければならぬと決意した。メロスには政治がわからぬ。メロスは、"
    "村の牧人である。笛を吹き、羊と遊んで暮して来た。",
]


def defaults() -> dict:
    return dict(prompt_len=48, k=4, concurrency=1, output_len=24) if is_quick() else dict(prompt_len=64, k=4, concurrency=1, output_len=64)


def default_repeats() -> int:
    return 1 if is_quick() else 3


def spec_config(method: str, k: int) -> dict | None:
    if method == "none":
        return None
    if method == "ngram":
        # min given explicitly: max alone would mean min = max (3-grams only), as in vLLM
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    if method == "draft_model_lm":
        return {"method": "draft_model", "num_speculative_tokens": k, "model": str(DRAFT_LM)}
    return {"method": "draft_model", "num_speculative_tokens": k}


def _engine(method: str, k: int, concurrency: int, device: str) -> LLM:
    def make():
        llm = LLM(None, device=device, max_num_seqs=concurrency, kv_cache_memory=64 << 20,
                  speculative_config=spec_config(method, k))
        llm.generate(["吾輩は猫である。"], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True),
                     use_tqdm=False)                  # first steps are slow: not measured
        return llm
    # course.runtime's one bounded cache (a k sweep no longer keeps one engine per k and concurrency)
    return cached_llm(("lab8", method, k if method != "none" else 0, concurrency, device), make)


def make_prompts(llm: LLM, text: str, prompt_len: int, concurrency: int) -> list[list[int]]:
    """``concurrency`` prompts of exactly ``prompt_len`` tokens: the first sentence of a passage repeated
    ("repetitive") or the passages one after another, from a different one for each request ("ordinary")."""
    if text not in TEXTS:
        raise ValueError(f"文章の種類は {list(TEXTS)} のどれかです。 / text must be one of {list(TEXTS)}, got {text!r}")
    prompts = []
    for i in range(concurrency):
        first = PASSAGES[i % len(PASSAGES)]
        if text == "repetitive":                       # its first sentence, over and over
            unit = llm.tokenizer.encode(first[:first.index("。") + 1])
            ids = unit * (prompt_len // len(unit) + 1)
        else:
            ids = llm.tokenizer.encode("".join(PASSAGES[(i + j) % len(PASSAGES)] for j in range(len(PASSAGES))))
        if len(ids) < prompt_len:
            raise ValueError(f"ふつうの文章は {len(ids)} トークンまでです（プロンプト長 {prompt_len}）。 / "
                             f"prompt_len too long for the ordinary text ({len(ids)} tokens)")
        prompts.append(ids[:prompt_len])
    return prompts


def _run(llm: LLM, prompts, output_len: int, temperature: float, seed: int) -> dict:
    spec = llm.engine.speculator
    before = None if spec is None else (spec.steps, list(spec.accepted_at))
    sp = [SamplingParams(temperature=temperature, max_tokens=output_len, ignore_eos=True,
                         seed=None if temperature == 0 else seed + i) for i in range(len(prompts))]
    t0 = time.perf_counter()
    outs = llm.generate(prompts, sp, use_tqdm=False)
    wall = time.perf_counter() - t0
    ms = [o.metrics for o in outs]
    tpots = [m.tpot for m in ms if m.tpot is not None]
    proposed, accepted = sum(m.num_draft_tokens for m in ms), sum(m.num_accepted_tokens for m in ms)
    steps = sum(m.num_spec_steps for m in ms)
    return {"tok_s": sum(m.num_output_tokens for m in ms) / wall,
            "tpot_ms": statistics.median(tpots) * 1000 if tpots else float("nan"),
            "proposed": proposed, "accepted": accepted,
            "acceptance_rate": accepted / proposed if proposed else float("nan"),
            "mean_accepted_length": 1 + accepted / steps if steps else float("nan"),
            "acceptance_by_position": [] if spec is None else [        # this run's share per draft position
                (a - a0) / (spec.steps - before[0]) if spec.steps > before[0] else float("nan")
                for a, a0 in zip(spec.accepted_at, before[1])],
            "tokens": [o.token_ids for o in outs]}


def run_spec_lab(prompt_len=None, k=None, concurrency=None, output_len=None, text="repetitive", temperature=0.0,
                 methods=DEFAULT_METHODS, device="cpu", repeats=None, threads=None, seed=0, load_check=True) -> dict:
    d = defaults()
    p = check_int(d["prompt_len"] if prompt_len is None else prompt_len, "prompt_len", "プロンプト長", *PROMPT_LEN_RANGE)
    k = check_int(d["k"] if k is None else k, "k", "投機トークン数 k", *K_RANGE)
    c = check_int(d["concurrency"] if concurrency is None else concurrency, "concurrency", "同時リクエスト数",
                  *CONCURRENCY_RANGE)
    o = check_int(d["output_len"] if output_len is None else output_len, "output_len", "出力長", *OUTPUT_LEN_RANGE)
    if not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
        raise ValueError(f"温度は 0〜2 です。 / temperature must be in [0, 2], got {temperature!r}")
    unknown = [m for m in methods if m not in METHODS]
    if unknown or "none" not in methods:
        raise ValueError(f"方式は {list(METHODS)} から選び、比較のため 'none' を含めてください。 / "
                         f"methods must be among {list(METHODS)} and include 'none', got {list(methods)}")
    device, repeats = check_device(device), check_repeats(default_repeats() if repeats is None else repeats)
    threads = apply_thread_policy(threads)
    watch = LoadWatch(threads) if load_check else None   # the check before, and the load over the whole run
    base = _engine("none", k, c, device)
    if p + o > base.engine.max_model_len:
        raise ValueError(f"プロンプト長＋出力長（{p + o}）がモデルの上限 {base.engine.max_model_len} を超えています。"
                         f" / prompt_len + output_len exceeds max_model_len")
    prompts = make_prompts(base, text, p, c)
    runs = {m: [] for m in methods}
    for _ in range(repeats):
        for m in methods:
            runs[m].append(_run(_engine(m, k, c, device), prompts, o, float(temperature), seed))
    load = watch.finish() if watch else None     # after the last timed run: a crowded run prints 判定できません
    out = {}
    for m, rs in runs.items():
        tok = [r["tok_s"] for r in rs]
        out[m] = {"label": METHODS[m], "tok_s": statistics.median(tok), "tok_s_min": min(tok), "tok_s_max": max(tok),
                  "tpot_ms": statistics.median(r["tpot_ms"] for r in rs),
                  **{f: rs[-1][f] for f in ("proposed", "accepted", "acceptance_rate", "mean_accepted_length",
                                            "acceptance_by_position", "tokens")}}
    for m, r in out.items():           # paired: repeat i of a method over repeat i of no speculation (run beside it)
        pairs = [x["tok_s"] / b["tok_s"] for x, b in zip(runs[m], runs["none"])]
        r.update(speedup=statistics.median(pairs), speedup_min=min(pairs), speedup_max=max(pairs), speedups=pairs)
        r["tpot_ratio"] = statistics.median(x["tpot_ms"] / b["tpot_ms"] for x, b in zip(runs[m], runs["none"]))
        n = r["mean_accepted_length"]   # Leviathan's alpha (per position), not accepted / proposed
        r["alpha"] = alpha_from_length(n, k) if n == n else float("nan")
    res = {"prompt_len": p, "k": k, "concurrency": c, "output_len": o, "text": text, "temperature": temperature,
           "device": device, "repeats": repeats, "threads": threads, "methods": out, "load": load}
    if temperature == 0:
        res["same_tokens"] = all(r["tokens"] == out["none"]["tokens"] for r in out.values())
    res["warnings"] = [load["warning"]] if load and load["warning"] else []
    return res


def trace_steps(method: str = "ngram", k: int = 4, prompt: str | None = None, max_tokens: int = 24,
                device: str = "cpu", text: str | None = None, prompt_len: int = 64) -> list[dict]:
    """One request, greedy, step by step: what the proposer drafted, how many drafts the target kept, and the
    tokens the step produced (the kept drafts + the target's own next token). ``text``: the lab's
    first prompt of that kind (``prompt_len`` tokens) instead of ``prompt``."""
    llm = _engine(method, k, 1, device)
    prompt = make_prompts(llm, text, prompt_len, 1)[0] if text is not None else prompt
    tok, engine = llm.tokenizer, llm.engine
    spec, rows = engine.speculator, []
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    rid = engine.add_request(prompt or PASSAGES[0] * 2, params)
    try:
        while engine.has_unfinished_requests():
            outs = engine.step()
            verified = {seq.request_id: (drafts, toks) for seq, drafts, toks in spec.last_verified}
            for out in outs:        # one row per step that produced tokens (the prefill step has no drafts)
                drafts, toks = verified.get(out.request_id, ([], list(out.new_token_ids)))
                rows.append({"step": len(rows) + 1, "drafts": [tok.decode([t]) for t in drafts],
                             "accepted": len(toks) - 1 if drafts else 0, "tokens": [tok.decode([t]) for t in toks]})
    finally:
        engine.abort_request(rid)
    return rows


def measure_draft_cost(prompt_len: int | None = None, device: str = "cpu", num_steps: int = 10,
                       method: str = "draft_model") -> dict:
    """Median time of one target decode step and of one draft model step (batch 1), and their ratio c: the
    draft's cost in the speedup formula. ``method``: "draft_model" or "draft_model_lm". ``prompt_len``: the
    runs' mean context by default (timed apart from the runs, c can still be off either way; reviews11 ch08 #1)."""
    prompt_len = prompt_len or defaults()["prompt_len"] + defaults()["output_len"] // 2
    if method not in ("draft_model", "draft_model_lm"):
        raise ValueError(f"method must be 'draft_model' or 'draft_model_lm', got {method!r}")
    from minimal_engine.bench.offline import decode_step_time
    from minimal_engine.features.spec_decode.proposers import DraftState
    t_target = decode_step_time(_engine("none", 1, 1, device), 1, prompt_len, num_steps=num_steps)["median_step_ms"]
    draft = _engine(method, 1, 1, device).engine.speculator.draft
    ids = list(range(1, prompt_len + num_steps + 1))
    seq = DraftState("cost", ids[:prompt_len], SamplingParams(temperature=0))
    draft.bm.allocate(seq, len(ids))
    draft.forward([(seq, 0, prompt_len)])
    times = []
    for i in range(num_steps):          # one token each, the last row's logits computed (as when proposing)
        seq.computed(ids[prompt_len + i])   # its tokens: ids[:prompt_len + i + 1]
        t = time.perf_counter()
        draft.forward([(seq, prompt_len + i, 1)])
        times.append(time.perf_counter() - t)
    draft.bm.free(seq)
    t_draft = statistics.median(times) * 1000
    return {"target_step_ms": t_target, "draft_step_ms": t_draft, "c": t_draft / t_target}


def break_even_alpha(k: int, c: float) -> float:
    """The acceptance rate alpha (Leviathan's, per position) at which the formula's speedup (1 - a^(k+1)) /
    ((1 - a)(kc + 1)) is exactly 1: below it a draft with cost c loses to no speculation (bisection)."""
    lo, hi = 0.0, 1.0
    if expected_speedup(1.0 - 1e-12, k, c) < 1:
        return float("nan")                     # even a draft that is always right does not pay for itself
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_speedup(mid, k, c) < 1 else (lo, mid)
    return (lo + hi) / 2


def expected_table(alphas=(0.5, 0.7, 0.9), ks=(1, 2, 4, 8), c: float = 0.1) -> list[dict]:
    """Leviathan et al. (2023): tokens per step and speedup for a grid of alpha (per position) and k."""
    return [{"alpha": a, "k": k, "tokens_per_step": expected_tokens_per_step(a, k),
             "speedup": expected_speedup(a, k, c)} for a in alphas for k in ks]


# ---------------------------------------------------------------- readouts and history
def _v(x, fmt=".2f") -> str:
    return "—" if x is None or x != x else format(x, fmt)


def readout_html(res: dict) -> str:
    rows = []
    for m, r in res["methods"].items():
        span = f"（{r['tok_s_min']:.1f}〜{r['tok_s_max']:.1f}）" if res["repeats"] > 1 else ""
        paired = (f"（{r['speedup_min']:.2f}〜{r['speedup_max']:.2f}）" if res["repeats"] > 1 and m != "none"
                  and "speedup_min" in r else "")
        rows.append((r["label"], f"{r['tok_s']:.1f}{span}", _v(r["tpot_ms"], ".1f"), _v(r["speedup"]) + paired,
                     _v(r["acceptance_rate"], ".3f"),
                     " / ".join(_v(a) for a in r["acceptance_by_position"]) or "—",
                     _v(r["mean_accepted_length"]), _v(r["alpha"], ".3f")))
    head = ("方式", "出力 tok/s", "TPOT [ms]", "速度比（対 投機なし。繰り返しごとの比の中央値と最小〜最大）", "提案の採用率（受理 ÷ 提案）",
            "位置ごとの受理（1番目 / 2番目 / …）", "平均受理長 [トークン/ステップ]",
            "受理率 α（平均受理長 = (1−α^(k+1))/(1−α) を解く）")
    note = (f"<div style='color:#555'>{TEXTS[res['text']]}・k = {res['k']}・同時リクエスト数 {res['concurrency']}・"
            f"温度 {res['temperature']}" + (f"・繰り返し {res['repeats']} 回の中央値（最小〜最大）" if res["repeats"] > 1
                                          else "") + "</div>")
    same = res.get("same_tokens")
    tail = "" if same is None else f"<div>貪欲法のトークンは投機なしと{'一致しています' if same else '一致しません（要確認）'}。</div>"
    return note + table_html(rows, head, right=set(range(1, len(head)))) + tail + warnings_html(res["warnings"])


HISTORY_FIELDS = ("run", "device", "threads", "prompt_len", "output_len", "k", "concurrency", "text", "temperature",
                  "repeats", "method", "tok_s", "tpot_ms", "speedup", "acceptance_rate", "mean_accepted_length")


def add_run(history: list[dict], res: dict) -> list[dict]:
    """One history row per method of this run (same run number)."""
    return add_variant_rows(history, res, HISTORY_FIELDS, "method", res["methods"])


def history_html(history: list[dict], last: int = 24) -> str:
    head = ("#", "方式", "文章", "プロンプト長", "k", "同時リクエスト数", "出力 tok/s", "速度比", "提案の採用率",
            "平均受理長")
    rows = [(r["run"], METHODS[r["method"]], TEXTS[r["text"]], r["prompt_len"], r["k"], r["concurrency"],
             _v(r["tok_s"], ".1f"), _v(r["speedup"]), _v(r["acceptance_rate"]), _v(r["mean_accepted_length"]))
            for r in history[-last:]]
    return history_table(rows, head, set(range(3, len(head))), "実行するとここに方式ごとに1行ずつ増えます")


def history_csv(history: list[dict], learner: str = "") -> str:
    return to_csv(history, learner, fields=("learner",) + HISTORY_FIELDS)


__all__ = ["CONCURRENCY_RANGE", "DEFAULT_METHODS", "DRAFT_LM", "break_even_alpha", "HISTORY_FIELDS", "K_RANGE", "METHODS",
           "OUTPUT_LEN_RANGE", "PASSAGES", "PROMPT_LEN_RANGE", "TEXTS", "add_run", "default_repeats", "defaults",
           "expected_table", "history_csv", "history_html", "make_prompts", "measure_draft_cost", "plot_run",
           "readout_html", "run_spec_lab", "spec_config", "trace_steps"]
