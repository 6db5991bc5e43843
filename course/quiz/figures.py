"""Figure questions: a small figure drawn from data in the bank, and the answer computed from the same data.

A question's ``figure`` block holds the data (explicit small lists, labelled in ``caption`` as an example)
and an SLO; its ``answer_from`` names one of :data:`FIGURE_FUNCS`, called as ``func(data, slo, **args)``::

    figure:
      kind: sweep                       # sweep | timeline
      caption: 説明用の例（架空の1回の計測）
      slo: {tpot_ms: 50}                # upper limits
      data: {concurrency: [1, 2, 4, 8], tpot_ms: [12, 13, 15, 19]}
    answer_from: {func: max_concurrency_meeting_slo}

- ``sweep``: ``concurrency`` and ``tpot_ms`` (optional ``ttft_s``) per point; output tok/s is computed
  (concurrency x 1000 / TPOT), not typed.
- ``timeline``: per request ``arrival_s`` and ``token_s`` (the times its tokens came out), optional
  ``prompt_tokens``; TTFT is ``token_s[0] - arrival_s``.
- ``roofline`` (chapter 2): one roof, ``peak_tflops`` and ``bandwidth_tb_s``, and numbered points with
  ``labels`` and ``intensity`` (FLOP/B); no SLO. ``compute_bound_points`` returns the numbers of the
  points at or right of the ridge point (peak / bandwidth), ``roofline_ridge_point`` the ridge itself.
- ``steps`` (chapter 3): decode step time against position with and without the KV cache, ``position``,
  ``cached_ms`` and ``no_cache_ms``; no SLO. ``no_cache_step_ratio`` reads both lines at one position.

:func:`render_png` draws the figure (Japanese labels, ``course.plots.setup_japanese_font``).
"""
from __future__ import annotations

import io

from minimal_engine import calculators as calc

SLO_LABELS = {"tpot_ms": ("TPOT", "ms"), "ttft_s": ("TTFT", "秒")}


# ------------------------------------------------------------- data -> answers
def ttft_s(data: dict) -> list[float]:
    """TTFT of each request of a timeline: first token time minus arrival time (seconds)."""
    return [tokens[0] - arrival for arrival, tokens in zip(data["arrival_s"], data["token_s"])]


def max_concurrency_meeting_slo(data: dict, slo: dict) -> int:
    """The largest concurrency of a sweep whose every SLO metric (``tpot_ms``, ``ttft_s``) is within its limit."""
    ok = [c for i, c in enumerate(data["concurrency"])
          if all(data[metric][i] <= limit for metric, limit in slo.items())]
    if not ok:
        raise ValueError(f"no point of the sweep meets the SLO {slo}")
    return max(ok)


def requests_over_slo(data: dict, slo: dict) -> list[int]:
    """Numbers (1-based) of the timeline's requests whose TTFT exceeds ``slo["ttft_s"]``."""
    return [i + 1 for i, t in enumerate(ttft_s(data)) if t > slo["ttft_s"] + 1e-9]


def roofline_ridge_point(data: dict, slo: dict | None = None) -> float:
    """FLOPs per byte where the figure's roof bends: peak FLOP/s / bandwidth (TFLOPS / (TB/s))."""
    return data["peak_tflops"] / data["bandwidth_tb_s"]


def compute_bound_points(data: dict, slo: dict | None = None) -> list[int]:
    """Numbers (1-based) of the roofline's points at or right of the ridge point: compute-bound."""
    ridge = roofline_ridge_point(data)
    return [i + 1 for i, x in enumerate(data["intensity"]) if x >= ridge]


def no_cache_step_ratio(data: dict, slo: dict | None = None, position: int | None = None) -> float:
    """How many times longer the no-cache step is than the cached one at ``position`` (default: the last)."""
    i = -1 if position is None else list(data["position"]).index(position)
    return data["no_cache_ms"][i] / data["cached_ms"][i]


FIGURE_FUNCS = {"no_cache_step_ratio": no_cache_step_ratio,
                "max_concurrency_meeting_slo": max_concurrency_meeting_slo,
                "requests_over_slo": requests_over_slo, "compute_bound_points": compute_bound_points,
                "roofline_ridge_point": roofline_ridge_point}


def _same_lengths(data: dict, keys, where: str) -> None:
    lengths = {k: len(data[k]) for k in keys if k in data}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"{where}: figure data lists differ in length: {lengths}")


def validate_figure(figure: dict, where: str) -> dict:
    """Check a ``figure`` block (kind, data lists, SLO metrics); returns it."""
    kinds = ("sweep", "timeline", "roofline", "steps")
    if not isinstance(figure, dict) or figure.get("kind") not in kinds:
        raise ValueError(f"{where}: figure.kind must be one of {kinds}")
    data, slo = figure.get("data") or {}, figure.get("slo") or {}
    if figure["kind"] == "roofline":
        missing = [k for k in ("peak_tflops", "bandwidth_tb_s", "labels", "intensity") if k not in data]
        if missing:
            raise ValueError(f"{where}: a roofline figure needs data {missing}")
        _same_lengths(data, ("labels", "intensity"), where)
        if min(data["intensity"]) <= 0 or data["peak_tflops"] <= 0 or data["bandwidth_tb_s"] <= 0:
            raise ValueError(f"{where}: roofline intensities, peak and bandwidth must be > 0")
        figure.setdefault("slo", {})
        return figure
    if figure["kind"] == "steps":
        missing = [k for k in ("position", "cached_ms", "no_cache_ms") if k not in data]
        if missing:
            raise ValueError(f"{where}: a steps figure needs data {missing}")
        _same_lengths(data, ("position", "cached_ms", "no_cache_ms"), where)
        if min(data["cached_ms"]) <= 0 or list(data["position"]) != sorted(set(data["position"])):
            raise ValueError(f"{where}: steps need increasing positions and step times > 0")
        figure.setdefault("slo", {})
        return figure
    need = ("concurrency", "tpot_ms") if figure["kind"] == "sweep" else ("arrival_s", "token_s")
    missing = [k for k in need if k not in data]
    if missing or not slo:
        raise ValueError(f"{where}: figure needs data {list(need)} and an slo (missing: {missing or ['slo']})")
    if figure["kind"] == "sweep":
        _same_lengths(data, ("concurrency", "tpot_ms", "ttft_s"), where)
        bad = [m for m in slo if m not in data]
    else:
        _same_lengths(data, ("arrival_s", "token_s", "prompt_tokens"), where)
        if any(not tokens or tokens != sorted(tokens) for tokens in data["token_s"]):
            raise ValueError(f"{where}: each token_s list must be non-empty and increasing")
        bad = [m for m in slo if m != "ttft_s"]
    if bad:
        raise ValueError(f"{where}: SLO metrics {bad} are not in the figure's data")
    return figure


def figure_answer(answer_from: dict, figure: dict):
    """Call ``FIGURE_FUNCS[answer_from.func](data, slo, **args)``."""
    name = answer_from.get("func")
    if name not in FIGURE_FUNCS:
        raise ValueError(f"unknown figure function {name!r}; known: {', '.join(FIGURE_FUNCS)}")
    return FIGURE_FUNCS[name](figure["data"], figure.get("slo") or {}, **(answer_from.get("args") or {}))


def _fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else f"{int(x)}"


def choice_fact(figure: dict, value) -> str:
    """What the data says about a choice's ``value`` (a request number, or a concurrency), in Japanese."""
    data, slo = figure["data"], figure.get("slo") or {}
    if figure["kind"] == "roofline":
        i, ridge = int(value) - 1, roofline_ridge_point(data)
        x = data["intensity"][i]
        side = "以上なので演算律速（compute-bound）" if x >= ridge else "より小さいので帯域律速（memory-bandwidth-bound）"
        return f"点{value}（{data['labels'][i]}）: 演算強度 {_fmt(x)} FLOP/B はリッジポイント {ridge:.0f} FLOP/B {side}です。"
    if figure["kind"] == "timeline":
        i = int(value) - 1
        t = ttft_s(data)[i]
        verdict = "を超えます" if t > slo["ttft_s"] + 1e-9 else "以内です"
        return (f"リクエスト{value}: 到着 {data['arrival_s'][i]:.2f} 秒、最初のトークン "
                f"{data['token_s'][i][0]:.2f} 秒なので、TTFT は {t:.2f} 秒で SLO（{_fmt(slo['ttft_s'])} 秒）{verdict}。")
    i = list(data["concurrency"]).index(value)
    parts = [f"{SLO_LABELS[m][0]} {_fmt(data[m][i])} {SLO_LABELS[m][1]}" for m in slo]
    ok = all(data[m][i] <= limit for m, limit in slo.items())
    return f"同時 {value}: {'、'.join(parts)}（SLO を{'満たします' if ok else '満たしません'}）。"


# ------------------------------------------------------------------ drawing
def _draw_sweep(fig, figure: dict) -> None:
    data, slo = figure["data"], figure["slo"]
    conc = list(data["concurrency"])
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(conc, data["tpot_ms"], "o-", color="tab:blue")
    for c, v in zip(conc, data["tpot_ms"]):
        ax1.annotate(f"{_fmt(v)}", (c, v), textcoords="offset points", xytext=(-7, 4), ha="right", fontsize=8,
                     bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.9})
    if "tpot_ms" in slo:
        ax1.axhline(slo["tpot_ms"], color="tab:red", linestyle="--", label=f"SLO: TPOT ≤ {_fmt(slo['tpot_ms'])} ms")
        ax1.legend(loc="upper left", fontsize=8)
    ax1.set_ylabel("TPOT [ms]")
    ax1.set_ylim(0, max(data["tpot_ms"]) * 1.2)
    out = [c * calc.tok_s_user_from_tpot_ms(t) for c, t in zip(conc, data["tpot_ms"])]
    ax2.plot(conc, out, "s-", color="tab:green")
    ax2.set_ylabel("出力 tok/s（同時リクエスト数 × 1000 / TPOT）")
    ax2.set_ylim(0, max(out) * 1.15)
    for ax, title in ((ax1, "TPOT（1人あたりの待ち）"), (ax2, "システム全体の出力 tok/s")):
        ax.set_xscale("log", base=2)
        ax.set_xlim(conc[0] / 1.6, conc[-1] * 1.4)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.set_xlabel("同時リクエスト数")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)


def _draw_timeline(fig, figure: dict) -> None:
    data, slo = figure["data"], figure["slo"]
    ax = fig.subplots()
    prompts = data.get("prompt_tokens")
    for i, (arrival, tokens) in enumerate(zip(data["arrival_s"], data["token_s"])):
        y = i + 1
        ax.plot([arrival, tokens[0]], [y, y], color="lightgray", linewidth=6, solid_capstyle="butt",
                label="到着 → 最初のトークン" if i == 0 else None)
        ax.plot([arrival], [y], marker="v", color="black", markersize=7, label="到着" if i == 0 else None)
        ax.plot(tokens, [y] * len(tokens), "o", color="tab:blue", markersize=5,
                label="出力トークン" if i == 0 else None)
        if "ttft_s" in slo:
            ax.plot([arrival + slo["ttft_s"]] * 2, [y - 0.3, y + 0.3], color="tab:red", linewidth=2,
                    label=f"到着 + {_fmt(slo['ttft_s'])} 秒（TTFT の SLO）" if i == 0 else None)
    labels = [f"{i + 1}" + (f"\n({p:,} tok)" if prompts else "") for i, p in
              enumerate(prompts or [0] * len(data["arrival_s"]))]
    ax.set_yticks(range(1, len(labels) + 1), labels)
    ax.set_ylim(len(labels) + 0.7, 0.3)
    ax.set_ylabel("リクエスト（プロンプト長）")
    ax.set_xlabel("時刻 [秒]")
    end = max(t[-1] for t in data["token_s"])
    ax.set_xticks([x / 4 for x in range(int(end * 4) + 2)])
    ax.set_xticks([x / 10 for x in range(int(end * 10) + 3)], minor=True)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.legend(loc="outside lower center", fontsize=8, ncol=4)


def _draw_roofline(fig, figure: dict) -> None:
    data = figure["data"]
    ax = fig.subplots()
    peak, bw = data["peak_tflops"] * 1e12, data["bandwidth_tb_s"] * 1e12
    xs = [10 ** (k / 20) for k in range(-20, 81)]                    # 0.1 .. 10,000 FLOP/B
    ax.plot(xs, [min(peak, x * bw) for x in xs], color="black", linewidth=1.8, label="ルーフ（上限）")
    ridge = peak / bw
    ax.axvline(ridge, color="0.6", linestyle=":", linewidth=1)
    ax.annotate("リッジポイント", (ridge, peak), xytext=(5, -14), textcoords="offset points", fontsize=8)
    for i, x in enumerate(data["intensity"]):
        y = min(peak, x * bw)
        ax.plot([x], [y], "o", color="tab:blue", markersize=7)
        ax.annotate(f"{i + 1}", (x, y), xytext=(-4, 7), textcoords="offset points", fontsize=10)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("演算強度 [FLOP/バイト]")
    ax.set_ylabel("到達できる演算性能 [FLOP/s]")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)


def _draw_steps(fig, figure: dict) -> None:
    data = figure["data"]
    ax = fig.subplots()
    ax.plot(data["position"], data["no_cache_ms"], "o-", color="tab:red", label="KV キャッシュなし（毎回すべて計算し直す）")
    ax.plot(data["position"], data["cached_ms"], "s-", color="tab:blue", label="KV キャッシュあり")
    for key, color in (("no_cache_ms", "tab:red"), ("cached_ms", "tab:blue")):
        for x, y in zip(data["position"], data[key]):
            ax.annotate(_fmt(y), (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8,
                        color=color)
    ax.set_xticks(list(data["position"]))
    ax.set_xlabel("位置（そのステップの文脈のトークン数）")
    ax.set_ylabel("1ステップの時間 [ms]")
    ax.set_ylim(0, max(data["no_cache_ms"]) * 1.2)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)


def render_png(figure: dict, dpi: int = 100) -> bytes:
    """The figure of a question as PNG bytes (no pyplot state, so nothing else shows in the notebook)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from course.plots import setup_japanese_font

    setup_japanese_font()
    wide = figure["kind"] == "sweep"
    fig = Figure(figsize=(9, 3.4) if wide else (8, 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    {"sweep": _draw_sweep, "timeline": _draw_timeline, "roofline": _draw_roofline,
     "steps": _draw_steps}[figure["kind"]](fig, figure)
    if figure.get("title"):
        fig.suptitle(figure["title"], fontsize=11)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
