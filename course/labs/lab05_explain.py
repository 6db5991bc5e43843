"""Chapter 5's lab: its tasks' predictions, decided by the runs (``course.labkit.predictions``).

    runs = {o: lab05.run_batching_lab(**dict(d, output_len=o), policies=("continuous", "static"))
            for o in TASK1_OUTPUT_LENS}
    print(task1_table(runs))
    print(verdicts(task1_predictions(runs)))

課題1 varies the output length (maximum) ``o``. The lengths are uniform in [o/4, o], so the
absolute spread (max - min) grows with ``o`` while the relative spread stays; the static batch's
idle share (1 - sum o_i / (B * max o_i), summed over the groups) does not grow, nor does the
static policy's loss with it.
"""
from __future__ import annotations

from course.labkit.predictions import Prediction
from minimal_engine import calculators as calc

TASK1_OUTPUT_LENS = (16, 64, 128)


def idle_share(lens: list[int], group: int) -> float:
    """The static policy's idle share over all its groups of ``group`` (the lesson's §2 formula)."""
    groups = [lens[i:i + group] for i in range(0, len(lens), group)]
    return sum(map(calc.static_batch_idle_slots, groups)) / sum(len(g) * max(g) for g in groups)


def task1_rows(runs: dict[int, dict]) -> list[dict]:
    """Per output length: the spread, the idle share and continuous / static output tok/s."""
    rows = []
    for o, res in sorted(runs.items()):
        lens, p = res["output_lens"], res["policies"]
        rows.append({"output_len": o, "spread": max(lens) - min(lens),
                     "idle_share": idle_share(lens, res["concurrency"]),
                     "ratio": p["continuous"]["tok_s"] / p["static"]["tok_s"]})
    return rows


def task1_table(runs: dict[int, dict]) -> str:
    return "\n".join(f"出力長（最大）{r['output_len']:>4}: 最大 − 最小 {r['spread']:>3}、静的の空き枠 "
                     f"{100 * r['idle_share']:.1f} %、連続 / 静的の出力 tok/s {r['ratio']:.2f} 倍"
                     for r in task1_rows(runs))


def task1_predictions(runs: dict[int, dict]) -> list[Prediction]:
    """課題1's predictions, from the shortest and the longest output length run."""
    rows = task1_rows(runs)
    lo, hi = rows[0], rows[-1]
    span = f"出力長（最大）{lo['output_len']} → {hi['output_len']}"
    return [
        Prediction(f"{span} で最大 − 最小は広がるが、静的の空き枠の割合は増えない",
                   hi["spread"] > lo["spread"] and hi["idle_share"] <= lo["idle_share"] + 0.02,
                   f"最大 − 最小 {lo['spread']} → {hi['spread']}、空き枠 {100 * lo['idle_share']:.1f} → "
                   f"{100 * hi['idle_share']:.1f} %",
                   "乱数の種やリクエスト数を変えると、組ごとの最長の出力長が変わる。種を変えて平均を見る"),
        Prediction(f"{span} で、連続 / 静的の出力 tok/s の比は 1.1 倍を超えて広がらない",
                   hi["ratio"] < 1.1 * lo["ratio"],
                   f"連続 / 静的 {lo['ratio']:.2f} → {hi['ratio']:.2f} 倍",
                   "出力が短いと 64 トークンの Prefill が実行時間の多くを占め、Decode の空き枠の差が tok/s に"
                   "出にくい（出力が長いほど出やすい）。ほかのプログラムが CPU を使っていれば、負荷の警告を確かめ、"
                   "繰り返しを増やして測り直す"),
    ]


__all__ = ["TASK1_OUTPUT_LENS", "idle_share", "task1_predictions", "task1_rows", "task1_table"]
