"""Lab 1's readings of its concurrency sweep (課題3 and 課題5): what the measured rows show, and the
tasks' predictions decided by the run (``course.labkit.predictions``)::

    print(sweep_reading(rows, prompt_len=64, output_len=32))
    print(verdicts(sweep_predictions(rows)))

What the sweep measures is one burst: every request's prompt is prefilled, then all decode
together. So output tok/s includes the prefill of every prompt, and long prompts cap it near
prefill rate x output / prompt. Above ``max_num_batched_tokens`` prompt tokens in a burst the
engine splits the prefill over steps, and the requests prefilled first wait for the rest.
"""
from __future__ import annotations

import math

from course.labkit.predictions import Prediction
from minimal_engine.config import EngineConfig

STEP_BUDGET = EngineConfig.max_num_batched_tokens   # the lab's engine keeps the default (runtime)


def _wall_ms(row: dict, output_len: int) -> float:
    return row["concurrency"] * output_len / row["tok_s"] * 1000


def sweep_reading(rows: list[dict], prompt_len: int, output_len: int,
                  budget: int = STEP_BUDGET) -> str:
    """Per point: prefill (median TTFT) against the burst's whole time, and its number of steps."""
    first, last = rows[0], rows[-1]
    lines = [f"同時 {first['concurrency']} → {last['concurrency']}: 1ステップ（TPOT）は "
             f"{first['tpot_ms']:.1f} → {last['tpot_ms']:.1f} ms"
             f"（{last['tpot_ms'] / first['tpot_ms']:.2f} 倍）、1ステップで作るトークンは "
             f"{last['concurrency'] / first['concurrency']:.0f} 倍"]
    for r in rows:
        c, tokens = r["concurrency"], r["concurrency"] * prompt_len
        wall = _wall_ms(r, output_len)
        steps = math.ceil(tokens / budget)
        split = (f"予算 {budget:,} トークンを超えるので Prefill が {steps} ステップに分かれます"
                 if steps > 1 else f"1ステップの予算 {budget:,} トークンに収まります")
        lines.append(f"同時 {c:>2}: Prefill（TTFT の中央値 {r['ttft_ms']:.1f} ms）は所要時間 "
                     f"{wall:.0f} ms の {100 * r['ttft_ms'] / wall:.0f}%。"
                     f"プロンプトは合計 {tokens:,} トークンで、{split}")
    return "\n".join(lines)


def sweep_predictions(rows: list[dict]) -> list[Prediction]:
    """課題3 and 課題5's predictions, decided by a sweep's rows (doubling concurrencies)."""
    first, last = rows[0], rows[-1]
    grow = last["concurrency"] / first["concurrency"]
    tpot_ratio = last["tpot_ms"] / first["tpot_ms"]
    out = [Prediction(f"同時リクエスト数を {grow:.0f} 倍にしても、TPOT は {grow / 2:.0f} 倍未満しか伸びない",
                      tpot_ratio < grow / 2,
                      f"TPOT {first['tpot_ms']:.1f} → {last['tpot_ms']:.1f} ms（{tpot_ratio:.2f} 倍）",
                      "1ステップの固定の時間に比べて計算が重い（大きなモデル、スレッドが少ない）。"
                      "モデルを既定に戻し、負荷の警告を確かめる")]
    if len(rows) >= 3:
        gains = [b["tok_s"] / a["tok_s"] for a, b in zip(rows, rows[1:])]
        out.append(Prediction(
            "同時リクエスト数を倍にしたときの tok/s（出力）の伸びは、最初より最後のほうが小さい",
            gains[-1] < gains[0], "倍にするごとの伸び " + "、".join(f"{g:.2f} 倍" for g in gains),
            "スイープの点が少ない。スイープの一覧に大きな値を足す"))
    return out


__all__ = ["STEP_BUDGET", "sweep_predictions", "sweep_reading"]
