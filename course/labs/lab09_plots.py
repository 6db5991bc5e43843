"""Plots of chapter 9's lab (``course.labs.lab09``'s results; Japanese labels; each returns a matplotlib Figure).

- ``plot_itl(res)``: ITL of the short requests over time, one panel per setup (dashed: a long prompt arrives;
  dotted: its first token, i.e. its prefill done or, disaggregated, its KV admitted by the decode engine).
- ``plot_budget(res)``: p99 ITL and the long prompts' TTFT against the chunk budget, Disaggregation as a line.
- ``plot_pareto(res)``: output tok/s against tok/s/user, one point per setup.
"""
from __future__ import annotations

from course.labkit.charts import figure


def _color(name: str, i: int) -> str:
    # red is Disaggregation's; the others skip C3 (= tab:red) so no setup wears its colour
    others = ("C0", "C1", "C2", "C4", "C5", "C6", "C7", "C8", "C9")
    return "tab:red" if name == "disagg" else others[i % len(others)]


def plot_itl(res: dict):
    """ITL of the short requests over time, one panel per setup; dashed lines: a long prompt arrives."""
    names = list(res["setups"])
    fig, axes = figure(10, 1.7 * len(names) + 0.6, len(names), 1, sharex=True, sharey=True, squeeze=False)
    axes = axes[:, 0]
    for i, (a, name) in enumerate(zip(axes, names)):
        r = res["setups"][name]
        xs, ys = zip(*r["itl_points"]) if r["itl_points"] else ((), ())
        a.scatter(xs, ys, s=6, color=_color(name, i))
        for t in r["long_arrivals_s"]:
            a.axvline(t, color="k", linestyle="--", linewidth=0.8)
        for t in r.get("long_first_token_s", ()):        # Disaggregation: the KV is admitted on the decode side
            a.axvline(t, color="0.5", linestyle=":", linewidth=1.0)
        a.set_title(f"{r['label']}: ITL p99 {r['p99_itl_ms']:.1f} ms", fontsize=9, loc="left")
        a.set_ylabel("ITL [ms]", fontsize=8)
        a.grid(alpha=0.3)
    axes[-1].set_xlabel("開始からの時刻 [s]（破線: 長いプロンプトの到着、点線: その最初のトークン）")
    return fig


def plot_budget(res: dict):
    """p99 ITL (left) and the long prompts' TTFT (right) against the chunk budget; Disaggregation as a line."""
    fig, (a1, a2) = figure(10, 3.4, 1, 2)
    single = [r for r in res["setups"].values() if r["budget"] is not None]
    for a, key, title in ((a1, "p99_itl_ms", "Decode の ITL p99 [ms]"), (a2, "long_ttft_ms", "長いプロンプトの TTFT [ms]")):
        a.plot([r["budget"] for r in single], [r[key] for r in single], "o-", label="1エンジン（チャンク予算）")
        if "disagg" in res["setups"]:
            a.axhline(res["setups"]["disagg"][key], color="tab:red", linestyle="--", label="Disaggregation")
        a.set_xscale("log", base=2)
        a.set_xlabel("max_num_batched_tokens（チャンク予算）")
        a.set_ylabel(title)
        a.set_ylim(bottom=0)
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(f"長いプロンプト {res['prompt_len']} トークン × {res['num_long']}・Decode 中 {res['num_decodes']} 件",
                 fontsize=10)
    return fig


def plot_pareto(res: dict):
    """Where each setup lands: output tok/s against tok/s/user."""
    fig, ax = figure(6.5, 4)
    for i, (name, r) in enumerate(res["setups"].items()):
        # hollow rings, each smaller than the last: setups that land on one spot stay visible as concentric rings
        ax.scatter([r["tok_s_per_user"]], [r["tok_s"]], s=max(30, 160 - 20 * i), facecolors="none",
                   edgecolors=_color(name, i), linewidths=1.6, label=r["label"])
        ax.annotate("D" if r["budget"] is None else str(r["budget"]), (r["tok_s_per_user"], r["tok_s"]),
                    xytext=(6, 4 + 8 * (i % 3)), textcoords="offset points", fontsize=7, color=_color(name, i))
    pts = [(r["tok_s_per_user"], r["tok_s"]) for r in res["setups"].values()]
    ax.set_xlim(0, max(x for x, _ in pts) * 1.15)
    ax.set_ylim(0, max(y for _, y in pts) * 1.15)
    ax.set_xlabel("tok/s/user（1人が体感する速さ）")
    ax.set_ylabel("出力 tok/s（システム全体）")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig
