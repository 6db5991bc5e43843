"""Lab 9's tasks (課題1〜3): each prediction is decided by the runs' numbers (course.labkit.predictions)::

    print(verdicts(task1_predictions(res_128, res_448)))       # 課題1: a longer prompt
    print(verdicts(task2_predictions(res, res_125m)))          # 課題2: llama-125m's shape, the same stream
    print(verdicts(task3_predictions(res, res_poisson)))       # 課題3: Poisson arrivals

Pure functions of ``lab09.run_interference_lab`` results (no engine); a run whose ``load`` says ``disturbed`` turns
every decided prediction of the task into 判定できません (``predictions.under_load``); tests/course/test_lab09_explain.py plants
contradicting numbers and re-derives the saved verdicts. 課題3 (2) counts the gaps that shared a step with a long
prompt's prefill (course.labkit.itl.prefill_gaps): one per short request decoding then, so it follows how many
decode when the long prompt arrives, a mechanism the run decides, not the spread of ordinary steps.
"""
from __future__ import annotations

from course.labkit.itl import BUSY, prefill_gaps, singles, step_split
from course.labkit.predictions import UNDECIDED, Prediction, under_load
from minimal_engine.engine.metrics import percentile


def task1_predictions(short: dict, long_: dict) -> list[Prediction]:
    """課題1: the same budgets, the long prompt at two lengths (``short`` the shorter run)."""
    a, b = singles(short), singles(long_)
    span = f"プロンプト長 {short['prompt_len']} → {long_['prompt_len']}"
    ha, hb, la, lb = a[-1], b[-1], a[0], b[0]
    d_hi, d_lo = hb["p99_itl_ms"] - ha["p99_itl_ms"], lb["p99_itl_ms"] - la["p99_itl_ms"]
    t_hi, t_lo = hb["long_ttft_ms"] - ha["long_ttft_ms"], lb["long_ttft_ms"] - la["long_ttft_ms"]
    return under_load([
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
    ], short.get("load"), long_.get("load"))


def spike_ratio(res: dict) -> float:
    """At the largest budget: the longest gap (a step shared with a whole prefill) / the median ITL."""
    hi = singles(res)[-1]
    return hi["max_itl_ms"] / hi["median_itl_ms"]


def budget_ratio(res: dict) -> float:
    """ITL p99 at the largest budget / at the smallest."""
    rows = singles(res)
    return rows[-1]["p99_itl_ms"] / rows[0]["p99_itl_ms"]


# The CPU verdict's margin for "about the same" step length: the chunk step must be longer than this times a
# decode-only step. On a GPU no prediction is made (``_chunk_prediction``).
GPU_NEAR = 1.3


def chunk_step_ratio(res: dict) -> tuple[float, float, int, int] | None:
    """At the smallest budget, from the run's step records (course.labkit.itl.step_split): (median gap of the steps
    that carried a prefill chunk, median gap of the other, decode-only steps, their counts). None without both."""
    split = step_split(singles(res)[0])
    if not split or not split[0] or not split[1]:
        return None
    return percentile(split[0], 50), percentile(split[1], 50), len(split[0]), len(split[1])


def _chunk_prediction(base: dict, big: dict, names: str) -> Prediction:
    """課題2 (3): the smallest budget's chunk step against a decode-only step, in the larger model. CPU (float32): the
    chunk's extra tokens add their matmuls to the step, so it is longer than GPU_NEAR x a decode-only step, and the
    time added (ms) is larger than in the default model (heavier matmuls per token). A GPU (the run's device is not
    the CPU): not judged (``NotJudged``). The engine replays decode-only steps as CUDA graphs and launches a chunk
    step's kernels one by one (model_runner.py, cuda_graphs.py), so the ratio mixes launch overhead with the matmuls."""
    lo, cb, cg = singles(big)[0], chunk_step_ratio(base), chunk_step_ratio(big)
    chunk = lo["budget"] - big["num_decodes"] if "num_decodes" in big else None
    cpu = big.get("device", "cpu") == "cpu"
    text = (f"{names}: 予算が最小（{lo['budget']}）の構成で、大きなモデルの形のチャンクの入ったステップの間隔の中央値が"
            + (f"、Decode だけのステップの {GPU_NEAR} 倍より長く、増えた時間が既定モデルより大きい（CPU）" if cpu else
               "と、Decode だけのステップの間隔の中央値の比（GPU）"))
    if cb is None or cg is None:
        return Prediction(text, False, "チャンクの入ったステップか Decode だけのステップの間隔がありません",
                          "長いプロンプトの到着前後に Decode だけのステップがありませんでした。出力長を伸ばしてください")
    rg, rb = cg[0] / cg[1], cb[0] / cb[1]
    measured = (f"大きなモデル {cg[0]:.1f} ÷ {cg[1]:.1f} ms = {rg:.2f} 倍（間隔 {cg[2]} 個と {cg[3]} 個）、既定モデル "
                f"{cb[0]:.1f} ÷ {cb[1]:.1f} ms = {rb:.2f} 倍。増えた時間 大きなモデル {cg[0] - cg[1]:.1f} ms、既定モデル "
                f"{cb[0] - cb[1]:.1f} ms" + (f"（チャンクは最大 {chunk} トークン）" if chunk else ""))
    if cpu:
        return Prediction(text, rg > GPU_NEAR and cg[0] - cg[1] > cb[0] - cb[1], measured,
                          "チャンクの行列積より、1ステップの固定の時間や負荷の揺れが大きく出ました。" + BUSY)
    return NotJudged(text, None, measured,              # held None: not decided, a disturbed run leaves it
                     "GPU では、このエンジンは Decode だけのステップを CUDA グラフでまとめて起動し、チャンクの入ったステップは"
                     "カーネルを1つずつ起動します。比は増えたトークンの行列積のほかにこの起動のしかたの違いでも変わるので、"
                     "予想を立てていません")


class NotJudged(Prediction):
    """A comparison the lab prints without a prediction (``otherwise`` says why): 判定しません."""

    def verdict(self) -> str:
        return f"判定しません：{self.text}（{self.basis}：{self.measured}）。{self.otherwise}"


# p99 at the smallest budget above this x its own chunk steps' median: p99 was set by a few unusually slow steps
SLOW_STEP = 1.5


class Unreadable(Prediction):
    """A comparison whose numbers the run shows cannot be read (``otherwise`` says why): 判定できません."""

    def verdict(self) -> str:
        return f"{UNDECIDED}：{self.text}（{self.basis}：{self.measured}）。{self.otherwise}"


def slow_tail(res: dict) -> tuple[float, float] | None:
    """At the smallest budget: (p99 ITL, median gap of the steps that carried a prefill chunk). None without the split."""
    c = chunk_step_ratio(res)
    return None if c is None else (singles(res)[0]["p99_itl_ms"], c[0])


def _p99_prediction(text: str, held: bool, measured: str, otherwise: str, base: dict, big: dict) -> Prediction:
    """課題2 (2). At the smallest budget p99 should be a typical chunk step (the chunk steps are most of the gaps). When
    it is above SLOW_STEP x their median in either model, a few steps far slower than the others set it: one slow step
    gives every decoding request a long gap, and p99 reads only the top few gaps. The ratio then measures those steps,
    not the budget, and the run cannot tell what made them slow: 判定できません, with the candidates."""
    tails = {"大きなモデル": slow_tail(big), "既定モデル": slow_tail(base)}
    bad = [k for k, t in tails.items() if t and t[0] > SLOW_STEP * t[1]]
    if not bad:
        return Prediction(text, held, measured, otherwise)
    detail = "、".join(f"{k} {p:.1f} ÷ {m:.1f} ms = {p / m:.2f} 倍" for k, (p, m) in
                       ((k, t) for k, t in tails.items() if t))
    return Unreadable(text, None, f"{measured}。予算最小の p99 ÷ チャンクの入ったステップの中央値 "
                                  f"{detail}",
                      f"{'と'.join(bad)}の予算最小の p99 が、チャンクの入ったステップの中央値の {SLOW_STEP} 倍を超えました。"
                      "1つのステップが遅いと、そのとき Decode 中の全員の間隔が一度に長くなり、p99 は上位の数個の間隔で"
                      "決まります。つまりこの p99 は、ふつうのチャンクのステップではなく、数回の特に遅いステップの長さです。"
                      "この実行では、遅くなった原因を区別できません。候補は、その形の計算を初めてするときの準備、メモリの"
                      "確保、Python のガベージコレクション、CPU のクロックの変化です。測り直してください")


def task2_predictions(base: dict, big: dict) -> list[Prediction]:
    """課題2: ``big`` (a larger model's shape) against ``base`` (the default model's run). When anything but the model
    differs (prompt length, decodes, output length, long prompts), the names say so: the ratios then mix the two.
    (3) compares, at the smallest budget, the steps that carried a chunk with the decode-only steps, identified from
    the step records (not p99 / median: there the chunk steps can be most of the gaps)."""
    sb, sg, bb, bg = spike_ratio(base), spike_ratio(big), budget_ratio(base), budget_ratio(big)
    keys = ("prompt_len", "num_decodes", "output_len", "num_long")
    other = [k for k in keys if k in base and k in big and base[k] != big[k]]
    names = f"{big['model']} と既定モデル（同じ流れ: プロンプト長 {base['prompt_len']}）"
    if other:
        names = (f"{big['model']}（プロンプト長 {big['prompt_len']}）と既定モデル（プロンプト長 {base['prompt_len']}）"
                 f"（モデルのほかに {'・'.join(other)} も違うので、モデルだけの差ではありません）")
    heavy = ("比の分母の予算最小の p99 は、Decode だけのステップより短くはなりません（チャンクの入ったステップの長さは下の"
             "行）。大きなモデルではそのステップの多くが重みを読む時間で、既定モデルでは Python などの固定の時間です。"
             "分子の Prefill の計算に比べたこの時間の重さで、比の大小が決まります。この CPU では大きなモデルの比が小さく"
             "出ました。")
    return under_load([
        Prediction(f"{names}: 予算が最大の構成の「最大の ITL ÷ ITL の中央値」（Prefill と同居したステップが Decode だけの"
                   "ステップの何倍か）が、大きなモデルの形で大きい", sg > sb,
                   f"大きなモデル {sg:.1f} 倍、既定モデル {sb:.1f} 倍",
                   "大きなモデルでは Decode のステップも重みの読み出しで長くなります。プロンプトを長くしてください。" + BUSY),
        _p99_prediction(f"{names}: ITL の p99 の「予算最大 ÷ 予算最小」が、大きなモデルの形で大きい", bg > bb,
                        f"大きなモデル {bg:.1f} 倍、既定モデル {bb:.1f} 倍", heavy + BUSY, base, big),
        _chunk_prediction(base, big, names),
    ], base.get("load"), big.get("load"))


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
    return under_load([
        Prediction("ポアソン到着では、ITL の各間隔の時点で Decode 中の短いリクエストの件数が、平均して一斉到着より少ない",
                   b["mean_decoding"] < a["mean_decoding"],
                   f"平均の件数 一斉 {a['mean_decoding']:.2f}、ポアソン {b['mean_decoding']:.2f}",
                   "到着レートが高いと、ポアソンでもほぼ一斉に届きます。rate を下げてください"),
        two,
    ], base.get("load"), poisson.get("load"))


__all__ = ["GPU_NEAR", "SLOW_STEP", "NotJudged", "Unreadable", "budget_ratio", "slow_tail", "chunk_step_ratio", "spike_ratio", "task1_predictions",
           "task2_predictions",
           "task3_predictions"]
