"""Lab 1 (第1章ラボ): Prefill と Decode をタイムラインで見る。

Three layers, each usable on its own (tests call the first two; notebooks stay thin):

1. Experiments, plain functions that return data (no widgets, no plots)::

       res = run_timeline("default", prompt_len=64, output_len=32, concurrency=4, device="cpu")
       res["ttft_ms"], res["tpot_ms"], res["tok_s"], res["tok_s_per_user"], res["requests"][0]["token_times_ms"]
       rows = run_concurrency_sweep("default", prompt_len=64, output_len=32, concurrencies=[1, 2, 4, 8])

   ``concurrency`` requests of ``prompt_len`` random token ids arrive together (as in InferenceX's
   client: random tokens, no prefix-cache hits) and each generates exactly ``output_len`` tokens
   (``ignore_eos``). Times come from the engine's per-request metrics (``RequestMetrics``) and the
   run summary from ``minimal_engine.metrics.summarize`` (vLLM's formulas).
2. Plots, functions of that data: ``plot_timeline(res)`` and ``plot_sweep(rows)`` return a
   matplotlib ``Figure`` with Japanese labels.
3. ``build_lab()``: an ipywidgets panel that only wires sliders and menus to 1 and 2.

Models are loaded through ``course.runtime.get_llm`` (re-exported here), which keeps them loaded, so
switching the model menu back and forth does not reload weights. ``COURSE_QUICK=1`` (set by
``make test``) shrinks the sweep.
"""
from __future__ import annotations

import html
import time

from minimal_engine import SamplingParams
from minimal_engine.metrics import summarize

from course.runtime import (MAX_CONTEXT, MAX_NUM_SEQS, MODEL_CHOICES, available_devices, check_device,
                            check_int, check_model, clear_llm_cache, get_llm, is_quick, max_model_len,
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
    """A sweep's concurrencies: 1 to MAX_SWEEP_POINTS distinct values, each in CONCURRENCY_RANGE, sorted."""
    if isinstance(concurrencies, (str, bytes)) or not hasattr(concurrencies, "__iter__"):
        raise ValueError(f"同時数の一覧（concurrencies）は整数のリストで指定してください。"
                         f" / concurrencies must be a list of integers, got {concurrencies!r}")
    values = [check_int(c, "concurrency", "同時リクエスト数", *CONCURRENCY_RANGE) for c in concurrencies]
    values = sorted(set(values))
    if not 1 <= len(values) <= MAX_SWEEP_POINTS:
        raise ValueError(f"同時数の一覧（concurrencies）は 1〜{MAX_SWEEP_POINTS} 個にしてください。"
                         f" / concurrencies must hold 1 to {MAX_SWEEP_POINTS} values, got {len(values)}")
    return values


# ---------------------------------------------------------------- experiments
def run_timeline(model="default", prompt_len: int = DEFAULTS["prompt_len"],
                 output_len: int = DEFAULTS["output_len"], concurrency: int = DEFAULTS["concurrency"],
                 device: str = "cpu", seed: int = 0, progress=None) -> dict:
    """Send ``concurrency`` requests at once and record when each one was prefilled and got each token.

    Returns a dict: the settings; ``requests`` (one dict per request with ``prefill_start_ms``,
    ``first_token_ms``, ``token_times_ms`` measured from the common arrival time, and its own
    ``ttft_ms`` / ``tpot_ms``); ``steps`` (each engine step's start/end and tokens out); and the run's
    medians and throughputs: ``ttft_ms``, ``tpot_ms``, ``tok_s`` (output tokens / wall time),
    ``total_tok_s`` (input + output), ``tok_s_per_user`` (1000 / median TPOT), ``duration_s``,
    ``num_preemptions``, ``summary`` (all of ``minimal_engine.metrics.summarize``).
    ``progress(done_tokens, total_tokens)`` is called after every engine step.
    """
    s = check_settings(model, prompt_len, output_len, concurrency, device)
    llm = get_llm(s["model"], s["device"])
    if prompt_len + output_len > llm.engine.max_model_len:
        raise ValueError(f"プロンプト長 + 出力長 = {prompt_len + output_len} トークンが、このモデルの最大長 "
                         f"{llm.engine.max_model_len} を超えています。 / prompt_len + output_len = "
                         f"{prompt_len + output_len} exceeds this model's max_model_len {llm.engine.max_model_len}")
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    prompts = random_prompts(llm, prompt_len, concurrency, seed)
    total, done, steps, outs = output_len * concurrency, 0, [], {}
    t0 = time.perf_counter()
    ids = [engine.add_request(p, params, arrival_time=t0) for p in prompts]
    idle = 0
    try:
        while engine.has_unfinished_requests() and len(outs) < len(ids):
            a = time.perf_counter()
            step_outs = engine.step()
            b = time.perf_counter()
            idle = 0 if step_outs else idle + 1
            if idle > 1000:
                raise RuntimeError("the engine made no progress for 1000 steps")
            steps.append({"start_ms": (a - t0) * 1e3, "end_ms": (b - t0) * 1e3, "tokens_out": len(step_outs),
                          "first_tokens": sum(len(o.token_ids) == 1 for o in step_outs)})
            for o in step_outs:
                if o.finished:
                    outs[o.request_id] = o
            done += len(step_outs)
            if progress is not None:
                progress(min(done, total), total)
    finally:
        for rid in ids:                     # an interrupt (Ctrl-C, an error) frees the KV blocks
            if rid not in outs:
                engine.abort_request(rid)
    finished = [outs[r] for r in ids]
    last = max(o.metrics.token_times[-1] for o in finished)
    summary = summarize(finished, duration=last - t0)
    requests = []
    for i, o in enumerate(finished):
        m = o.metrics
        requests.append({"index": i, "prefill_start_ms": (m.first_scheduled_time - t0) * 1e3,
                         "first_token_ms": (m.first_token_time - t0) * 1e3,
                         "token_times_ms": [(t - t0) * 1e3 for t in m.token_times],
                         "ttft_ms": m.ttft * 1e3, "tpot_ms": m.tpot * 1e3, "e2el_ms": m.e2e_latency * 1e3,
                         "num_preemptions": m.num_preemptions})
    return {**s, "model_name": llm.model_name, "dtype": str(llm.dtype).replace("torch.", ""),
            "requests": requests, "steps": steps,
            "ttft_ms": summary["median_ttft_ms"], "tpot_ms": summary["median_tpot_ms"],
            "tok_s": summary["output_throughput"], "total_tok_s": summary["total_token_throughput"],
            "tok_s_per_user": summary["tok_s_per_user"], "duration_s": summary["duration"],
            "num_preemptions": sum(r["num_preemptions"] for r in requests), "summary": summary}


SWEEP_FIELDS = ("concurrency", "ttft_ms", "tpot_ms", "tok_s", "total_tok_s", "tok_s_per_user", "duration_s")


def run_concurrency_sweep(model="default", prompt_len: int = DEFAULTS["prompt_len"],
                          output_len: int = DEFAULTS["output_len"], concurrencies=None, device: str = "cpu",
                          seed: int = 0, progress=None) -> list[dict]:
    """run_timeline at each concurrency (default: ``sweep_concurrencies()``); one row per concurrency
    with the fields in SWEEP_FIELDS. ``progress(done_tokens, total_tokens)`` counts over the whole sweep."""
    concurrencies = check_concurrencies(sweep_concurrencies() if concurrencies is None else concurrencies)
    check_settings(model, prompt_len, output_len, concurrencies[0], device)
    total = output_len * sum(concurrencies)
    rows, before = [], 0
    for c in concurrencies:
        cb = None if progress is None else (lambda d, _t, b=before: progress(b + d, total))
        res = run_timeline(model, prompt_len, output_len, c, device, seed, cb)
        rows.append({k: res[k] for k in SWEEP_FIELDS})
        before += output_len * c
    return rows


# ---------------------------------------------------------------- readouts
def format_readout(res: dict) -> str:
    """The four metrics of a run as plain text (for print in a notebook)."""
    return (f"{res['concurrency']} リクエスト × (プロンプト {res['prompt_len']} + 出力 {res['output_len']} トークン)"
            f"  [{res['model']}, {res['device']}, {res['dtype']}]\n"
            f"  TTFT（中央値）      : {res['ttft_ms']:9.1f} ms\n"
            f"  TPOT（中央値）      : {res['tpot_ms']:9.1f} ms\n"
            f"  tok/s（出力合計）   : {res['tok_s']:9.1f}\n"
            f"  tok/s/user          : {res['tok_s_per_user']:9.1f}  (= 1000 / TPOT)\n"
            f"  全体の所要時間      : {res['duration_s']:9.2f} s"
            + (f"\n  プリエンプション   : {res['num_preemptions']} 回" if res["num_preemptions"] else ""))


def readout_html(res: dict) -> str:
    """The same readout as an HTML table (for the widget)."""
    rows = [("TTFT（中央値）", f"{res['ttft_ms']:.1f} ms", "最初のトークンまでの待ち時間"),
            ("TPOT（中央値）", f"{res['tpot_ms']:.1f} ms", "2トークン目以降の1トークンあたり時間"),
            ("tok/s", f"{res['tok_s']:.1f}", "全リクエスト合計の出力トークン / 所要時間"),
            ("tok/s/user", f"{res['tok_s_per_user']:.1f}", "1人が体感する速さ = 1000 / TPOT[ms]"),
            ("所要時間", f"{res['duration_s']:.2f} s", f"{res['concurrency']} リクエストすべてが終わるまで")]
    if res["num_preemptions"]:
        rows.append(("プリエンプション", f"{res['num_preemptions']} 回", "KV ブロック不足で追い出された回数"))
    body = "".join(f"<tr><td><b>{html.escape(a)}</b></td><td style='text-align:right'>{html.escape(b)}</td>"
                   f"<td>{html.escape(c)}</td></tr>" for a, b, c in rows)
    return f"<table>{body}</table>"


# ---------------------------------------------------------------- plots
def _figure(width: float, height: float):
    import matplotlib.pyplot as plt

    from course.plots import setup_japanese_font
    setup_japanese_font()
    fig = plt.figure(figsize=(width, height), layout="constrained")
    plt.close(fig)      # pyplot forgets it: shown once, where it is returned or displayed (not again later)
    return fig, fig.subplots()


def plot_timeline(res: dict, max_rows: int = 32):
    """One row per request: grey = waiting, orange bar = prefill (until the first token), blue ticks = each
    output token. Shows at most ``max_rows`` requests. Returns a matplotlib Figure."""
    reqs = res["requests"][:max_rows]
    fig, ax = _figure(9, 1.9 + 0.32 * len(reqs))
    labeled = set()

    def label(name):                    # each legend entry once
        if name in labeled:
            return None
        labeled.add(name)
        return name

    for r in reqs:
        y = r["index"]
        if r["prefill_start_ms"] > 0.01 * r["token_times_ms"][-1]:      # waited visibly before its prefill
            ax.broken_barh([(0, r["prefill_start_ms"])], (y - 0.3, 0.6), color="0.85", label=label("待ち（キュー）"))
        ax.broken_barh([(r["prefill_start_ms"], r["first_token_ms"] - r["prefill_start_ms"])], (y - 0.3, 0.6),
                       color="tab:orange", label=label("Prefill（プロンプト処理）"))
        ax.vlines(r["token_times_ms"][1:], y - 0.35, y + 0.35, color="tab:blue", linewidth=0.8,
                  label=label("Decode（1トークンごと）"))
        ax.plot([r["first_token_ms"]], [y], marker="o", color="tab:red", markersize=4, linestyle="none",
                label=label("最初のトークン（TTFT）"))
    ax.set_yticks([r["index"] for r in reqs], [f"#{r['index']}" for r in reqs])
    ax.invert_yaxis()
    ax.set_xlabel("到着からの時間 [ms]")
    ax.set_ylabel("リクエスト")
    shown = "" if len(reqs) == len(res["requests"]) else f"（先頭の {len(reqs)} 件を表示）"
    ax.set_title(f"プロンプト {res['prompt_len']} トークン × 出力 {res['output_len']} トークン × "
                 f"同時 {res['concurrency']} リクエスト{shown}\nTTFT {res['ttft_ms']:.0f} ms ・ TPOT {res['tpot_ms']:.1f} ms"
                 f" ・ {res['tok_s']:.0f} tok/s ・ {res['tok_s_per_user']:.1f} tok/s/user")
    ax.set_xlim(0, max(r["token_times_ms"][-1] for r in reqs) * 1.02)
    fig.legend(loc="outside lower center", ncols=4, fontsize=8)
    return fig


def plot_sweep(rows: list[dict]):
    """Throughput (tok/s, y) against interactivity (tok/s/user, x), one point per concurrency, as on
    InferenceX's charts: up is cheaper, right is faster for each user. Returns a matplotlib Figure."""
    fig, ax = _figure(7, 4.5)
    xs = [r["tok_s_per_user"] for r in rows]
    ys = [r["tok_s"] for r in rows]
    ax.plot(xs, ys, "o-", color="tab:blue")
    for r, x, y in zip(rows, xs, ys):
        ax.annotate(f"同時 {r['concurrency']}", (x, y), textcoords="offset points", xytext=(6, 4), fontsize=9)
    ax.set_xlabel("tok/s/user（1人あたりの速さ・インタラクティビティ）")
    ax.set_ylabel("tok/s（出力スループット・合計）")
    ax.set_title("同時リクエスト数を増やすと: 合計は増え、1人あたりは減る")
    ax.set_xlim(0, max(xs) * 1.2)
    ax.set_ylim(0, max(ys) * 1.2)
    ax.grid(alpha=0.3)
    return fig


# ---------------------------------------------------------------- widget
class Lab1App:
    """The lab's control panel. It only wires widgets to run_timeline / run_concurrency_sweep and the plots.

    ``run_button.click()`` (or ``on_run()``) and ``sweep_button.click()`` (``on_sweep()``) are what the
    buttons do; ``last_result``, ``last_sweep`` and ``last_figure`` keep what was shown.
    """

    def __init__(self, model="default", device=None, prompt_len=DEFAULTS["prompt_len"],
                 output_len=DEFAULTS["output_len"], concurrency=DEFAULTS["concurrency"], concurrencies=None,
                 model_choices=None):
        import ipywidgets as w
        choices = list((model_choices or MODEL_CHOICES).items())
        if model not in [v for _, v in choices]:
            choices.append((str(model), check_model(model)))
        devices = available_devices()
        self.concurrencies = check_concurrencies(sweep_concurrencies() if concurrencies is None else concurrencies)
        style, layout = {"description_width": "9em"}, w.Layout(width="32em")
        self.prompt_len = w.IntSlider(value=prompt_len, min=PROMPT_LEN_RANGE[0], max=PROMPT_LEN_RANGE[1],
                                      description="プロンプト長", style=style, layout=layout, continuous_update=False)
        self.output_len = w.IntSlider(value=output_len, min=OUTPUT_LEN_RANGE[0], max=OUTPUT_LEN_RANGE[1],
                                      description="出力長", style=style, layout=layout, continuous_update=False)
        self.concurrency = w.IntSlider(value=concurrency, min=CONCURRENCY_RANGE[0], max=CONCURRENCY_RANGE[1],
                                       description="同時リクエスト数", style=style, layout=layout,
                                       continuous_update=False)
        self.model = w.Dropdown(options=choices, value=model, description="モデル", style=style, layout=layout)
        self.device = w.Dropdown(options=devices, value=device or devices[-1], description="デバイス",
                                 style=style, layout=layout)
        self.run_button = w.Button(description="実行", button_style="primary", icon="play")
        self.sweep_button = w.Button(description=f"同時数スイープ {self.concurrencies}", icon="line-chart",
                                     layout=w.Layout(width="auto"))
        self.progress = w.IntProgress(value=0, min=0, max=1, description="進行", style=style)
        self.status = w.HTML("")
        self.readout = w.HTML("")
        self.plot = w.Output()
        self.model.observe(self._fit_sliders_to_model, names="value")
        self._fit_sliders_to_model()
        self.run_button.on_click(self.on_run)
        self.sweep_button.on_click(self.on_sweep)
        self.last_result = self.last_sweep = self.last_figure = None
        self.ui = w.VBox([self.prompt_len, self.output_len, self.concurrency, self.model, self.device,
                          w.HBox([self.run_button, self.sweep_button]), self.progress, self.status,
                          self.readout, self.plot])

    def _repr_mimebundle_(self, **kwargs):
        return self.ui._repr_mimebundle_(**kwargs)

    def _fit_sliders_to_model(self, _change=None) -> None:
        """Keep the length sliders within the chosen model's context length (read from its config.json)."""
        try:
            limit = max_model_len(self.model.value)
        except (ValueError, OSError):
            return                          # e.g. default model missing: run() will say so
        self.prompt_len.max = min(PROMPT_LEN_RANGE[1], limit - OUTPUT_LEN_RANGE[0])
        self.output_len.max = min(OUTPUT_LEN_RANGE[1], limit - PROMPT_LEN_RANGE[0])

    def settings(self) -> dict:
        return dict(model=self.model.value, prompt_len=self.prompt_len.value, output_len=self.output_len.value,
                    concurrency=self.concurrency.value, device=self.device.value)

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.max = max(total, 1)
        self.progress.value = done

    def _show(self, fig) -> None:
        from IPython.display import display
        self.last_figure = fig
        self.plot.clear_output(wait=True)
        with self.plot:
            display(fig)

    def _run(self, label: str, work):
        self.run_button.disabled = self.sweep_button.disabled = True
        self.progress.value = 0
        self.status.value = f"{html.escape(label)} 実行中…（初回はモデルの読み込みに数秒かかります）"
        try:
            return work()
        except ValueError as e:
            self.status.value = f"<span style='color:#c00'>⚠ {html.escape(str(e))}</span>"
            return None
        finally:
            self.run_button.disabled = self.sweep_button.disabled = False

    def on_run(self, _button=None):
        """The run button: one timeline with the current settings; updates readout and plot."""
        def work():
            res = run_timeline(**self.settings(), progress=self._on_progress)
            self.last_result = res
            self.readout.value = readout_html(res)
            self._show(plot_timeline(res))
            self.status.value = "完了"
            return res
        return self._run("タイムライン", work)

    def on_sweep(self, _button=None):
        """The sweep button: run_concurrency_sweep with the current lengths; shows tok/s vs tok/s/user."""
        def work():
            s = self.settings()
            rows = run_concurrency_sweep(s["model"], s["prompt_len"], s["output_len"], self.concurrencies,
                                         s["device"], progress=self._on_progress)
            self.last_sweep = rows
            self.readout.value = sweep_html(rows)
            self._show(plot_sweep(rows))
            self.status.value = "完了"
            return rows
        return self._run("スイープ", work)


def sweep_html(rows: list[dict]) -> str:
    """A sweep's rows as an HTML table."""
    head = "<tr><th>同時数</th><th>TTFT [ms]</th><th>TPOT [ms]</th><th>tok/s</th><th>tok/s/user</th></tr>"
    body = "".join(f"<tr><td>{r['concurrency']}</td><td>{r['ttft_ms']:.1f}</td><td>{r['tpot_ms']:.1f}</td>"
                   f"<td>{r['tok_s']:.1f}</td><td>{r['tok_s_per_user']:.1f}</td></tr>" for r in rows)
    return f"<table>{head}{body}</table>"


def format_sweep(rows: list[dict]) -> str:
    """A sweep's rows as plain text."""
    lines = [f"{'同時数':>4} {'TTFT[ms]':>9} {'TPOT[ms]':>9} {'tok/s':>8} {'tok/s/user':>10}"]
    lines += [f"{r['concurrency']:>6} {r['ttft_ms']:9.1f} {r['tpot_ms']:9.1f} {r['tok_s']:8.1f} "
              f"{r['tok_s_per_user']:10.1f}" for r in rows]
    return "\n".join(lines)


def build_lab(**kwargs) -> Lab1App:
    """Build the lab's panel (display it as a cell's last expression). Keyword arguments: initial values."""
    return Lab1App(**kwargs)


__all__ = ["CONCURRENCY_RANGE", "DEFAULTS", "MODEL_CHOICES", "OUTPUT_LEN_RANGE", "PROMPT_LEN_RANGE",
           "Lab1App", "available_devices", "build_lab", "check_concurrencies", "check_settings",
           "clear_llm_cache", "format_readout", "format_sweep", "get_llm", "is_quick", "max_model_len", "plot_sweep",
           "plot_timeline", "random_prompts", "readout_html", "run_concurrency_sweep", "run_timeline",
           "sweep_concurrencies", "sweep_html"]
