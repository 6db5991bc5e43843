"""Results out: JSON (vLLM's field names), CSV, a text table with ratios, and the tok/s vs tok/s/user plot.
matplotlib is imported only inside plot_throughput_vs_interactivity (the engine never needs it)."""
from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

COLUMNS = ["backend", "max_concurrency", "num_prompts", "completed", "failed", "duration", "request_throughput",
           "output_throughput", "total_token_throughput", "tok_s_per_user", "median_ttft_ms", "p99_ttft_ms",
           "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms",
           "bound_ttft_ms", "bound_tpot_ms"]


def save_results(rows: list[dict], out_dir: str | Path, name: str = "bench", meta: dict | None = None) -> dict:
    """Write NAME.json ({"meta": ..., "results": rows}) and NAME.csv; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"{name}.json", "csv": out / f"{name}.csv"}
    paths["json"].write_text(json.dumps({"meta": meta or {}, "results": rows}, indent=1, ensure_ascii=False))
    keys = COLUMNS + sorted({k for r in rows for k in r if k not in COLUMNS and not isinstance(r[k], (list, dict))})
    with paths["csv"].open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return paths


def format_table(rows: list[dict]) -> str:
    """One line per run: throughput, interactivity, median TTFT/TPOT with their roofline bounds."""
    head = (f"{'backend':22s} {'C':>4s} {'failed':>6s} {'out tok/s':>10s} {'tok/s/user':>10s} {'TTFT ms':>9s} {'(bound)':>8s} "
            f"{'TPOT ms':>9s} {'(bound)':>8s} {'ITL ms':>8s} {'E2EL ms':>9s}")
    lines = [head]
    for r in rows:
        b1, b2 = r.get("bound_ttft_ms"), r.get("bound_tpot_ms")
        lines.append(f"{r['backend']:22s} {r['max_concurrency']:4d} {r.get('failed', 0):6d} {r['output_throughput']:10.1f} "
                     f"{r['tok_s_per_user']:10.1f} {r['median_ttft_ms']:9.1f} "
                     f"{'' if b1 is None else f'{b1:8.1f}':>8s} {r['median_tpot_ms']:9.1f} "
                     f"{'' if b2 is None else f'{b2:8.1f}':>8s} {r['median_itl_ms']:8.1f} {r['median_e2el_ms']:9.1f}")
        if r.get("failed"):                      # never a silent zero: say what the server answered
            lines.append(f"  ^ {r['failed']} of {r['num_prompts']} requests failed (not counted above): "
                         f"{(r.get('errors') or ['?'])[0]}")
    return "\n".join(lines)


def ratios(rows: list[dict], engine: str = "minimal_engine") -> list[dict]:
    """engine / baseline at each concurrency (and repeat): output throughput (higher is better), median TTFT
    and TPOT (lower is better). A baseline run is paired with the engine run of the same repeat."""
    ours = {(r["max_concurrency"], r.get("repeat", 0)): r for r in rows if r["backend"] == engine}
    out = []
    for r in rows:
        e = ours.get((r["max_concurrency"], r.get("repeat", 0)))
        if r["backend"] == engine or e is None:
            continue
        out.append({"baseline": r["backend"], "max_concurrency": r["max_concurrency"], "repeat": r.get("repeat", 0),
                    "output_throughput_ratio": e["output_throughput"] / r["output_throughput"],
                    "median_ttft_ratio": e["median_ttft_ms"] / r["median_ttft_ms"],
                    "median_tpot_ratio": e["median_tpot_ms"] / r["median_tpot_ms"]})
    return out


def format_ratios(rs: list[dict]) -> str:
    lines = [f"{'engine / baseline':22s} {'C':>4s} {'out tok/s':>10s} {'TTFT':>7s} {'TPOT':>7s}"]
    for r in rs:
        lines.append(f"{r['baseline']:22s} {r['max_concurrency']:4d} {r['output_throughput_ratio']:9.2f}x "
                     f"{r['median_ttft_ratio']:6.2f}x {r['median_tpot_ratio']:6.2f}x")
    return "\n".join(lines)


RATIO_KEYS = ("output_throughput_ratio", "median_ttft_ratio", "median_tpot_ratio")


def median_ratios(rs: list[dict]) -> list[dict]:
    """Over repeats: the median, min and max of each ratio, per baseline and concurrency. On a shared,
    noisy machine the median of alternating runs is steadier than any single run."""
    groups: dict[tuple, list[dict]] = {}
    for r in rs:
        groups.setdefault((r["baseline"], r["max_concurrency"]), []).append(r)
    out = []
    for (baseline, c), g in groups.items():
        row = {"baseline": baseline, "max_concurrency": c, "runs": len(g)}
        for k in RATIO_KEYS:
            v = [r[k] for r in g]
            row[k] = statistics.median(v)
            row[k.replace("_ratio", "_min")], row[k.replace("_ratio", "_max")] = min(v), max(v)
        out.append(row)
    return out


def format_median_ratios(med: list[dict]) -> str:
    def spread(r, name):   # "2.30x (2.06-2.42)"
        return f"{r[name + '_ratio']:.2f}x ({r[name + '_min']:.2f}-{r[name + '_max']:.2f})"
    lines = [f"{'median over repeats':22s} {'C':>4s} {'out tok/s (min-max)':>22s} {'TTFT':>7s} {'TPOT (min-max)':>18s}"]
    for r in med:
        lines.append(f"{r['baseline']:22s} {r['max_concurrency']:4d} {spread(r, 'output_throughput'):>22s} "
                     f"{r['median_ttft_ratio']:6.2f}x {spread(r, 'median_tpot'):>18s}")
    return "\n".join(lines)


def plot_throughput_vs_interactivity(rows: list[dict], path: str | Path | None = None):
    """Output tok/s (y) against tok/s/user (x), one line per backend, points labelled with concurrency
    (InferenceX's Pareto plot). Saves a PNG when path is given; returns the figure."""
    from matplotlib.figure import Figure         # no pyplot: no global backend state is touched
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for backend in dict.fromkeys(r["backend"] for r in rows):
        pts = sorted((r["tok_s_per_user"], r["output_throughput"], r["max_concurrency"])
                     for r in rows if r["backend"] == backend)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=backend)
        for x, y, c in pts:
            ax.annotate(f"C={c}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("interactivity: tok/s/user (= 1000 / median TPOT ms)")
    ax.set_ylabel("output throughput: tok/s")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig
