"""Chapter 6's predictions, decided by the run (``course.labkit.predictions``): lab 6's tasks and the
readings of lesson 6 §6-§7 that interpret a measurement::

    runs = {b: lab06.run_quant_lab(**dict(d, batch=b)) for b in TASK1_BATCHES}
    print(task1_table(runs)); print(verdicts(task1_predictions(runs)))         # 課題1: batch vs INT8's gain
    caps = {t: lab06.kv_capacity(tokens_per_user=t) for t in TASK2_TOKENS}
    print(task2_table(caps)); print(verdicts(task2_predictions(caps)))         # 課題2: users per KV format
    rows = outlier_rows(W, factor=50)
    print(outlier_table(rows)); print(verdicts(outlier_predictions(rows)))     # 課題3: one outlier
    print(verdicts(kernel_predictions(kernel_rows) + batch_predictions(res)))   # lesson §7
    print(quality_reading(rows)); print(verdicts(quality_predictions(rows)))    # lesson §6, lab

課題1's CPU mechanism: INT8 runs `_weight_int8pack_mm` up to INT8PACK_MAX_ROWS rows (time ~ rows here) and above
that dequantizes the whole weight every step (an engine choice; a fused W8A16 GPU GEMM does not pay it). Each run
re-measures batch 1: the spread of those ratios is the noise allowed for (task1_margin). 課題3 scores the rows
without the outlier against the original weight (a whole-matrix error would divide by the outlier's own norm).
"""
from __future__ import annotations

import math

from course.labkit.predictions import UNDECIDED, Prediction, under_load
from course.labkit.noise import load_sentence_ja, spread_sentence_ja
from minimal_engine.features.quantization import INT8PACK_MAX_ROWS

TASK1_BATCHES = (2, 8, 32)
TASK2_TOKENS = (128, 512)
OUTLIER_FORMATS = ("int8_tensor", "int8_channel", "int4_g32", "nvfp4", "fp8_e4m3_tensor")
CONTAINED = ("int8_channel", "int4_g32", "nvfp4")          # a scale per row, group or block
NEAR_ONE = 0.9            # 課題1: "the ratio comes near 1 or above it"
NOISE_MARGIN = 0.05       # 課題1, §7: a ratio counts as larger than batch 1's only by more than this
JUDGED_MIN_BATCH = 8      # 課題1: batch 2 adds one row, a change smaller than the noise; judged from here
KV_TOLERANCE = 0.15       # 課題2: "about 2x / about 4x" = within 15 %
QUALITY_TOLERANCE = 0.01  # nats/char: "cross-entropy barely changes"
# §7: the largest per-weight INT8 / BF16 the course measured (1.14), from benchmarks/README.md "Linear kernel for one
PER_WEIGHT_MAX = (1 / 14.4) / (2 / 32.7)   # row" (2026-11-30, weights from memory: int8pack 14.4, ATen BF16 32.7 GB/s)


# ---------------------------------------------------------------- 課題1 and lesson §7: batch and kernel
def task1_rows(runs: dict[int, dict]) -> list[dict]:
    """Per batch B (one run_quant_lab result each): INT8 / BF16 TPOT at batch 1 and at batch B."""
    return [{"batch": b, "b1": res["ratios"]["tpot_b1"], "bB": res["ratios"]["tpot_bB"],
             "int8pack": "_weight_int8pack_mm" in (res["settings"]["int8"].get("kernels") or "")}
            for b, res in sorted(runs.items())]


def _path(row: dict, max_rows: int) -> str:
    return "int8pack" if row["int8pack"] and row["batch"] <= max_rows else "逆量子化してから行列積"


def task1_table(runs: dict[int, dict], max_rows: int = INT8PACK_MAX_ROWS) -> str:
    return "\n".join(f"バッチ {r['batch']:>2}: TPOT の比（INT8 ÷ BF16）バッチ 1 で {r['b1']:.2f}、バッチ {r['batch']} で "
                     f"{r['bB']:.2f}（バッチ {r['batch']} の INT8 の経路: {_path(r, max_rows)}）"
                     for r in task1_rows(runs))


def _signed(x: float) -> str:
    """``+0.0010`` / ``-0.0004``, and ``±0.0000`` where the value rounds to zero (never ``-0.0000``)."""
    return "±0.0000" if round(x, 4) == 0 else f"{x:+.4f}"


def batch1_spread(rows: list[dict]) -> tuple[float, float, float]:
    """(median, lowest, highest) of the batch-1 ratios: each run re-measures the same batch-1 configuration, so
    their spread is the run-to-run noise of this machine at this moment."""
    b1 = sorted(r["b1"] for r in rows)
    mid = len(b1) // 2
    med = b1[mid] if len(b1) % 2 else (b1[mid - 1] + b1[mid]) / 2
    return med, b1[0], b1[-1]


def task1_margin(rows: list[dict]) -> float:
    """How much larger than batch 1's ratio a batch-B ratio must be to count: NOISE_MARGIN, or the measured
    spread of the batch-1 ratios where that is wider."""
    _, lo, hi = batch1_spread(rows)
    return max(NOISE_MARGIN, hi - lo)


def batch1_note(first: dict, runs: dict[int, dict]) -> str:
    """One line setting the lab's first run (its batch-1 ratio) beside the batch-1 ratios of 課題1's runs: the
    same configuration measured again, so a gap between them is noise, not a mechanism."""
    med, lo, hi = batch1_spread(task1_rows(runs))
    x = first["ratios"]["tpot_b1"]
    where = "の範囲の中" if lo <= x <= hi else ("の範囲の外（同じ設定でも、測るときの条件でこれだけ変わります。候補のほかの"
                                                "負荷と CPU のクロックは、この実行からは分けられません）")
    return (f"同じバッチ 1 の設定を測り直した比: 最初の実行 {x:.2f}、課題1の {len(runs)} 回 {lo:.2f}〜{hi:.2f}"
            f"（中央値 {med:.2f}）。最初の実行は課題1{where}")


def memory_reading(far: list[dict], runs: dict[int, dict], near: list[dict] = ()) -> str:
    """The 1-row int8pack / BF16 in cache (``near``), from memory (``far``) and the engine's batch-1 ratios in one line:
    INT8 slower from memory yet faster in the engine means the gain is not half the DRAM bytes (reviews11 ch06 #7)."""
    f1 = next(r["int8pack_over_bf16"] for r in far if r["rows"] == 1)
    n1 = next((r["int8pack_over_bf16"] for r in near if r["rows"] == 1), None)
    _, lo, hi = batch1_spread(task1_rows(runs))
    head = ("1 行の int8pack ÷ BF16: " + (f"キャッシュに収まる大きさ {n1:.2f}、" if n1 is not None else "")
            + f"メモリから読む大きさ {f1:.2f}。エンジンのバッチ 1 の比 {lo:.2f}〜{hi:.2f}。")
    if f1 > 1 + NOISE_MARGIN and hi < 1 - NOISE_MARGIN:
        return head + ("メモリから読む条件では INT8 のカーネルが遅いのに、エンジンでは INT8 が速いので、エンジンの得は DRAM から"
                       "読むバイト数が半分になることでは説明できません。候補は、既定モデルの小さな重みが CPU のキャッシュに残り、"
                       "キャッシュの中の比に近い条件で動いていることです（エンジンの中では測っていません）")
    if f1 < 1 - NOISE_MARGIN and hi < 1 - NOISE_MARGIN:
        return head + "メモリから読む条件でも INT8 のカーネルが速いので、読むバイト数の得もエンジンの得の候補に残ります"
    return head + f"この組み合わせからは、エンジンの得がどの条件の比から来るかを決められません（差の目安 {NOISE_MARGIN}）"


def task1_predictions(runs: dict[int, dict]) -> list[Prediction]:
    """Judged only for batches >= JUDGED_MIN_BATCH (batch 2's one extra row moves the ratio by less than the noise),
    against the median of all runs' batch-1 ratios +- the margin; within it: Undecided, as lesson §7."""
    rows = task1_rows(runs)
    (med, lo, hi), margin = batch1_spread(rows), task1_margin(rows)
    judged = [r for r in rows if r["batch"] >= JUDGED_MIN_BATCH]
    pairs = "、".join(f"バッチ {r['batch']} {r['bB']:.2f}" for r in judged)
    noise = (f"比の差が、同じバッチ 1 の設定を測り直した揺れの幅 {margin:.2f} に収まるので、この実行からは決められません。揺れの候補"
             "（ほかのプログラムの負荷、CPU のクロックの変化）はこの実行では分けられません。repeats を増やして測り直します（レッスン §7 と同じ規則です）")
    up = bool(judged) and all(r["bB"] > med + margin for r in judged)
    t1 = (f"バッチ {JUDGED_MIN_BATCH} 以上では、TPOT の比（INT8 ÷ BF16）がバッチ 1 の比（{len(rows)} 回の実行の中央値）より、"
          "揺れの幅を超えて大きい（INT8 の得が減るか損になる）")
    m1 = f"バッチ 1 の比 {lo:.2f}〜{hi:.2f}（中央値 {med:.2f}、揺れの幅 {margin:.2f}）、{pairs}"
    last = rows[-1]
    t2, m2 = f"最大のバッチ {last['batch']} では、比が {NEAR_ONE} 以上（1 に近づくか 1 を超える）", f"バッチ {last['batch']} の比 {last['bB']:.2f}（揺れの幅 {margin:.2f}）"
    return under_load([          # within the noise (no judged batch below median - margin, or near NEAR_ONE): undecided
        Undecided(t1, None, m1, noise) if not up and not any(r["bB"] < med - margin for r in judged) else
        Prediction(t1, up, m1,
                   f"まず測定の揺れです（同じ設定のバッチ 1 の比が {lo:.2f}〜{hi:.2f}）。repeats を増やして測り直します。揺れが小さいのに外れたら、"
                   "カーネルの表で int8pack の列が行数とともに伸びるかを見ます。もう1つの候補は重みの置き場所です（上の「1 行の int8pack ÷ BF16」の行）"),
        Undecided(t2, None, m2, noise) if abs(last["bB"] - NEAR_ONE) <= margin else
        Prediction(t2, last["bB"] >= NEAR_ONE, m2,
                   "まず測定の揺れ（同じ設定を測り直して比べる）。揺れでなければ、この CPU では「逆量子化してから行列積」が"
                   "BF16 の行列積と同じくらい速い。カーネルの表の 32 行の行で、逆量子化と BF16 の列を比べる"),
    ], *(r.get("load") for r in runs.values()))      # a disturbed run: 判定できません


class Undecided(Prediction):
    """A comparison smaller than the measured noise: the run cannot decide it (lesson §7)."""
    def verdict(self) -> str:
        return f"{UNDECIDED}（差が揺れより小さい）：{self.text}（{self.basis}：{self.measured}）。{self.otherwise}"


def _undecided_reason(runs: list[dict], b1s: list[float], kernel_b1=()) -> str:
    """Load average vs cores, repeat spreads, batch-1 ratios above every per-weight ratio and 1 (lesson 6 §7)."""
    kernel_b1 = [x for x in kernel_b1 if x == x]                   # NaN: int8pack not measured on this CPU
    out = [load_sentence_ja([(r.get("load1"), r.get("cores")) for r in runs]),
           spread_sentence_ja([r.get("b1_repeat_ratios") for r in runs], "1 回の実行の中の繰り返し（BF16 と INT8 を交互に"
                              "測った組）ごとのバッチ 1 の比")]
    beyond = [x for x in b1s if x > max([1.0, PER_WEIGHT_MAX, *kernel_b1]) + NOISE_MARGIN]
    if beyond:
        k = f"カーネル単体の1行の比は {min(kernel_b1):.2f}〜{max(kernel_b1):.2f}、" if kernel_b1 else ""
        out.append(f"バッチ 1 の比 {'、'.join(f'{x:.2f}' for x in beyond)} は、INT8 のカーネルで説明できる範囲を超えています（"
                   f"{k}重みをメモリから読む条件で講座のマシンが測った重み1個あたりの比も最大 {PER_WEIGHT_MAX:.2f}）。"
                   "線形層以外の時間はどちらの設定でも同じなので、エンジンの比はこれらと 1 のあいだに来るはずです。"
                   "この実行は、繰り返しの間で変わった条件（ほかのプログラムの負荷、CPU のクロック）のどれによるかを分けられません")
    return "。".join(x for x in out if x)


def batch_predictions(res: dict, b1_again=(), kernel_b1=()) -> list[Prediction]:
    """Lesson §7: batch B's ratio against batch 1's of this run and ``b1_again`` (re-runs: results or ratios); margin
    as in 課題1, within it 「判定できません」 with _undecided_reason (``kernel_b1``: the table's one-row ratios)."""
    runs = [res, *(r for r in b1_again if isinstance(r, dict))]
    b1s = [res["ratios"]["tpot_b1"], *(r["ratios"]["tpot_b1"] if isinstance(r, dict) else r for r in b1_again)]
    rows = [{"b1": x} for x in b1s]
    (med, lo, hi), margin = batch1_spread(rows), task1_margin(rows)
    bB, b = res["ratios"]["tpot_bB"], res["batch"]
    text = f"バッチ {b} の TPOT の比（INT8 ÷ BF16）はバッチ 1 の比（中央値）より揺れの幅を超えて大きく、{NEAR_ONE} 以上"
    measured = (f"バッチ 1 で {'、'.join(f'{x:.2f}' for x in b1s)}（{len(b1s)} 回の中央値 {med:.2f}、揺れの幅 {margin:.2f}）、"
                f"バッチ {b} で {bB:.2f}")
    if abs(bB - med) <= margin:
        reason = _undecided_reason(runs, b1s, kernel_b1)
        return [Undecided(text, None, measured,         # held None: never decided, whatever the load
                          f"バッチ {b} の比とバッチ 1 の比の差が、同じバッチ 1 の設定を測り直したときの揺れより小さいので、"
                          "この実行からは決められません。" + (f"この実行で測った値: {reason}。" if reason else "")
                          + "repeats を増やして測り直します（ラボの課題1も同じ幅で判定します）")]
    return under_load([Prediction(text, bB > med + margin and bB >= NEAR_ONE, measured,
                       "まず負荷の揺れ（負荷の警告を確かめ、測り直す）。揺れでなければ、この CPU では INT8 のカーネルが"
                       "大きなバッチでも速い。ラボの課題1でバッチを変えて確かめる")], *(r.get("load") for r in runs))


def growth(rows: list[dict], key: str) -> tuple[float, float]:
    """(time ratio, rows ratio) from the first to the last row count of lab06.kernel_times rows."""
    a, z = rows[0], rows[-1]
    return z[key] / a[key], z["rows"] / a["rows"]


def kernel_predictions(rows: list[dict], shape: str = "") -> list[Prediction]:
    """int8pack's time ~ rows (log-log exponent >= 0.7) and, at the most rows, more per row than BF16; from the first
    count >= 2 where two exist (BF16's 1 row is ATen's mat-vec: an exponent from it measures the switch, reviews11 #3)."""
    rows = [r for r in rows if r["rows"] >= 2] if sum(r["rows"] >= 2 for r in rows) >= 2 else rows
    t8, r = growth(rows, "int8pack_us")
    tb, _ = growth(rows, "bf16_us")
    if math.isnan(t8):
        return [Prediction(f"{shape}int8pack の時間は行数にほぼ比例して伸びる", False,
                           "この CPU では `_weight_int8pack_mm` が確認に通らず、測っていない",
                           "エンジンはこの CPU では INT8 をいつも逆量子化してから計算します")]
    e8, eb = math.log(t8) / math.log(r), math.log(tb) / math.log(r)
    first, z, last = rows[0]["rows"], rows[-1], rows[-1]["rows"]
    return [Prediction(f"{shape}行数 {first} → {last} で、int8pack の時間は行数にほぼ比例して伸び（伸びの指数 0.7 以上）、"
                       f"{last} 行では1行あたりの時間が BF16 より長い",
                       e8 >= 0.7 and z["int8pack_us"] > z["bf16_us"],
                       f"int8pack {t8:.1f} 倍、BF16 {tb:.1f} 倍（行数は {r:.0f} 倍。指数 {e8:.2f}、{eb:.2f}）、{last} 行で1行あたり "
                       f"int8pack {z['int8pack_us'] / last:.1f} µs、BF16 {z['bf16_us'] / last:.1f} µs",
                       "まず測定の揺れを疑います（ほかの負荷、CPU のクロック、最初の呼び出しの準備。この実行からは分けられません）。"
                       "測り直しても同じなら、この CPU の `_weight_int8pack_mm` は行をまとめて計算できていて、"
                       "エンジンの INT8PACK_MAX_ROWS（16 行）の切り替えは、このマシンには合わないかもしれない")]


# ---------------------------------------------------------------- 課題2: KV formats and users
def task2_table(caps: dict[int, list[dict]]) -> str:
    return "\n".join(f"{t} トークン: " + "、".join(f"{r['kv']} {r['users']} リクエスト（{r['blocks']} ブロック）"
                                                 for r in rows) for t, rows in sorted(caps.items()))


def _ratio(a: int, b: int) -> float: return a / b if b else math.inf  # noqa: E704


def task2_predictions(caps: dict[int, list[dict]]) -> list[Prediction]:
    out = []
    for t, rows in sorted(caps.items()):
        u = {r["kv"]: r["users"] for r in rows}
        vs_bf16 = [_ratio(u[k], u["bf16"]) for k in ("fp8", "int8")]
        vs_f32 = [_ratio(u[k], u["float32"]) for k in ("fp8", "int8")]
        ok = (all(abs(x - 2) <= 2 * KV_TOLERANCE for x in vs_bf16)
              and all(abs(x - 4) <= 4 * KV_TOLERANCE for x in vs_f32))
        out.append(Prediction(f"{t} トークンのリクエスト: FP8・INT8 に入る数は BF16 の2倍前後、float32 の4倍前後"
                              f"（ずれ {KV_TOLERANCE:.0%} 以内）", ok,
                              f"float32 {u['float32']}、BF16 {u['bf16']}、FP8 {u['fp8']}、INT8 {u['int8']} リクエスト",
                              "入る数はブロック単位で切り捨てるので、1リクエストのブロック数に比べてプールが小さいと"
                              "比がずれる（0 件の形式があれば比は出ない）。kv_cache_memory を大きくして試す"))
    return out


# ---------------------------------------------------------------- 課題3: one outlier
def outlier_rows(w, factor: float = 50.0, fmts=OUTLIER_FORMATS) -> list[dict]:
    """w[0, 0] set to factor x max|w|; per format the relative error of the other rows (w[1:]) against
    the original w, before and after, and of the outlier row's other values."""
    from course.demos import formats
    w_out, rows = w.clone(), []
    w_out[0, 0] = factor * w.abs().max()
    for f in fmts:
        q, q_out = formats.fake_quantize(w, f)[0], formats.fake_quantize(w_out, f)[0]
        rows.append({"format": f, "label": formats.FORMATS[f][0], "factor": factor,
                     "rest_before": formats.relative_error(w[1:], q[1:]),
                     "rest_after": formats.relative_error(w[1:], q_out[1:]),
                     "row_before": formats.relative_error(w[0, 1:], q[0, 1:]),
                     "row_after": formats.relative_error(w[0, 1:], q_out[0, 1:])})
    return rows


def outlier_table(rows: list[dict]) -> str:
    return "\n".join(f"{r['format']:<16} ほかの行 {100 * r['rest_before']:6.2f} → {100 * r['rest_after']:6.2f} %、"
                     f"外れ値の行のほかの値 {100 * r['row_before']:6.2f} → {100 * r['row_after']:6.2f} %"
                     for r in rows)


def outlier_predictions(rows: list[dict]) -> list[Prediction]:
    by = {r["format"]: r for r in rows}
    k = lambda f: by[f]["rest_after"] / by[f]["rest_before"]  # noqa: E731
    show = lambda fs: "、".join(f"{f} {100 * by[f]['rest_before']:.2f} → {100 * by[f]['rest_after']:.2f} %" for f in fs)  # noqa: E731,E501
    return [
        Prediction("テンソル全体で1つのスケールの INT8（int8_tensor）では、ほかの行の誤差が2倍以上に増える",
                   k("int8_tensor") >= 2, show(["int8_tensor"]),
                   "外れ値が小さすぎる（factor を大きくする）。W[0, 0] を書き換えたか確かめる"),
        Prediction("出力チャネルごと・32 個ごと・16 個ごとのスケールでは、ほかの行の誤差は 1.1 倍を超えて増えない",
                   all(k(f) <= 1.1 for f in CONTAINED), show(CONTAINED),
                   "外れ値を 0 行目以外に入れた、またはほかの行の誤差を元の W と比べていない"),
        Prediction("テンソル全体で1つのスケールでも、FP8 e4m3 のほかの行の誤差は 1.2 倍を超えて増えない",
                   k("fp8_e4m3_tensor") <= 1.2, show(["fp8_e4m3_tensor"]),
                   "外れ値が大きすぎて、ほかの値が FP8 の格子の下端（非正規化数）に落ちた。factor を小さくして試す"),
    ]


# ---------------------------------------------------------------- lesson §6 and the lab: quality
def _diffs(rows: list[dict]) -> dict[str, float]:
    ref = next(r for r in rows if r["setting"] == "bfloat16")["nats_per_char"]
    return {r["setting"]: r["nats_per_char"] - ref for r in rows if r["setting"] != "bfloat16"}


def quality_reading(rows: list[dict]) -> str:
    d = _diffs(rows)
    ref = next(r for r in rows if r["setting"] == "bfloat16")["nats_per_char"]
    worst = max(d, key=lambda s: abs(d[s]))
    top = {r["setting"]: r["top1_agreement"] for r in rows if r["setting"] != "bfloat16"}
    lo, hi = min(top, key=top.get), max(top, key=top.get)
    return (f"BF16 との差が最も大きいのは {worst}（{_signed(d[worst])} nats/文字、BF16 の {ref:.4f} の "
            f"{100 * abs(d[worst]) / ref:.2f}%）。top-1 一致率は {100 * top[lo]:.1f}%（{lo}）〜"
            f"{100 * top[hi]:.1f}%（{hi}）")


def quality_predictions(rows: list[dict], tol: float = QUALITY_TOLERANCE) -> list[Prediction]:
    d = _diffs(rows)
    f32 = next((r["top1_agreement"] for r in rows if r["setting"] == "float32"), None)
    out = [Prediction(f"どの設定でも、クロスエントロピーの BF16 との差は {tol} nats/文字 未満",
                      all(abs(x) < tol for x in d.values()),
                      "差 " + "、".join(f"{s} {_signed(x)}" for s, x in d.items()) + " nats/文字",
                      "文字数が少ないと値が揺れる（max_chars を増やす）。差が大きい設定は、スケールや校正を確かめる")]
    if f32 is not None:
        out.append(Prediction("float32 でも、BF16 との top-1 一致率は 100% にならない", f32 < 1,
                              f"float32 の top-1 一致率 {100 * f32:.1f}%",
                              "読ませた文章が短く、確率が拮抗する位置がなかった。max_chars を増やす"))
    return out

