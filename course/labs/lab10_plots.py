"""Lab 10's figures (re-exported by lab10, which the notebook calls).

    plot_run(res)                   # this machine's frontier, measured and predicted; TPOT and TTFT per concurrency
    plot_frontiers(res, dc)         # datacenter curves (予測) and this machine on the same log axes
"""
from __future__ import annotations


def plot_run(res: dict):
    """Left: this machine's frontier, measured (実測) and predicted (予測). Right: TPOT and TTFT per concurrency."""
    from course.labkit.charts import figure
    fig, (a1, a2) = figure(11, 4, 1, 2)
    t = res["table"]
    a1.plot([1000 / r["tpot_ms"] for r in t], [r["tok_s"] for r in t], "o-", color="tab:blue", label="実測")
    a1.plot([1000 / r["pred_tpot_ms"] for r in t], [r["pred_tok_s"] for r in t], "s--", color="tab:orange",
            label="予測（シミュレーター）")
    for r in t:
        a1.annotate(str(r["concurrency"]), (1000 / r["tpot_ms"], r["tok_s"]), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    a1.set_xlabel("tok/s/user")
    a1.set_ylabel("出力 tok/s（マシン全体）")
    a1.set_title("このマシンのフロンティア（点の数字は同時リクエスト数）", fontsize=9)
    cs = [r["concurrency"] for r in t]
    for key, color, name in (("tpot_ms", "tab:blue", "TPOT"), ("ttft_ms", "tab:green", "TTFT")):
        a2.plot(cs, [r[key] for r in t], "o-", color=color, label=f"{name} 実測")
        a2.plot(cs, [r["pred_" + key] for r in t], "s--", color=color, alpha=0.6, label=f"{name} 予測")
    a2.set_xscale("log", base=2)
    a2.set_yscale("log")
    a2.set_xlabel("同時リクエスト数")
    a2.set_ylabel("ms")
    for a in (a1, a2):
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(f"プロンプト {res['prompt_len']}・出力 {res['output_len']} トークン（全員が同時に到着）", fontsize=10)
    return fig


def plot_frontiers(res: dict | None, dc: dict, title: str = "tok/s/GPU と tok/s/user（両対数）", ax=None, grey=()):
    """Datacenter curves (予測) and, if given, this machine (実測 and 予測, the machine counted as one "GPU").
    Curves named in ``grey`` (made by a fitted constant's form, not by hardware) are drawn grey and dotted."""
    from course.labkit.charts import figure
    fig, ax = figure(8, 6.5) if ax is None else (ax.figure, ax)
    for label, rows in dc.items():
        ax.plot([r["interactivity"] for r in rows], [r["output_tok_s_per_gpu"] for r in rows], ":" if label in grey
                else "o-", color="0.6" if label in grey else None, markersize=3, label=f"{label}（予測）")
    if res is not None:
        t = res["table"]
        ax.plot([1000 / r["tpot_ms"] for r in t], [r["tok_s"] for r in t], "k*-", markersize=9, label="このマシン（実測）")
        ax.plot([1000 / r["pred_tpot_ms"] for r in t], [r["pred_tok_s"] for r in t], "k+--", label="このマシン（予測）")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tok/s/user（インタラクティビティ）")
    ax.set_ylabel("出力 tok/s / GPU")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, borderaxespad=0)
    # below the axes: inside, it hid this machine's points; on the right, it took most of the width
    return fig


__all__ = ["plot_frontiers", "plot_run"]
