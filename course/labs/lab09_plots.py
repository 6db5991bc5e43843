"""Plots of chapter 9's lab (``course.labs.lab09``'s results; Japanese labels; each returns a matplotlib Figure).

- ``plot_itl(res)``: ITL of the short requests over time, one panel per setup (dashed: a long prompt arrives;
  dotted: its first token, i.e. its prefill done or, disaggregated, its KV admitted by the decode engine).
- ``plot_budget(res)``: p99 ITL and the long prompts' TTFT against the chunk budget, Disaggregation as a line.
- ``plot_pareto(res)``: output tok/s against tok/s/user, one point per setup.

And the tables: ``readout_html(res)`` (one row per setup, with the notes under it) and the history of runs
(``add_run``, ``history_html``, ``history_csv``).
"""
from __future__ import annotations

import math

from course.labkit.charts import figure
from course.labkit.history import add_variant_rows, to_csv
from course.labkit.tables import history_table, table_html, warnings_html

PREFILL_THREADS = 1                   # as lab09.PREFILL_THREADS: Disaggregation's prefill process


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
        # each label sits in one of four corners around its own ring, joined to it by a thin line, so close
        # rings keep their labels apart and every label points at its ring
        dx, dy = ((14, 10), (14, -14), (-24, 10), (-24, -14))[i % 4]
        ax.annotate("D" if r["budget"] is None else str(r["budget"]), (r["tok_s_per_user"], r["tok_s"]),
                    xytext=(dx, dy), textcoords="offset points", fontsize=7, color=_color(name, i),
                    arrowprops=dict(arrowstyle="-", lw=0.6, color=_color(name, i), shrinkA=0, shrinkB=3))
    pts = [(r["tok_s_per_user"], r["tok_s"]) for r in res["setups"].values()]
    ax.set_xlim(0, max(x for x, _ in pts) * 1.15)
    ax.set_ylim(0, max(y for _, y in pts) * 1.15)
    ax.set_xlabel("tok/s/user（1人が体感する速さ）")
    ax.set_ylabel("出力 tok/s（システム全体）")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


# ---------------------------------------------------------------- readouts and history


def _v(x, fmt=".1f") -> str:
    return "—" if x is None or x != x else format(x, fmt)


def readout_html(res: dict) -> str:
    rows = [(r["label"], _v(r["median_itl_ms"]), _v(r["p99_itl_ms"]), _v(r["max_itl_ms"]), _v(r["long_ttft_ms"], ".0f"),
             _v(r["tpot_ms"]), _v(r["tok_s"]), _v(r["tok_s_per_user"]),
             f"{r['kv_bytes_long'] / 1e3:,.0f} ／ {r['kv_bytes_short'] / 1e3:,.0f}" if r.get("kv_bytes_long") else "—")
            for r in res["setups"].values()]
    head = ("構成", "ITL 中央値 [ms]", "ITL p99 [ms]", "ITL 最大 [ms]", "長いプロンプトの TTFT [ms]", "TPOT [ms]",
            "出力 tok/s", "tok/s/user", "KV 転送 [KB/件]（長い ／ 短い）")
    same = "同じトークン列: " + ("はい（全構成で一致）" if res["same_tokens"] else "いいえ")
    n = min(r.get("itl_count", 0) for r in res["setups"].values())
    need = n - math.floor(0.99 * (n - 1)) if n else 0
    note = (f"ITL の標本は構成ごとに {n} 個以上です。止められたステップでは Decode 中の全員が同じ長い間隔を受け取ります。"
            f"p99 は小さい順に 0.99 × (標本の数 − 1) 番目の値（間は直線で補間）なので、{n} 個なら上から {need} 個以上が"
            "止められた間隔のとき、p99 もその値になります。KV 転送は、長いプロンプトと短いプロンプトの"
            "1件あたりを分けて示します。"
            f" スレッド: 1エンジンは {res['threads']} スレッド × 1 プロセス、Disaggregation は Prefill のプロセス "
            f"{res.get('prefill_threads', PREFILL_THREADS)} スレッド＋ Decode のプロセス {res['threads']} スレッドで、"
            "コアが空いていれば CPU を多く使えます" + ("（この実行では、下の警告のとおりほかのプログラムがコアを使っていました）。"
                                                  if res["warnings"] else "。"))
    return (table_html(rows, head, right=set(range(1, len(head)))) + f"<div style='color:#555'>{same}。{note}</div>"
            + warnings_html(res["warnings"]))


HISTORY_FIELDS = ("run", "model", "device", "threads", "prompt_len", "num_decodes", "output_len", "num_long", "arrivals",
                  "setup", "budget", "p99_itl_ms", "max_itl_ms", "long_ttft_ms", "tpot_ms", "tok_s", "tok_s_per_user",
                  "kv_bytes_per_request")


def add_run(history: list[dict], res: dict) -> list[dict]:
    """One history row per setup of this run (same run number)."""
    return add_variant_rows(history, res, HISTORY_FIELDS, "setup", res["setups"])


def history_html(history: list[dict], last: int = 24) -> str:
    head = ("#", "構成", "プロンプト長", "Decode 数", "ITL p99 [ms]", "長いプロンプトの TTFT [ms]", "出力 tok/s",
            "tok/s/user")
    rows = [(r["run"], "Disaggregation" if r["setup"] == "disagg" else f"予算 {r['budget']}", r["prompt_len"],
             r["num_decodes"], _v(r["p99_itl_ms"]), _v(r["long_ttft_ms"], ".0f"), _v(r["tok_s"]),
             _v(r["tok_s_per_user"])) for r in history[-last:]]
    return history_table(rows, head, set(range(2, len(head))), "実行するとここに構成ごとに1行ずつ増えます")


def history_csv(history: list[dict], learner: str = "") -> str:
    return to_csv(history, learner, fields=("learner",) + HISTORY_FIELDS)
