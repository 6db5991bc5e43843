"""The class summary: how different the learners' machines are, from the lab CSVs they hand in.

    machines = read_class("work/class_results")  # {learner: {"gb_s": [...], "tpot_ms": ...}}
    fig = plot_spread(machines)                  # a row per learner: median dot, min-max line

Reads chapter 1's lab CSV (``labkit.save_csv``: columns tok_s, tpot_ms, concurrency, backend) and
chapter 2's (``lab02.save_history_csv``: column gb_s) from one folder. Per learner, from the runs on
the learner's own machine (rows measured on a server, backend ``openai``, are left out): measured
memory bandwidth [GB/s] (lab 2), TPOT at concurrency 1 [ms] and the best output tok/s of each run
(lab 1). The learner's name is the CSV's learner column, else the file name without its ``lab1_`` /
``lab2_`` prefix, so that ``lab1_tanaka.csv`` and ``lab2_tanaka.csv`` make one row.
"""
from __future__ import annotations

import csv
import math
import re
import statistics
from pathlib import Path

from matplotlib.figure import Figure

from course.labkit.history import read_csv
from course.plots import setup_japanese_font

METRICS = {"gb_s": "メモリ帯域 [GB/s]（第2章）", "tpot_ms": "同時1の TPOT [ms]（第1章）",
           "tok_s": "出力 tok/s の最大（第1章）"}


def _name(path: Path, rows: list[dict]) -> str:
    named = next((r.get("learner") for r in rows if r.get("learner")), "")
    return named or re.sub(r"^lab\d+_", "", path.stem)


def _add(out: dict, who: str, key: str, values) -> None:
    vals = [float(v) for v in values if v not in (None, "") and math.isfinite(float(v))]
    out.setdefault(who, {k: [] for k in METRICS})[key].extend(vals)


def read_class(folder) -> dict[str, dict[str, list[float]]]:
    """{learner: {metric: values}} from the *.csv in ``folder`` (labs 1 and 2; others skipped)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"フォルダ {folder} がありません。受講者の CSV を置いたフォルダを指定してください。"
                                f" / no folder {folder}")
    out: dict[str, dict[str, list[float]]] = {}
    for path in sorted(folder.glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as f:
            header = next(csv.reader(f), [])
        if "gb_s" in header:                                    # lab 2
            with path.open(encoding="utf-8", newline="") as f:
                rows = list(csv.DictReader(f))
            by_run = {r["run"]: r["gb_s"] for r in rows}            # one bandwidth per run
            _add(out, _name(path, rows), "gb_s", by_run.values())
        elif "tok_s" in header and "concurrency" in header:     # lab 1
            rows = [r for r in read_csv(path) if r.get("backend") != "openai"]
            who = _name(path, rows)
            runs: dict[int, list[dict]] = {}
            for r in rows:
                runs.setdefault(r["run"], []).append(r)
            _add(out, who, "tok_s", [max(r["tok_s"] for r in rs) for rs in runs.values()])
            _add(out, who, "tpot_ms", [r["tpot_ms"] for r in rows if r["concurrency"] == 1])
    return out


def spread_lines(machines: dict) -> list[str]:
    """One line per metric: the median of the learners' medians and how far apart the ends are."""
    lines = []
    for key, label in METRICS.items():
        meds = {who: statistics.median(v[key]) for who, v in machines.items() if v[key]}
        if not meds:
            lines.append(f"{label}: データなし")
            continue
        lo, hi = min(meds.values()), max(meds.values())
        ratio = f"、最大 ÷ 最小 = {hi / lo:.1f} 倍" if lo > 0 else ""
        lines.append(f"{label}: {len(meds)} 人、中央値 {statistics.median(meds.values()):.1f}、"
                     f"最小 {lo:.1f}（{min(meds, key=meds.get)}）〜 "
                     f"最大 {hi:.1f}（{max(meds, key=meds.get)}）{ratio}")
    return lines


def plot_spread(machines: dict) -> Figure:
    """Three panels (bandwidth, TPOT, tok/s); a row per learner: median a dot, min-max a line."""
    if not machines:
        raise ValueError("受講者のデータがありません（第1章・第2章のラボの CSV が見つかりません）。"
                         " / no learner data (no lab 1 or lab 2 CSV)")
    setup_japanese_font()
    names = sorted(machines, key=lambda n: -statistics.median(machines[n]["tok_s"] or [0]))
    fig = Figure(figsize=(14, 1.2 + 0.32 * len(names)), layout="constrained")
    axes = fig.subplots(1, len(METRICS), sharey=True)
    for ax, (key, label) in zip(axes, METRICS.items()):
        for y, who in enumerate(names):
            v = machines[who][key]
            if v:
                ax.plot([min(v), max(v)], [y, y], color="tab:gray", lw=2)
                ax.plot([statistics.median(v)], [y], "o", color="tab:blue")
        ax.set(title=label, xlabel=label.split("（")[0])
        ax.set_xlim(left=0)                         # from zero: the ratios between machines show
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(names)), names)
    axes[0].invert_yaxis()
    fig.suptitle(f"教室のマシンの違い（{len(names)} 人、点は中央値・線は実行ごとの最小〜最大）")
    return fig


__all__ = ["METRICS", "plot_spread", "read_class", "spread_lines"]
