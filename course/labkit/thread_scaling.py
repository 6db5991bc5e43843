"""How a machine's peaks grow with the threads (lab 2, task 4), and when a thread sweep cannot be read.

``lab02.threads_sweep`` measures each thread count twice (a forward and a backward pass, after one untimed
warm-up) and keeps each peak's larger value, the smaller one as ``<key>_min`` (``best_of_passes``). The
predictions read the rows as ``course.labs.lab02_explain.facts`` keeps them::

    {"threads": [{"threads": 1, "gflops": ..., "gb_s": ..., "gflops_min": ..., "gb_s_min": ...}, ...],
     "gflops": ..., "gb_s": ..., "roof_threads": 1}      # run_roofline's roof and its thread count

``problems`` lists why a sweep cannot be read (blind reading 2026-12-07 ch02 #1-#3: a saved sweep's 1-thread
row at half run_roofline's 1-thread peaks, and GFLOP/s "growing" 2.49x on 2 cores): two passes more than
``AGREE`` apart, the sweep's row at run_roofline's thread count more than ``AGREE`` from its roof, or GFLOP/s
growing beyond ``SUPERLINEAR`` x the thread ratio (a compute-bound matmul cannot). Then both predictions
print 判定できません with those reasons, and the candidates the run cannot separate.
"""
from __future__ import annotations

from course.labkit.predictions import UNDECIDED, Prediction
from course.labkit.spread import RETRY

SCALING = 0.7           # GFLOP/s must grow by at least this share of the thread ratio
SUPERLINEAR = 1.15      # GFLOP/s above this x the thread ratio: impossible for a compute-bound matmul
AGREE = 1.3             # two measurements of the same peak more than 30 % apart: the sweep is not read
PEAK_KEYS = ("flops_fp32", "flops_bf16", "mm_fp32", "mm_bf16", "linear_fp32", "linear_bf16",
             "bandwidth", "bw_copy", "bw_sum", "bw_matvec")
CANDIDATES = ("候補は、最初の呼び出しの準備（カーネルの選択や新しいバッファのページフォールト）、CPU のクロックの変化、"
              "短い計測の揺れ、load average には表れない短い割り込みで、この測定では分けられません。"
              "「スレッド数ごとの GFLOP/s と GB/s」を押して測り直してください")


def best_of_passes(a: dict, b: dict) -> dict:
    """One thread count's two measurements (``machine_peaks``) as one row: each peak's larger value (a peak is
    a bound: the slower pass was held back), the smaller one kept as ``<key>_min``."""
    out = dict(a)
    for k in PEAK_KEYS:
        if k in a and k in b:
            out[k], out[f"{k}_min"] = max(a[k], b[k]), min(a[k], b[k])
    return out


def _apart(x: float, y: float) -> float:
    return max(x, y) / min(x, y) if min(x, y) > 0 else float("inf")


def problems(f: dict) -> list[str]:
    """Why the sweep in ``f`` cannot be read (Japanese, one item each; [] when it can)."""
    t, out = f["threads"], []
    units = (("gflops", "演算性能", "GFLOP/s", "{:.1f}"), ("gb_s", "帯域", "GB/s", "{:.2f}"))
    for r in t:
        for key, name, unit, fmt in units:
            lo = r.get(f"{key}_min", r[key])
            if _apart(r[key], lo) > AGREE:
                out.append(f"スレッド {r['threads']} の{name}が、2回の測定で {fmt.format(lo)} と "
                           f"{fmt.format(r[key])} {unit} に分かれました")
    roof = next((r for r in t if r["threads"] == f.get("roof_threads")), None)
    for key, name, unit, fmt in units if roof else ():
        if _apart(roof[key], f[key]) > AGREE:
            out.append(f"スイープのスレッド {roof['threads']} の{name} {fmt.format(roof[key])} {unit} が、同じスレッド数で"
                       f"ステップと一緒に測った屋根の {fmt.format(f[key])} {unit} と 3 割以上違います")
    a, b = t[0], t[-1]
    k, flops = b["threads"] / a["threads"], b["gflops"] / a["gflops"]
    if flops > SUPERLINEAR * k:
        out.append(f"GFLOP/s が {flops:.2f} 倍になり、スレッド数の {k:.0f} 倍を超えました。演算律速の行列積は、"
                   "スレッド数が何倍になったかより大きくは伸びないので、スレッドの少ない側の計測が遅くなった疑いがあります")
    return out


class Unreadable(Prediction):
    """判定できません because the sweep itself disagrees (``problems``), not the repeats' spread (``held`` None)."""

    def verdict(self) -> str:
        return f"{UNDECIDED}：{self.text}（{self.basis}：{self.measured}）。{self.otherwise}"


def predictions(f: dict) -> list[Prediction]:
    """GFLOP/s grows nearly in proportion to the threads; GB/s grows less (the ridge moves right). The
    second is judged only where GFLOP/s grew (``note`` says why not); both are Unreadable on ``problems``."""
    t = f["threads"]
    if len(t) < 2:
        return []
    a, b = t[0], t[-1]
    k, flops, bw = b["threads"] / a["threads"], b["gflops"] / a["gflops"], b["gb_s"] / a["gb_s"]
    span = f"スレッド {a['threads']} → {b['threads']}"
    texts = (f"{span} で GFLOP/s はスレッド数にほぼ比例して伸びる（GFLOP/s が何倍になったかが、"
             f"スレッド数が何倍になったかの {SCALING} 倍以上）",
             f"{span} で GB/s の伸びは GFLOP/s の伸びより小さい（リッジポイントは右へ動く）")
    measured = (f"GFLOP/s {a['gflops']:.1f} → {b['gflops']:.1f}（{flops:.2f} 倍）、スレッド {k:.0f} 倍",
                f"GB/s {a['gb_s']:.2f} → {b['gb_s']:.2f}（{bw:.2f} 倍）、GFLOP/s {flops:.2f} 倍、リッジポイント "
                f"{a['gflops'] / a['gb_s']:.2f} → {b['gflops'] / b['gb_s']:.2f} FLOP/B")
    bad = problems(f)
    if bad:
        return [Unreadable(texts[0], None, measured[0], "このスイープは読めません：" + "。".join(bad) + "。" + CANDIDATES),
                Unreadable(texts[1], None, measured[1], "上の行と同じ理由で、このスイープは読めません")]
    out = [
        Prediction(texts[0], flops >= SCALING * k, measured[0],
                   "ほかのプログラムがコアを使っているか、コアの一部がハイパースレッド（同じ演算器を2つのスレッドで"
                   "分け合う）です。負荷の警告を確かめ、ほかのノートブックを止めて測り直してください"),
        Prediction(texts[1], bw < flops, measured[1],
                   "コアが少ないうちは、1コアが同時に待てるメモリの読み込みの数に上限があるので、帯域もコア数とともに"
                   "伸びることがあります。帯域が頭打ちになるのは、コアを増やしてメモリ全体の上限に近づいてからです。"
                   + RETRY),
    ]
    return out if flops >= SCALING * k else out[:1]


def note(f: dict) -> str:
    """Why the second prediction is not judged: GFLOP/s did not grow with the threads ('' when it is judged)."""
    if len(f["threads"]) < 2 or len(predictions(f)) > 1:
        return ""
    return ("判定できません：GB/s と GFLOP/s の伸びの比べ（リッジポイントが右へ動くか）は、GFLOP/s がスレッド数とともに"
            "伸びていないので判定しません（上の行の理由を確かめて測り直してください）")


__all__ = ["AGREE", "CANDIDATES", "PEAK_KEYS", "SCALING", "SUPERLINEAR", "Unreadable", "best_of_passes", "note",
           "predictions", "problems"]
