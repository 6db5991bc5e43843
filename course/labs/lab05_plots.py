"""Plots of chapter 5's lab (``course.labs.lab05``'s results; Japanese labels; each returns a
Figure).

- ``plot_run(res)``: one run: tok/s against tok/s/user per policy, and each request's TTFT.
- ``plot_pareto(history, labels)``: every run of a history, a line per policy over the concurrency.
"""
from __future__ import annotations

COLORS = {"continuous": "tab:blue", "static": "tab:orange", "hf_static": "tab:gray"}
# label offsets in points, for plot_pareto
LABEL_OFFSETS = {"continuous": (7, 7), "static": (7, -8), "hf_static": (-7, 0)}   # beside the error bars, not on them


def plot_run(res: dict):
    """Left: tok/s against tok/s/user per policy. Right: TTFT of each request (engine policies)."""
    from matplotlib.ticker import MaxNLocator

    from course.labkit.charts import figure
    import numpy as np
    fig, (a1, a2) = figure(11, 3.8, 1, 2)
    ttfts = [t for r in res["policies"].values() for t in (r["ttft_ms_list"] or [])]
    edges = np.histogram_bin_edges(ttfts, bins=12) if ttfts else 12     # the same bins for every policy
    for k, r in res["policies"].items():
        a1.scatter([r["tok_s_per_user"]], [r["tok_s"]], color=COLORS[k], label=r["label"], s=50)
        if r["ttft_ms_list"]:
            a2.hist(r["ttft_ms_list"], bins=edges, alpha=0.5, color=COLORS[k], label=r["label"])
    a1.set_xlabel("tok/s/user（1リクエストから見た速さ）")
    a1.set_ylabel("出力 tok/s（システム全体）")
    pts = [(r["tok_s_per_user"], r["tok_s"]) for r in res["policies"].values()]
    a1.set_xlim(0, max(x for x, _ in pts) * 1.15)       # room around the points (none on the edge)
    a1.set_ylim(0, max(y for _, y in pts) * 1.15)
    a1.grid(alpha=0.3)
    a1.legend(fontsize=7)
    a2.axvline(res["ttft_slo_ms"], color="k", linestyle="--", linewidth=1, label="TTFT の SLO")
    a2.set_xlabel("TTFT [ms]")
    a2.set_ylabel("リクエスト数")
    a2.yaxis.set_major_locator(MaxNLocator(integer=True))                 # a count: whole numbers
    a2.set_ylim(0, a2.get_ylim()[1] * 1.5)            # headroom: the legend sits above the bars (final reading #9)
    a2.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"プロンプト {res['prompt_len']}・出力 ≤{res['output_len']}・同時リクエスト数 {res['concurrency']}・"
                 f"{res['num_requests']} 件", fontsize=10)
    return fig


def plot_pareto(history: list[dict], labels: dict[str, str]):
    """Every run of the history: tok/s (bars: the repeats' min to max) against tok/s/user, one line
    per policy (``labels``: policy -> its name, in the legend's order), ordered by concurrency."""
    from course.labkit.charts import figure
    fig, ax = figure(6.5, 4)
    for k in labels:
        rows = sorted((r for r in history if r["policy"] == k), key=lambda r: r["concurrency"])
        if rows:
            ys = [r["tok_s"] for r in rows]                 # bars: the repeats' min to max
            err = [[y - (r.get("tok_s_min") or y) for y, r in zip(ys, rows)],
                   [(r.get("tok_s_max") or y) - y for y, r in zip(ys, rows)]]
            ax.errorbar([r["tok_s_per_user"] for r in rows], ys, yerr=err, fmt="o-",
                        color=COLORS[k], label=labels[k], capsize=3)
            for r in rows:              # each policy's labels on its own side: close points stay legible
                ax.annotate(str(r["concurrency"]), (r["tok_s_per_user"], r["tok_s"]), fontsize=8,
                            color=COLORS[k], xytext=LABEL_OFFSETS[k], textcoords="offset points",
                            ha="left" if LABEL_OFFSETS[k][0] > 0 else "right", va="center")
    ax.set_xlabel("tok/s/user")
    ax.set_ylabel("出力 tok/s")
    if history:
        ax.set_xlim(0, max(r["tok_s_per_user"] for r in history) * 1.15)
        ax.set_ylim(0, max(r.get("tok_s_max") or r["tok_s"] for r in history) * 1.15)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("方式ごとの同時リクエスト数のスイープ（点の数字は同時リクエスト数）", fontsize=10)
    return fig


__all__ = ["COLORS", "LABEL_OFFSETS", "plot_pareto", "plot_run"]
