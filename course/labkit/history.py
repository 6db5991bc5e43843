"""Run history: every run (or sweep point) a row; CSV export, a one-line summary, and the class's merge.

    history = []
    add_measurement(history, measure(...))        # one row, run number 1
    add_sweep(history, sweep(...))                 # one row per concurrency, run number 2
    save_csv(history, "lab1_tanaka.csv", learner="tanaka")
    summary_line(history, learner="tanaka")        # one line to paste into the class's chat
    merged = read_csvs(["a.csv", "b.csv"])          # {label: rows} -> plot_merged(merged)

A row holds the settings, the median and min / max over repeats of each metric (``tok_s`` is output
tok/s, ``total_tok_s`` input + output tok/s), and the warnings of that run.
"""
from __future__ import annotations

import csv
import io
import time
from pathlib import Path

from course.labkit.measure import METRICS

SETTINGS = ("run", "kind", "time", "learner", "backend", "base_url", "model", "device", "threads", "arrivals", "rate",
            "late_prompt_len", "prompt_len", "output_len", "concurrency", "repeats")
FIELDS = SETTINGS + tuple(f"{m}{s}" for m in METRICS for s in ("", "_min", "_max")) + ("warnings",)
INT_FIELDS = {"run", "threads", "late_prompt_len", "prompt_len", "output_len", "concurrency", "repeats"}


def _next_run(history: list[dict]) -> int:
    return max((r["run"] for r in history), default=0) + 1


def _row(run: int, kind: str, source: dict, warnings: list[str]) -> dict:
    row = {k: source.get(k) for k in FIELDS}
    row.update(run=run, kind=kind, time=time.strftime("%Y-%m-%d %H:%M:%S"), learner=source.get("learner", ""),
               warnings=" ".join(warnings))
    return row


def add_measurement(history: list[dict], m: dict) -> dict:
    """Append the row of one ``measure`` result; returns it."""
    row = _row(_next_run(history), "run", m, m.get("warnings", []))
    history.append(row)
    return row


def add_sweep(history: list[dict], s: dict) -> list[dict]:
    """Append one row per concurrency of a ``sweep`` result (one run number for all); returns them."""
    run = _next_run(history)
    rows = [_row(run, "sweep", r, s.get("warnings", []) if i == 0 else []) for i, r in enumerate(s["rows"])]
    history.extend(rows)
    return rows


def add_variant_rows(history: list[dict], res: dict, fields: tuple[str, ...], key: str, variants: dict) -> list[dict]:
    """Append one row per variant of one run (the policies, settings, methods or setups a chapter's lab compares),
    all with the same run number; returns them. ``fields`` is the lab's HISTORY_FIELDS: "run", the run's settings
    (taken from ``res``), ``key`` (the variant's name), then the variant's figures (taken from ``variants[name]``)."""
    run, i = _next_run(history), fields.index(key)
    rows = [{"run": run, **{f: res[f] for f in fields[1:i]}, key: name, **{f: r[f] for f in fields[i + 1:]}}
            for name, r in variants.items()]
    history.extend(rows)
    return rows


def sweeps(history: list[dict], last: int | None = None) -> list[list[dict]]:
    """The sweeps in ``history`` (each a list of rows sorted by concurrency), oldest first; the last ``last``."""
    runs: dict[int, list[dict]] = {}
    for r in history:
        if r["kind"] == "sweep":
            runs.setdefault(r["run"], []).append(r)
    out = [sorted(rows, key=lambda r: r["concurrency"]) for _, rows in sorted(runs.items())]
    return out if last is None else out[-last:]


# ---------------------------------------------------------------- CSV
def to_csv(history: list[dict], learner: str | None = None, fields: tuple[str, ...] = FIELDS) -> str:
    """The history as CSV text (columns ``fields``: the kit's FIELDS, or a chapter's own); ``learner`` fills
    the learner column."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in history:
        row = dict(r)
        if learner is not None:
            row["learner"] = learner
        w.writerow({k: "" if row.get(k) is None else row.get(k) for k in fields})
    return buf.getvalue()


def save_csv(history: list[dict], path: str | Path, learner: str | None = None) -> Path:
    path = Path(path)
    path.write_text(to_csv(history, learner), encoding="utf-8")
    return path


def _parse(key: str, value: str):
    if value == "":
        return None
    if key in INT_FIELDS:
        return int(float(value))
    if key in SETTINGS + ("warnings",) and key != "rate":
        return value
    return float(value)


def read_csv(path_or_text) -> list[dict]:
    """Rows of a history CSV (a path, or the CSV text itself), numbers as numbers."""
    text = path_or_text
    if isinstance(path_or_text, Path) or (isinstance(path_or_text, str) and "\n" not in path_or_text):
        text = Path(path_or_text).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    missing = [k for k in ("run", "kind", "concurrency", "tok_s", "tok_s_per_user") if rows and k not in rows[0]]
    if missing:
        raise ValueError(f"ラボの履歴 CSV ではないようです（列 {missing} がありません）。 / not a lab history CSV,"
                         f" missing columns {missing}")
    return [{k: _parse(k, v) for k, v in r.items() if k in FIELDS} for r in rows]


def read_csvs(paths, labels=None) -> dict[str, list[dict]]:
    """Several learners' CSVs: {label: rows}; label = ``labels[i]``, else the learner column, else the file name."""
    out = {}
    for i, p in enumerate(paths):
        rows = read_csv(p)
        label = (labels[i] if labels else None) or (rows[0]["learner"] if rows and rows[0]["learner"] else None)
        label = label or Path(p).stem
        while label in out:
            label += "'"
        out[label] = rows
    return out


def summary_line(history: list[dict], learner: str = "") -> str:
    """One line for the instructor: the best output tok/s of the history and where, TPOT at concurrency 1."""
    if not history:
        return "（まだ実行していません）"
    best = max(history, key=lambda r: r["tok_s"])
    ones = [r for r in history if r["concurrency"] == 1]
    one = f" | 同時1の TPOT {ones[-1]['tpot_ms']:.1f} ms" if ones else ""
    who = f"{learner} | " if learner else ""
    return (f"{who}{best['model']} {best['device'] or best['backend']} {best['threads'] or '-'}スレッド | "
            f"出力 tok/s 最大 {best['tok_s']:.1f}（{best['tok_s_min']:.1f}〜{best['tok_s_max']:.1f}、同時 "
            f"{best['concurrency']}、TPOT {best['tpot_ms']:.1f} ms、合計 tok/s {best['total_tok_s']:.1f}）{one} | "
            f"実行 {len({r['run'] for r in history})} 回")


__all__ = ["FIELDS", "add_measurement", "add_sweep", "read_csv", "read_csvs", "save_csv", "summary_line", "sweeps",
           "to_csv"]
