"""The dashboard's picture and its one-line readout, drawn from a ``rates.Series``.

    fig = draw(series)      # six panels: requests, KV, output tok/s, TTFT, TPOT, the curve
    readout_html(series)    # the last point's numbers and the totals (DOM class dashboard-readout)

Uses ``matplotlib.figure.Figure`` (no pyplot): drawing in a loop neither opens windows nor fills a
notebook's output with figures.
"""
from __future__ import annotations

import html
import io
import math

from matplotlib.figure import Figure

from course.instructor.rates import QUANTILES, Series
from course.plots import setup_japanese_font

PCT = tuple(f"p{round(q * 100)}" for q in QUANTILES)


def _fmt(x: float, digits: int = 1) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:,.{digits}f}"


def draw(series: Series, fig: Figure | None = None) -> Figure:
    setup_japanese_font()
    fig = fig or Figure(figsize=(15, 8.5), layout="constrained")
    fig.clear()
    axes = fig.subplots(2, 3)
    pts = list(series.points)
    t = [p.t for p in pts]
    ax = axes[0][0]
    ax.plot(t, [p.running for p in pts], label="実行中", color="tab:blue")
    ax.plot(t, [p.waiting for p in pts], label="待機中", color="tab:orange")
    ax.set(title="リクエスト数", xlabel="経過時間 [s]", ylabel="件")
    ax.legend(loc="upper left")
    ax = axes[0][1]
    ax.plot(t, [100 * p.kv_usage for p in pts], color="tab:purple")
    ax.set(title="KV キャッシュの使用率", xlabel="経過時間 [s]", ylabel="%", ylim=(0, 105))
    ax = axes[0][2]
    ax.plot(t, [p.out_tok_s for p in pts], color="tab:green")
    ax.set(title=f"出力 tok/s（直近 {series.window_s:g} 秒）", xlabel="経過時間 [s]", ylabel="tok/s")
    for ax, key, title in ((axes[1][0], "ttft_ms", "TTFT"), (axes[1][1], "tpot_ms", "TPOT")):
        for i, (name, style) in enumerate(zip(PCT, ("-", "--", ":"))):
            ax.plot(t, [getattr(p, key)[i] for p in pts], style, label=name)
        ax.set(title=f"{title} の p50・p90・p99（直近 {series.window_s:g} 秒）",
               xlabel="経過時間 [s]", ylabel="ms")
        ax.legend(loc="upper left")
    ax = axes[1][2]
    curve = series.curve()
    if curve:
        x, y, c = zip(*curve)
        dots = ax.scatter(x, y, c=c, cmap="viridis", s=18)
        fig.colorbar(dots, ax=ax, label="実行中のリクエスト数")
    ax.set(title="スループットとインタラクティビティ（この教室の負荷）",
           xlabel="tok/s/user（1 ÷ ITL の平均）", ylabel="出力 tok/s（サーバー全体）")
    tot = series.totals()
    if tot:
        fig.suptitle(f"{tot['model'] or 'サーバー'}：{_fmt(tot['elapsed_s'], 0)} 秒で "
                     f"リクエスト {tot['requests']:.0f} 件、出力 {tot['output_tokens']:.0f} トークン"
                     f"（平均 {_fmt(tot['out_tok_s'])} tok/s）")
    return fig


def png_bytes(fig: Figure, dpi: int = 80) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def readout_html(series: Series, error: str = "") -> str:
    """The last point's numbers and the totals; the totals also as data-* attributes (for tests)."""
    if not series.points:
        body = "まだ /metrics を読んでいません。"
        return f"<div class='dashboard-readout' data-scrapes='0'>{html.escape(error or body)}</div>"
    p, tot = series.points[-1], series.totals()
    cells = [("実行中", _fmt(p.running, 0)), ("待機中", _fmt(p.waiting, 0)),
             ("KV 使用率", f"{_fmt(100 * p.kv_usage)} %"), ("出力 tok/s", _fmt(p.out_tok_s)),
             ("tok/s/user", _fmt(p.tok_s_per_user)),
             ("TTFT p50 / p99", f"{_fmt(p.ttft_ms[0])} / {_fmt(p.ttft_ms[2])} ms"),
             ("TPOT p50 / p99", f"{_fmt(p.tpot_ms[0])} / {_fmt(p.tpot_ms[2])} ms"),
             ("累計リクエスト", _fmt(tot["requests"], 0)), ("累計出力トークン", _fmt(tot["output_tokens"], 0))]
    row = " ".join(f"<span style='margin-right:1.2em'>{k}: <b>{html.escape(v)}</b></span>"
                   for k, v in cells)
    warn = f"<div style='color:#c00'>⚠ {html.escape(error)}</div>" if error else ""
    return (f"<div class='dashboard-readout' data-scrapes='{len(series.snapshots)}' "
            f"data-requests='{tot['requests']:.0f}' "
            f"data-output-tokens='{tot['output_tokens']:.0f}'>"
            f"{row}{warn}</div>")


__all__ = ["draw", "png_bytes", "readout_html"]
