"""Plots of the lab kit (Japanese labels; each returns a matplotlib Figure, shown where it is returned)."""
from __future__ import annotations

from course.labkit.history import read_csvs, sweeps


def figure(width: float, height: float, *grid, **kwargs):
    """A figure of width x height inches with the course's Japanese font, and its axes: one, or the grid
    ``fig.subplots(*grid, **kwargs)`` makes (``figure(10, 3.6, 1, 2)`` -> fig, (left, right))."""
    import matplotlib.pyplot as plt

    from course.plots import setup_japanese_font
    setup_japanese_font()
    fig = plt.figure(figsize=(width, height), layout="constrained")
    plt.close(fig)      # pyplot forgets it: shown once, where it is returned or displayed (not again later)
    return fig, fig.subplots(*grid, **kwargs)


def _curve(ax, rows: list[dict], label: str, color, annotate: bool = True) -> None:
    xs = [r["tok_s_per_user"] for r in rows]
    ys = [r["tok_s"] for r in rows]
    if all(f"tok_s_min" in r and r.get("tok_s_min") is not None for r in rows):
        yerr = [[y - r["tok_s_min"] for r, y in zip(rows, ys)], [r["tok_s_max"] - y for r, y in zip(rows, ys)]]
        xerr = [[x - r["tok_s_per_user_min"] for r, x in zip(rows, xs)],
                [r["tok_s_per_user_max"] - x for r, x in zip(rows, xs)]]
        ax.errorbar(xs, ys, yerr=yerr, xerr=xerr, fmt="o-", color=color, label=label, capsize=3, linewidth=1.5)
    else:
        ax.plot(xs, ys, "o-", color=color, label=label)
    if annotate:
        for r, x, y in zip(rows, xs, ys):
            ax.annotate(f"同時 {r['concurrency']}", (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8,
                        color=color)


def _frame(ax, title: str, all_rows: list[dict]) -> None:
    ax.set_xlabel("tok/s/user（1人あたりの速さ・インタラクティビティ）")
    ax.set_ylabel("tok/s（出力、全リクエスト分）")
    ax.set_title(title)
    ax.set_xlim(0, max(r.get("tok_s_per_user_max") or r["tok_s_per_user"] for r in all_rows) * 1.2)
    ax.set_ylim(0, max(r.get("tok_s_max") or r["tok_s"] for r in all_rows) * 1.2)
    ax.grid(alpha=0.3)


def sweep_label(rows: list[dict]) -> str:
    from pathlib import Path
    r = rows[0]
    model = Path(r["model"]).name if "/" in str(r["model"]) and r["backend"] == "local" else r["model"]
    return (f"#{r['run']} プロンプト {r['prompt_len']}・出力 {r['output_len']}・{model}・"
            f"{r['threads'] or '-'}スレッド")


def plot_sweeps(curves: list[list[dict]], labels: list[str] | None = None,
                title: str = "同時リクエスト数のスイープ: 出力 tok/s と tok/s/user"):
    """Several sweeps on one chart (throughput vs interactivity), one colour each; error bars = min-max."""
    import matplotlib
    fig, ax = figure(7.5, 4.8)
    colors = matplotlib.colormaps["tab10"].colors
    labels = labels or [sweep_label(rows) for rows in curves]
    for i, (rows, label) in enumerate(zip(curves, labels)):
        _curve(ax, rows, label, colors[i % len(colors)], annotate=len(curves) <= 3)
    _frame(ax, title, [r for rows in curves for r in rows])
    ax.legend(fontsize=8, loc="best")
    return fig


def plot_history_sweeps(history: list[dict], last: int = 3):
    """The last ``last`` sweeps of the history overlaid (to compare settings without scrolling)."""
    curves = sweeps(history, last)
    if not curves:
        raise ValueError("履歴にスイープがありません。先に「同時リクエスト数スイープ」を実行してください。"
                         " / no sweep in the history yet")
    return plot_sweeps(curves)


def plot_merged(sources, labels=None):
    """The class's results: one line per CSV (per learner). ``sources``: paths, or ``read_csvs``'s dict.
    Each learner's last sweep is drawn (or, without a sweep, every run sorted by concurrency)."""
    merged = sources if isinstance(sources, dict) else read_csvs(sources, labels)
    curves, names = [], []
    for name, rows in merged.items():
        s = sweeps(rows, 1)
        pick = s[-1] if s else sorted(rows, key=lambda r: r["concurrency"])
        if pick:
            curves.append(pick)
            names.append(name)
    if not curves:
        raise ValueError("CSV に行がありません。 / the CSVs hold no rows")
    return plot_sweeps(curves, names, title=f"クラスの結果（{len(curves)} 人）: 出力 tok/s と tok/s/user")


__all__ = ["figure", "plot_history_sweeps", "plot_merged", "plot_sweeps", "sweep_label"]
