"""Chapter 3's lesson §4 and lab: what a KV-cache run shows, decided by the run (``course.labkit.predictions``).

    print(steps_reading(res)); print(verdicts(steps_predictions(steps_numbers(res))))   # res: one run_kv_lab
    print(verdicts(task1_predictions(task1_numbers(runs))))   # 課題1 (task2_..task4_ likewise): one run per setting

``*_predictions`` take the measured numbers (``*_numbers``; tests plant contradicting ones); pass the runs'
``load`` to ``verdicts`` so that a disturbed run prints 判定できません. The no-cache step at position ``x`` is
read as ``a + b x``; ``a`` is predicted clearly below a measured 1-position step (which reads every weight), and the
readings on the fit print 判定できません (``Unreadable``) when R² < ``R2_MIN``; the intercept's also when ``a <= 0`` or
(CPU) the 1-position step is slower than the median cached step, which does more work (a physical bound).
"""
from __future__ import annotations

import statistics
from operator import truediv

from course.labkit.fit import growth, line_fit
from course.labkit.predictions import UNDECIDED, Prediction
from course.labkit.spread import RETRY, decide, ratio_span, spread_text

R2_MIN = 0.95    # a clean run of the lab's default lengths gives R² ≈ 0.98; a step in the red line pulls it lower
TASK1 = {"prompt_len": 64, "output_lens": (80, 160, 320)}
TASK2 = {"output_len": 32, "prompt_lens": (32, 128, 448)}
TASK4 = {"prompt_len": 64, "output_len": 64, "models": ("default", "synthetic:llama-125m")}
QUICK_TASK1 = {"prompt_len": 16, "output_lens": (16, 32, 64)}
QUICK_TASK2 = {"output_len": 8, "prompt_lens": (8, 32, 96)}
QUICK_TASK4 = {"prompt_len": 16, "output_len": 8, "models": ("default", "synthetic:llama-125m")}

_LOAD = "ほかのプログラムが CPU を使っていると線が跳ねる。負荷の警告を確かめ、ほかのカーネルを止め、繰り返しを増やして測り直す"
_JUMPS = ("この実行では、次の候補を分けられません：実行の一部にだけ重なったほかのプログラム（負荷の監視は実行全体の"
          "平均を見るので、短い跳ねは警告にならないことがあります）、CPU の周波数の変化、一部の長さでだけ選ばれる別の行列積の"
          "カーネルやメモリの確保。図の赤い線に跳ねがないかを見て、もう一度測ります")

# ---------------------------------------------------------------- one run: the lesson's §4, the lab's run
def steps_numbers(res: dict) -> dict:
    """The numbers the readings are decided on, from one ``run_kv_lab`` result."""
    fit = line_fit(res["positions"], res["no_cache_ms"])
    tp, x0 = res["tokens_processed"], res["positions"][0]
    return {"fixed_ms": fit["fixed"], "per_position_ms": fit["slope"], "r2": fit["r2"], "first_position": x0,
            "fixed_share": fit["fixed"] / (fit["fixed"] + fit["slope"] * x0),
            "growth_cached_ms": growth(res["cached_ms"]), "growth_no_cache_ms": growth(res["no_cache_ms"]),
            "time_ratio": res["no_cache_total_s"] / res["cached_total_s"],
            "work_ratio": tp["no_cache"] / tp["cached"], "tokens_equal": bool(res["tokens_equal"]),
            "one_position_ms": res.get("no_cache_one_ms"), "device": res.get("device", "cpu"),
            "cached_step_ms": statistics.median(res["cached_ms"])}


def steps_reading(res: dict) -> str:
    """The run's numbers as the sentences the lesson and the lab read (no verdict)."""
    n = steps_numbers(res)
    lines = [f"キャッシュなしの1ステップ ≈ {n['fixed_ms']:.2f} ms ＋ {n['per_position_ms']:.4f} ms × 位置"
             f"（1次式の当てはまり R² = {n['r2']:.3f}）",
             f"最初の1/4 → 最後の1/4 のステップ（中央値）の伸び: キャッシュあり {n['growth_cached_ms']:+.2f} ms、"
             f"なし {n['growth_no_cache_ms']:+.2f} ms",
             f"合計時間の比（なし ÷ あり）{n['time_ratio']:.1f} 倍、計算した位置の数の比 {n['work_ratio']:.1f} 倍"]
    if "weight_bytes" in res:
        lines.append(f"最後のステップで読む KV {res['kv_bytes'][-1] / 2**20:.2f} MiB、重み "
                     f"{res['weight_bytes'] / 2**20:.1f} MiB（キャッシュありの1ステップが読む量）")
    return "\n".join(lines)


class Unreadable(Prediction):   # a reading on a line fit the run does not support: 判定できません, with why
    def verdict(self) -> str:
        return f"{UNDECIDED}：{self.text}（{self.basis}：{self.measured}）。{self.otherwise}"


def _fit_problem(n: dict) -> str:      # why the fitted line cannot be read ('' when it can)
    one, c = n.get("one_position_ms"), n.get("cached_step_ms")
    slow = one is not None and c is not None and n.get("device", "cpu") == "cpu" and one > c
    return "。".join(([f"1次式の当てはまりが悪い（R² = {n['r2']:.3f}、{R2_MIN} 未満）"] if n["r2"] < R2_MIN else [])
                    + (["切片 a が 0 以下（負の固定の時間はあり得ない）"] if n["fixed_ms"] <= 0 else []) + (
        [f"1位置のステップ（{one:.2f} ms）が、より多くの仕事をするキャッシュありの1ステップ（中央値 {c:.2f} ms）より"
         "遅い。CPU では起きないはずなので、1位置の測定が乱れている"] if slow else []))


def steps_predictions(n: dict) -> list[Prediction]:
    """One run's readings (``steps_numbers``) as predictions; the two resting on the fit may be ``Unreadable``."""
    a, one, bad = n["fixed_ms"], n["one_position_ms"], _fit_problem(n)
    line = (f"キャッシュなしの1ステップは位置とともに直線的に伸びる（1次式 a ＋ b × 位置 の R² ≥ {R2_MIN}、傾き b > 0）",
            f"a = {a:.2f} ms、b = {n['per_position_ms']:.4f} ms/位置、R² = {n['r2']:.3f}")
    out = [Unreadable(line[0], None, line[1], f"ステップの時間が直線から外れている。{_JUMPS}") if n["r2"] < R2_MIN else
           Prediction(line[0], n["per_position_ms"] > 0, line[1], "傾きが 0 以下：位置が短すぎて伸びが見えないか、最初のほうの"
                      "ステップが遅く出た（最初の呼び出しの準備、CPU の周波数の変化）。" + _LOAD)]
    if one is not None:
        icpt = ("切片 a は正で、1位置だけのキャッシュなしのステップ（実測）の 0.8 倍未満：多くの位置をまとめたステップでは、"
                "重みを読む時間が演算と重なり、切片にまるごとは入らない",
                f"a = {a:.2f} ms、1位置のステップ {one:.2f} ms"
                + (f"、位置 {n['first_position']} の時間のうち a の割合 {n['fixed_share']:.0%}" if a > 0 else "")
                + (f"、キャッシュありの1ステップ（中央値）{n['cached_step_ms']:.2f} ms" if n.get("cached_step_ms") else ""))
        out.append(Unreadable(icpt[0], None, icpt[1], f"{bad}。そのため、切片 a は読めない。{_JUMPS}") if bad else
                   Prediction(icpt[0], a < 0.8 * one, icpt[1], "a が1位置のステップに近いか大きい：このマシンでは、多くの位置を"
                              "まとめても重みの読み込みが演算と重ならない（演算に比べてメモリが遅い）か、切片に入る"
                              "固定の時間（小さな演算の呼び出しや Python の処理）や、位置が少ないときの行列積の効率の"
                              "低さが大きい。" + _LOAD))
    return out + [
        Prediction("キャッシュありの1ステップはほぼ平ら（最初の1/4 → 最後の1/4 の伸びが、キャッシュなしの伸びの 1/5 未満）",
                   n["growth_no_cache_ms"] > 0 and abs(n["growth_cached_ms"]) < n["growth_no_cache_ms"] / 5,
                   f"伸び あり {n['growth_cached_ms']:+.2f} ms、なし {n['growth_no_cache_ms']:+.2f} ms",
                   "大きなモデルや長い文脈では、文脈の K・V を読む時間が重みを読む時間に近づき、キャッシュありの"
                   "線も右上がりになる。既定モデルで外れたら負荷を確かめる。" + _LOAD),
        Prediction("合計時間の比（なし ÷ あり）は、計算した位置の数の比の半分未満",
                   n["time_ratio"] < n["work_ratio"] / 2,
                   f"時間の比 {n['time_ratio']:.1f} 倍、位置の数の比 {n['work_ratio']:.1f} 倍",
                   "出力が短いと両者の差が小さい。1トークンのステップの固定の時間が小さい CPU（や GPU）では、"
                   "時間の比が位置の数の比に近づく"),
        Prediction("出力トークンはキャッシュあり・なしで一致する", n["tokens_equal"], "一致" if n["tokens_equal"] else "途中から違う",
                   "2つの経路は別のカーネルで計算するので丸めの差がある。1位と2位の候補が僅差のステップで"
                   "入れ替わった（BF16 では起きやすい）"),
    ]


def rounding_prediction(max_diff: float, min_gap: float) -> Prediction:
    """The cached and uncached log-probabilities differ by rounding only: far less than the top-1 / top-2 gap."""
    return Prediction("キャッシュあり・なしのログ確率の差（丸めの差）は、1位と2位の候補の差の 1/100 未満",
                      max_diff < min_gap / 100, f"差の最大 {max_diff:.1e}、1位と2位の差の最小 {min_gap:.3g}",
                      "僅差の候補があるステップでは、丸めの差で順位が入れ替わり得る。プロンプトを変えて確かめる")

# ---------------------------------------------------------------- 課題1: doubling the output
def task1_numbers(runs: dict[int, dict]) -> list[dict]:
    """Per output length: the totals (median of repeats, with min-max when repeated), the positions the no-cache
    path computed, and the cached run's first token (``prefill_s``: TTFT, the same prompt in every run)."""
    return [{"output_len": n, "cached_s": r["cached_total_s"], "no_cache_s": r["no_cache_total_s"],
             "positions": r["tokens_processed"]["no_cache"],
             **{f"{k}_s_{m}": r[f"{k}_total_s_{m}"] for k in ("cached", "no_cache") for m in ("min", "max")
                if r.get("repeats", 1) > 1 and f"{k}_total_s_{m}" in r},
             **({"prefill_s": r["first_cached_ms"] / 1e3} if "first_cached_ms" in r else {})}
            for n, r in sorted(runs.items())]


def task1_table(rows: list[dict]) -> str:
    return "\n".join(f"出力 {r['output_len']:>4}: 合計 あり {spread_text(r, 'cached_s', ' s', '{:.2f}')}、なし "
                     f"{spread_text(r, 'no_cache_s', ' s', '{:.2f}')}、なしが計算した位置 {r['positions']:,}"
                     + (f"、ありの最初のトークンまで {r['prefill_s']:.3f} s" if "prefill_s" in r else "") for r in rows)


def _cached_doubling_reason(ratios: list[float], rows: list[dict]) -> str:
    """One reason per direction in which a cached doubling left 1.6-2.4. Below 1.6, the prompt's Prefill is named
    only where its measured share of the shorter run could pull the ratio that low (2 - share < 1.6)."""
    why = []
    floor = [2 - a.get("prefill_s", a["cached_s"]) / a["cached_s"] for x, a in zip(ratios, rows) if x < 1.6]
    if any(f < 1.6 for f in floor):                     # Prefill's measured share of the shorter run can do it
        why.append("1.6 倍未満：どの実行にも同じ長さのプロンプトの Prefill（最初のトークンまでの時間）が入っており、"
                   "出力が短いとこの一定の部分が合計の多くを占める")
    if any(f >= 1.6 for f in floor):
        why.append("1.6 倍未満だが、表の「最初のトークンまで」は短い方の合計の4割未満で、Prefill だけでは比は 1.6 倍"
                   "までは下がらない：短い方の実行が遅くなったか、長い方が速くなった（ほかのプログラム、CPU の周波数"
                   "の変化）。1倍未満なら長い生成の方が早く終わっており、計測が乱れている")
    if any(x > 2.4 for x in ratios):
        why.append("2.4 倍より大きい：長い実行の途中で負荷が跳ねたか、1ステップが文脈とともに伸びている"
                   "（文脈の K・V を集めて読む量と Attention の演算は文脈に比例する）。上の1ステップのグラフで"
                   "キャッシュありの線が右上がりかを確かめる")
    return "。".join(why) + "。" + _LOAD


def _no_cache_doubling_reason(nocache: list[float], cached: list[float], work: list[float]) -> str:
    """Per failed part: <= 2.2x (the NP term if the positions grew <= 2.2x, else the fixed time a), <= cached."""
    why = []
    if any(x <= 2.2 and w <= 2.2 for x, w in zip(nocache, work)):
        why.append("なしの伸びが 2.2 倍以下で、計算した位置の数の伸び自体も 2.2 倍以下：プロンプトが出力に比べて"
                   "長いうちは、2乗の項より NP の項が大きく、位置の数の伸びが2倍に近い")
    if any(x <= 2.2 < w for x, w in zip(nocache, work)):
        why.append("なしの伸びが 2.2 倍以下だが、計算した位置の数は 2.2 倍より大きく伸びている：1ステップの固定の"
                   "時間 a（レッスン第4節の切片。小さな演算の呼び出しや Python の処理など）が大きいと、合計 ≈ N·a ＋ b·位置の数 の伸びは2倍に近づく")
    if any(x <= c for x, c in zip(nocache, cached)):
        why.append("なしの伸びがキャッシュありの伸び以下：キャッシュありの合計が予想より大きく伸びた（測定の「あり」"
                   "の値）。長い実行の途中で負荷が跳ねたか、キャッシュありの1ステップが文脈とともに伸びている（課題2）")
    return "。".join(why) + "。" + _LOAD


def task1_predictions(rows: list[dict]) -> list[Prediction]:
    cached, nocache, work = ([b[k] / a[k] for a, b in zip(rows, rows[1:])] for k in ("cached_s", "no_cache_s", "positions"))
    fmt = lambda v: " → ".join(f"{x:.2f}" for x in v)       # noqa: E731
    spans, nspans = ([ratio_span(a, b, k) for a, b in zip(rows, rows[1:])] for k in ("cached_s", "no_cache_s"))
    return [
        decide(all(1.6 <= x <= 2.4 for x in cached), any(lo < e < hi for lo, hi in spans for e in (1.6, 2.4)),
               "出力長を2倍にするごとに、キャッシュありの合計時間はほぼ2倍（1.6〜2.4 倍）", f"あり {fmt(cached)} 倍",
               _cached_doubling_reason(cached, rows), RETRY),
        Prediction("キャッシュなしの合計時間は、2倍ごとに 2.2 倍より大きく、キャッシュありより大きく伸びる",
                   all(x > 2.2 and x > c for x, c in zip(nocache, cached)),
                   f"なし {fmt(nocache)} 倍、あり {fmt(cached)} 倍", _no_cache_doubling_reason(nocache, cached, work)),
        decide(all(x <= w * 1.15 for x, w in zip(nocache, work)),
               any(lo < w * 1.15 < hi for (lo, hi), w in zip(nspans, work)),     # the repeats reach both sides
               "キャッシュなしの時間の伸び（何倍か）は、計算した位置の数の伸びの 1.15 倍を超えない"
               "（15 % 以内の上振れは測り直しの揺れと区別できないので、向きは読まない）",
               f"時間 {fmt(nocache)} 倍、位置の数 {fmt(work)} 倍、時間 ÷ 位置の数 {fmt(map(truediv, nocache, work))}",
               "長い系列のステップほど1位置あたりの時間が伸びた：中間の値や K・V が CPU のキャッシュに入りきら"
               "ないか、長い実行の途中で負荷が跳ねた。Attention の演算の増加は、既定モデルでは伸びを数 % "
               "大きくするだけで、これほどのずれは説明できない。" + _LOAD, RETRY),
    ]

# ---------------------------------------------------------------- 課題2: a longer prompt
def task2_numbers(runs: dict[int, dict]) -> list[dict]:
    """Per prompt: cached steps' median, no-cache first step, and (if present) last-step K/V and weights in MiB."""
    return [{"prompt_len": p, "cached_ms": statistics.median(r["cached_ms"]), "no_cache_first_ms": r["no_cache_ms"][0],
             **({"kv_mib": r["kv_bytes"][-1] / 2**20, "weight_mib": r["weight_bytes"] / 2**20}
                if "kv_bytes" in r and "weight_bytes" in r else {})} for p, r in sorted(runs.items())]


def task2_table(rows: list[dict]) -> str:
    return "\n".join(f"プロンプト {r['prompt_len']:>4}: キャッシュありの1ステップ（中央値）{r['cached_ms']:.2f} ms、"
                     f"なしの最初の1ステップ {r['no_cache_first_ms']:.2f} ms"
                     + (f"、最後のステップの文脈の K・V {r['kv_mib']:.2f} MiB（重み {r['weight_mib']:.1f} MiB）"
                        if "kv_mib" in r else "") for r in rows)


def task2_predictions(rows: list[dict]) -> list[Prediction]:
    lo, hi = rows[0], rows[-1]
    span = f"プロンプト {lo['prompt_len']} → {hi['prompt_len']}"
    first = [r["no_cache_first_ms"] for r in rows]
    return [
        Prediction(f"{span} で、キャッシュありの1ステップは伸びても 1.5 倍未満（重みより小さい文脈の K・V の分だけ）",
                   hi["cached_ms"] < 1.5 * lo["cached_ms"],
                   f"{lo['cached_ms']:.2f} → {hi['cached_ms']:.2f} ms",
                   "文脈の K・V を読む量と Attention の演算は文脈に比例する。CPU の経路では毎ステップ、層ごとに文脈の"
                   " K・V をプールから写し（gather_blocks）、それを2回の bmm でまた読むので、重みの小さいモデル"
                   "（既定モデル）や遅いメモリでは、表の文脈の K・V と重みの比以上に伸びが見えることがある。" + _LOAD),
        Prediction(f"キャッシュなしの最初の1ステップは、プロンプトが長いほど長く、{span} で2倍以上",
                   all(a < b for a, b in zip(first, first[1:])) and first[-1] >= 2 * first[0],
                   " → ".join(f"{x:.2f}" for x in first) + " ms",
                   "最初のステップの固定の時間が大きい CPU では、伸びが小さく出る。" + _LOAD),
    ]

# ---------------------------------------------------------------- 課題3: the KV bytes (no timing)
def task3_numbers(res: dict) -> dict:
    """What task 3 is decided on: the formula (from the pool's shape), the pool's measured bytes per token
    slot, and the bytes the engine's BlockManager held (measured) against the bytes written (formula)."""
    k = res["kv_shape"]
    block = res["block_size"] * res["slot_bytes"]
    held, written = res["held_bytes"], res["kv_bytes"]
    steps = [b - a for a, b in zip(held, held[1:])]
    return {"formula": 2 * k["layers"] * k["kv_heads"] * k["head_dim"] * k["bytes"], "shape": k,
            "slot_bytes": res["slot_bytes"], "block_size": res["block_size"], "block_bytes": block,
            "rises": sum(1 for d in steps if d), "steps_are_blocks": all(d in (0, block) for d in steps),
            "covers": all(w <= h < w + block for w, h in zip(written, held)),
            "held_last": held[-1], "written_last": written[-1], "pool_bytes": res["pool_bytes"]}


def task3_predictions(t: dict) -> list[Prediction]:
    """The engine's pool against the lesson's formula, and how the held memory grows (``task3_numbers``)."""
    k = t["shape"]
    return [
        Prediction("KV プールの1スロット（1トークン分）のバイト数は、式 2 × 層数 × KV ヘッド数 × ヘッド次元 × "
                   "バイト数 と同じ", t["slot_bytes"] == t["formula"],
                   f"プールの1スロット {t['slot_bytes']:,} B、式 2 × {k['layers']} × {k['kv_heads']} × "
                   f"{k['head_dim']} × {k['bytes']} = {t['formula']:,} B",
                   "プールの形（層数・KV ヘッド数・ヘッド次元・dtype）を確かめる"),
        Prediction("エンジンが保持する量は1トークンずつではなく、1ブロックずつ階段状に増え、書き込んだ K・V を"
                   "いつも覆い、その差は1ブロック未満",
                   t["steps_are_blocks"] and t["covers"] and t["rises"] >= 1,
                   f"1ブロック {t['block_size']} トークン × {t['slot_bytes']:,} B = {t['block_bytes']:,} B、"
                   f"増えた回数 {t['rises']}、最後に保持 {t['held_last']:,} B・書き込み {t['written_last']:,} B",
                   "出力が1ブロックより短いと階段が見えない。出力長を伸ばす。プレフィックスキャッシュなど、ほかの"
                   "リクエストがブロックを持っていないかを確かめる"),
        Prediction("確保済みの KV プールは、最後に保持している量の 10 倍以上",
                   t["pool_bytes"] >= 10 * t["held_last"],
                   f"プール {t['pool_bytes'] / 2**20:.0f} MiB、保持している量 {t['held_last'] / 2**20:.2f} MiB",
                   "長いプロンプトと出力を選ぶと、使う量がプールに近づく"),
    ]

# ---------------------------------------------------------------- 課題4: a larger model's shape
def task4_numbers(runs: dict[str, dict]) -> dict[str, dict]:
    return {m: {"cached_ms": statistics.median(r["cached_ms"]), "ratio": r["no_cache_total_s"] / r["cached_total_s"]}
            for m, r in runs.items()}


def task4_table(nums: dict[str, dict]) -> str:
    return "\n".join(f"{m}: キャッシュありの1ステップ（中央値）{v['cached_ms']:.2f} ms、合計時間の比（なし ÷ あり）"
                     f"{v['ratio']:.2f} 倍" for m, v in nums.items())


def task4_predictions(nums: dict[str, dict], small: str = "default", large: str = "synthetic:llama-125m"):
    """Like with like: the two models' cached steps (the larger reads ~6x the weight bytes), and each model's
    no cache against cache. Their ratios are not compared (float32 vs BF16: the CPU's BF16 speed sets one)."""
    s, big = nums[small], nums[large]
    return [
        Prediction("llama-125m の形では、キャッシュありの1ステップが既定モデルの2倍以上長い",
                   big["cached_ms"] >= 2 * s["cached_ms"],
                   f"既定 {s['cached_ms']:.2f} ms、llama-125m の形 {big['cached_ms']:.2f} ms", _LOAD),
        Prediction("どちらのモデルでも、キャッシュなしの合計時間はキャッシュありの2倍以上",
                   s["ratio"] >= 2 and big["ratio"] >= 2,
                   f"合計時間の比（なし ÷ あり）既定 {s['ratio']:.2f} 倍、llama-125m の形 {big['ratio']:.2f} 倍",
                   "出力が短いと、キャッシュなしが計算し直す量も小さい。出力長を伸ばす。" + _LOAD),
    ]


def task4_ratio_note(nums: dict[str, dict], small: str = "default", large: str = "synthetic:llama-125m") -> str:
    """The two models' ratios side by side, no direction read (dtypes differ); under 1.3x apart: within noise."""
    a, b = nums[small]["ratio"], nums[large]["ratio"]
    if max(a, b) < 1.3 * min(a, b):
        return (f"2つのモデルの比（{a:.2f} 倍と {b:.2f} 倍）の差は 1.3 倍未満で、負荷の揺れの範囲です。"
                "dtype（float32 と BF16）も違うので、この差からは何も言えません。")
    return (f"2つのモデルの比は、既定モデル {a:.2f} 倍、llama-125m の形 {b:.2f} 倍です。2つは dtype が違い（float32 と "
            "BF16）、BF16 の行列積の速さは CPU（AVX512_BF16・AMX の有無）で大きく変わるので、この2つの比の大小からモデルの"
            "大きさの効果は読み取れません。")


__all__ = ["QUICK_TASK1", "QUICK_TASK2", "QUICK_TASK4", "R2_MIN", "TASK1", "TASK2", "TASK4", "Unreadable", "growth",
           "line_fit", "rounding_prediction", "steps_numbers", "steps_predictions", "steps_reading", "task1_numbers",
           "task1_predictions", "task1_table", "task2_numbers", "task2_predictions", "task2_table", "task3_numbers",
           "task3_predictions", "task4_numbers", "task4_predictions", "task4_ratio_note", "task4_table"]
