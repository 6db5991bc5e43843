"""Lab 9's tasks (課題1〜3): each prediction is decided by the runs' numbers (course.labkit.predictions)::

    print(verdicts(task1_predictions(res_128, res_448)))       # 課題1: a longer prompt
    print(verdicts(task2_predictions(res, res_125m)))          # 課題2: llama-125m's shape, the same stream
    print(verdicts(task3_predictions(res, res_poisson)))       # 課題3: Poisson arrivals

Pure functions of ``lab09.run_interference_lab`` results (no engine); tests/course/test_lab09_explain.py plants
contradicting numbers and re-derives the saved verdicts. 課題3 (2) counts the gaps that shared a step with a long
prompt's prefill (course.labkit.itl.prefill_gaps): one per short request decoding then, so it follows how many
decode when the long prompt arrives, a mechanism the run decides, not the spread of ordinary steps.
"""
from __future__ import annotations

from course.labkit.itl import BUSY, STALL_FACTOR, prefill_gaps, singles
from course.labkit.predictions import Prediction


def task1_predictions(short: dict, long_: dict) -> list[Prediction]:
    """課題1: the same budgets, the long prompt at two lengths (``short`` the shorter run)."""
    a, b = singles(short), singles(long_)
    span = f"プロンプト長 {short['prompt_len']} → {long_['prompt_len']}"
    ha, hb, la, lb = a[-1], b[-1], a[0], b[0]
    d_hi, d_lo = hb["p99_itl_ms"] - ha["p99_itl_ms"], lb["p99_itl_ms"] - la["p99_itl_ms"]
    t_hi, t_lo = hb["long_ttft_ms"] - ha["long_ttft_ms"], lb["long_ttft_ms"] - la["long_ttft_ms"]
    return [
        Prediction(f"{span} で、予算が最大（{ha['budget']}）の構成の ITL の最大値と p99 が伸びる",
                   hb["max_itl_ms"] > ha["max_itl_ms"] and hb["p99_itl_ms"] > ha["p99_itl_ms"],
                   f"最大 {ha['max_itl_ms']:.1f} → {hb['max_itl_ms']:.1f} ms、p99 {ha['p99_itl_ms']:.1f} → "
                   f"{hb['p99_itl_ms']:.1f} ms",
                   "1ステップの固定の時間に比べて Prefill の行列積が軽く、長くしても止められたステップがあまり伸びない。"
                   "課題2の大きなモデルの形で試してください。" + BUSY),
        Prediction(f"{span} で、予算が最小（{la['budget']}）の構成は ITL の p99 の伸びが予算 {ha['budget']} より小さく、"
                   "長いプロンプトの TTFT の伸びは大きい",
                   d_lo < d_hi and t_lo > t_hi,
                   f"p99 の伸び 予算 {la['budget']} {d_lo:+.1f} ms・予算 {ha['budget']} {d_hi:+.1f} ms、TTFT の伸び "
                   f"予算 {la['budget']} {t_lo:+.0f} ms・予算 {ha['budget']} {t_hi:+.0f} ms",
                   "ITL の裾は数個の間隔で決まるので、1回の揺れで入れ替わります。" + BUSY),
    ]


def spike_ratio(res: dict) -> float:
    """At the largest budget: the longest gap (a step shared with a whole prefill) / the median ITL."""
    hi = singles(res)[-1]
    return hi["max_itl_ms"] / hi["median_itl_ms"]


def budget_ratio(res: dict) -> float:
    """ITL p99 at the largest budget / at the smallest."""
    rows = singles(res)
    return rows[-1]["p99_itl_ms"] / rows[0]["p99_itl_ms"]


def low_budget_ratio(res: dict) -> float:
    """At the smallest budget: ITL p99 / median. A step there holds at most that many tokens (the decodes and a short
    chunk), so it should stay near a decode-only step; a p99 far above the median there is mostly load."""
    lo = singles(res)[0]
    return lo["p99_itl_ms"] / lo["median_itl_ms"]


def task2_predictions(base: dict, big: dict) -> list[Prediction]:
    """課題2: ``big`` (a larger model's shape) against ``base`` (the default model's run). When anything but the model
    differs (prompt length, decodes, output length, long prompts), the names say so: the ratios then mix the two.
    (2) prints each model's p99 / median at the smallest budget; where the larger model's is beyond STALL_FACTOR,
    the smallest budget's tail is itself long and the reason names the load first."""
    sb, sg, bb, bg = spike_ratio(base), spike_ratio(big), budget_ratio(base), budget_ratio(big)
    lb, lg, lo = low_budget_ratio(base), low_budget_ratio(big), singles(big)[0]["budget"]
    keys = ("prompt_len", "num_decodes", "output_len", "num_long")
    other = [k for k in keys if k in base and k in big and base[k] != big[k]]
    names = f"{big['model']} と既定モデル（同じ流れ: プロンプト長 {base['prompt_len']}）"
    if other:
        names = (f"{big['model']}（プロンプト長 {big['prompt_len']}）と既定モデル（プロンプト長 {base['prompt_len']}）"
                 f"（モデルのほかに {'・'.join(other)} も違うので、モデルだけの差ではありません）")
    heavy = ("予算が最小でも、大きなモデルではチャンクの行列積が Decode のステップに比べて重くなります。"
             "予算の最小をもっと小さくしてください。")
    load = (f"大きなモデルの予算 {lo} の p99 が中央値の {lg:.1f} 倍です。このステップは Decode と短いチャンクだけなので"
            "、Decode だけのステップとあまり変わらないはずで、この裾はまず負荷の揺れを疑います。")
    return [
        Prediction(f"{names}: 予算が最大の構成の「最大の ITL ÷ ITL の中央値」（Prefill と同居したステップが Decode だけの"
                   "ステップの何倍か）が、大きなモデルの形で大きい", sg > sb,
                   f"大きなモデル {sg:.1f} 倍、既定モデル {sb:.1f} 倍",
                   "大きなモデルでは Decode のステップも重みの読み出しで長くなります。プロンプトを長くしてください。" + BUSY),
        Prediction(f"{names}: ITL の p99 の「予算最大 ÷ 予算最小」が、大きなモデルの形で大きい", bg > bb,
                   f"大きなモデル {bg:.1f} 倍、既定モデル {bb:.1f} 倍。予算 {lo} の p99 ÷ 中央値 大きなモデル {lg:.1f} 倍、"
                   f"既定モデル {lb:.1f} 倍",
                   load + BUSY if lg > STALL_FACTOR else heavy + BUSY),
    ]


def task3_predictions(base: dict, poisson: dict) -> list[Prediction]:
    """課題3: Poisson arrivals (``poisson``) against all the short requests at once (``base``), at the largest budget.
    (2): the gaps that shared a step with a long prompt's prefill (one per short request decoding then) are fewer
    under Poisson, because fewer short requests decode when a long prompt arrives."""
    a, b = singles(base)[-1], singles(poisson)[-1]
    pa, pb = prefill_gaps(a) or [], prefill_gaps(b) or []
    two = Prediction(f"予算 {a['budget']} の構成で、長いプロンプトの Prefill と同じステップに入った間隔の数が、ポアソン到着の"
                     "ほうが少ない", len(pb) < len(pa),
                     f"一斉 {len(pa)} 個、ポアソン {len(pb)} 個（長いプロンプト {len(a.get('long_arrivals_s') or [])} 件）",
                     "長いプロンプトが届いたとき、ポアソンでも短いリクエストがほぼ全員 Decode 中でした。rate が高いか、"
                     "このマシンの1ステップが長いと、短いリクエストの Decode が重なります。rate を下げてください")
    return [
        Prediction("ポアソン到着では、ITL の各間隔の時点で Decode 中の短いリクエストの件数が、平均して一斉到着より少ない",
                   b["mean_decoding"] < a["mean_decoding"],
                   f"平均の件数 一斉 {a['mean_decoding']:.2f}、ポアソン {b['mean_decoding']:.2f}",
                   "到着レートが高いと、ポアソンでもほぼ一斉に届きます。rate を下げてください"),
        two,
    ]


__all__ = ["budget_ratio", "low_budget_ratio", "spike_ratio", "task1_predictions", "task2_predictions",
           "task3_predictions"]
