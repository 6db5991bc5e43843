"""Lab 9's readings (lesson 9 prints them too): sentences printed from a run of ``lab09.run_interference_lab``,
and the budget prediction decided by the run (``course.labkit.predictions``); the tasks' predictions are in
``lab09_tasks``, the gap helpers (singles, stall_share, stall_bound, prefill_gaps) in ``course.labkit.itl``::

    res = lab09.run_interference_lab(**lab09.defaults())
    print(budget_reading(res)); print(budget_prediction(res).verdict())   # largest vs smallest budget
    print(stall_reading(res))        # why p99 is (or is not) a stalled gap: the share of stalled gaps
    print(mean_reading(res))         # median vs mean (TPOT) vs p99 at the largest budget
    print(disagg_itl_reading(res))   # Disaggregation's ITL while a long prompt prefills, vs the rest
    print(kv_reading(res))           # KV per long and per short prompt, against blocks x 16 x bytes per token
    print(pareto_reading(res))       # the setups no other setup dominates (course/TERMS.md)
    print(sweep_lines(sweep))        # per budget: the prefill steps' gaps vs the median, long gaps outside them

Pure functions of result dicts (no engine, no lab09 import); tests plant contradicting numbers and re-derive
the saved verdicts. p99 vs the max: a stalled step gives every decoding request one long gap; p99 interpolates at
rank 0.99 (n - 1), so it is a long gap when at least n - floor(0.99 (n - 1)) gaps are long (``p99_needs``: about
1 % + 1/n), else only the max shows the stall. Long gaps beyond what prefill can stall (``stall_bound``) are placed
(``itl.excess_where``: the step right after a long prompt's first token, or elsewhere), not assigned a cause.
"""
from __future__ import annotations

import math

from course.labkit.itl import (BUSY, STALL_FACTOR, excess_where, gaps, p99_needs, p99_sources, prefill_gaps, singles,
                               stall_bound, stall_share, step_split)
from course.labkit.itl import other_load as _other_load
from course.labkit.predictions import Prediction, under_load
from minimal_engine.engine.metrics import percentile

BLOCK = 16                  # the engine's block size (tokens): the KV moves in whole blocks
# Full passes over the KV bytes between extract_start and recv_done (minimal_engine/disagg/kv_connector.py and
# CPython's multiprocessing.connection): the index gather _blocked(k)[:, idx], the inner and the outer torch.stack,
# the write into the pipe, os.read out of it, BytesIO.write in Connection._recv, bytearray(...) in recv_kv.
COPIES = 7


def stall_reading(res: dict) -> str:
    r = singles(res)[-1]
    k, n = stall_share(r)
    need = p99_needs(n)
    share = k / n if n else float("nan")
    out = (f"予算 {r['budget']}: ITL の標本 {n} 個のうち {k} 個（{share:.1%}）が、中央値 {r['median_itl_ms']:.1f} ms の"
           f" {STALL_FACTOR:g} 倍を超える長い間隔です。")
    bound = stall_bound(res, r)
    if bound is not None:
        out += f"長いプロンプトの Prefill と同じステップに入りうる間隔は、この流れでは多くて {bound} 個です"
        out += f"。{excess_where(res, r, k - bound)}" if k > bound else "。"
    out += (f"\np99 は標本を小さい順に並べた 0.99 × ({n} − 1) 番目の値（間は直線で補間）なので、上から {need} 個以上が"
            "長い間隔なら、p99 もそのどれかの値になります。")
    if k >= need and k:
        return out + (f"この実行では {k} 個 ≥ {need} 個なので、p99（{r['p99_itl_ms']:.1f} ms）も長い間隔の値で、"
                      f"最大値（{r['max_itl_ms']:.1f} ms）と同じ裾にあります。")
    if k:
        return out + (f"この実行では {k} 個 < {need} 個なので、p99（{r['p99_itl_ms']:.1f} ms）は長い間隔と普通の間隔のあいだを"
                      f"補間した値で、止められた長さは最大値（{r['max_itl_ms']:.1f} ms）にだけ出ます。")
    return out + (f"この実行では長い間隔がないので、p99（{r['p99_itl_ms']:.1f} ms）も最大値（{r['max_itl_ms']:.1f} ms）も"
                  "普通の間隔です。")


def mean_reading(res: dict) -> str:
    """At the largest budget: median, mean (what TPOT averages per request) and p99 of the ITL, each against the
    median, and the mean without the long gaps: the median stays a normal gap while most gaps are normal, the mean
    rises by the long gaps' share x their length (the stall spread over all tokens), p99/max show the stall itself."""
    r = singles(res)[-1]
    g = gaps(r)
    if not g:
        return "（ITL の標本がありません）"
    med, thr = r["median_itl_ms"], STALL_FACTOR * r["median_itl_ms"]
    mean, normal = sum(g) / len(g), [x for x in g if x <= thr]
    k, base = len(g) - len(normal), (sum(normal) / len(normal) if normal else float("nan"))
    out = (f"予算 {r['budget']} の ITL: 中央値 {med:.1f} ms、平均 {mean:.1f} ms（中央値の {mean / med:.2f} 倍）、"
           f"p99 {r['p99_itl_ms']:.1f} ms（{r['p99_itl_ms'] / med:.1f} 倍）、最大 {r['max_itl_ms']:.1f} ms"
           f"（{r['max_itl_ms'] / med:.1f} 倍）。長い間隔 {k} 個を除くと平均は {base:.1f} ms です。")
    if mean > 1.1 * base:
        return out + (f"\n平均（TPOT も1件ごとのこの平均です）は {mean / base - 1:.0%} 上がりました。長い間隔の分が全 {len(g)}"
                      " 個に薄められて乗った上がり方で、各リクエストが待たされた長さそのものは p99・最大値に出ます。")
    return out + "\n長い間隔が少ない（または短い）ので、平均もほとんど上がっていません。止められた長さは最大値に出ます。"


# Disaggregation's decode-only gaps above this x the one engine's: named as not from the prefill process (idle then)
IDLE_RATIO = 1.3


def _idle_baseline(res: dict, rest: float) -> str:
    """Disaggregation's gaps outside the prefill windows against the one engine's decode-only steps (largest budget's
    step_split). The prefill process waits in ``control.poll`` and the receive thread in ``conn.poll`` then, so a
    clearly longer median there cannot come from them: named as a difference the run cannot explain."""
    hi = singles(res)[-1] if singles(res) else None
    split = step_split(hi) if hi else None
    if not split or not split[1]:
        return ""
    base = percentile(split[1], 50)
    out = (f"\n区間の外の中央値 {rest:.1f} ms は、予算 {hi['budget']} の1エンジンの Decode だけのステップの中央値 "
           f"{base:.1f} ms の {rest / base:.2f} 倍です。")
    if rest <= IDLE_RATIO * base:
        return out
    return out + (f"{IDLE_RATIO:g} 倍を超えていますが、区間の外では Prefill のプロセスは次の依頼を待って止まっていて"
                  "（`control.poll`）、受信スレッドも KV を待って止まっています（`conn.poll`）。Decode 側のエンジンは"
                  "1エンジンと同じコードとスレッド数です。そのため、この差は Disaggregation の仕組みからは来ません。"
                  "この実行では原因を区別できません。候補は、CPU のクロックの変化、OS がスレッドを置いたコア、"
                  f"{_other_load(res)}です。")


def disagg_itl_reading(res: dict, ratio: float = 1.2) -> str:
    """Disaggregation's decode-side ITL, split by the long prompts' windows: gaps ending while a long prompt is in the
    prefill process (arrival < t < first token: dashed to dotted line), the first gap ending at or after its first
    token (the decode step that first writes the received KV into the pool: ``inject_kv_blocks``), and the rest.
    The median in the window above ``ratio`` x the rest's median is named as the prefill process taking cores and
    memory bandwidth from the decode process (a CPU effect: separate GPUs do not share them). The largest gap is
    placed by its start and end against the long prompt's prefill_done (``_max_where``), not assumed to be prefill."""
    d = res["setups"].get("disagg")
    if not d or not d.get("long_first_token_s") or not d["itl_points"]:
        return "（Disaggregation の長いプロンプトの時刻がないので、区間には分けません）"
    wins = list(zip(d["long_arrivals_s"], d["long_first_token_s"]))
    pts = sorted(d["itl_points"])
    admit = {min((p for p in pts if p[0] >= f), default=None) for _, f in wins} - {None}
    during = [g for t, g in pts if any(a < t < f for a, f in wins)]
    rest = [g for t, g in pts if (t, g) not in admit and not any(a < t < f for a, f in wins)]
    if not during or not rest:
        return "（長いプロンプトの Prefill 中か、それ以外の ITL の標本がないので、区間を比べられません）"
    md, mr = percentile(during, 50), percentile(rest, 50)
    out = (f"Disaggregation の Decode 側の ITL: 長いプロンプトの到着から Decode 側の最初のトークンまで（破線〜点線。Prefill の"
           f"計算と KV の受け渡し）の中央値"
           f" {md:.1f} ms（{len(during)} 個）、それ以外 {mr:.1f} ms（{len(rest)} 個）で {md / mr:.2f} 倍。")
    out += ("\n→ この区間で ITL が伸びています。考えられる原因は2つです。このマシンでは Prefill のプロセスが Decode の"
            f"プロセスと同じコアとメモリ帯域を使うこと（GPU を分ければこの原因はありません）と、{_other_load(res)}です。"
            "1回の実行のこの比だけでは、どちらかは分けられません。Decode のプロセスの KV を受け取るスレッドは、KV が届くまで"
            " CPU を使わずに待つので（`conn.poll`）、この中央値の原因にはなりません。"
            if md > ratio * mr
            else f"\n→ {md / mr:.2f} 倍で、しきい値の {ratio:g} 倍を下回りました。この実行では、この区間で ITL が"
                 "はっきり伸びたとは言えません。")
    out += _idle_baseline(res, mr)
    top = max(pts, key=lambda p: p[1])
    if admit:
        out += (f"\n点線のすぐあとの間隔（届いた KV を Decode 側がプールに書き込むステップ）は最大 "
                f"{max(g for _, g in admit):.1f} ms（それ以外の中央値の {max(g for _, g in admit) / mr:.1f} 倍）。")
        out += ("この実行の ITL の最大値はこの間隔です。" if top in admit
                else f"この実行の ITL の最大値（{top[1]:.1f} ms、開始から {top[0]:.3f} s で終わる間隔）はこの間隔ではなく、"
                     f"{_max_where(top, wins, d.get('long_prefill_done_s'), _other_load(res))}。")
    return out


def _max_where(top: tuple[float, float], wins: list, done: list | None, other: str = "ほかのプログラムの負荷") -> str:
    """Where the largest gap (end t, length g ms) lies: in a long prompt's prefill compute (it ends by prefill_done),
    in its KV hand-off (it starts after prefill_done: copy out, pipe, the decode process's receive thread, inbox),
    across both, or outside every window (load). Without prefill_done only the window is named; where two long
    prompts' windows overlap, neither is named."""
    t, g = top
    hit = [i for i, (a, f) in enumerate(wins) if a < t < f]
    if len(hit) > 1:
        return (f"{len(hit)} 件の長いプロンプトの区間が重なるところの間隔で（一方の Prefill の計算中に、もう一方の KV の"
                "受け渡しがあることもあります）、どれが伸ばしたかは分けられません")
    for i in hit:
        p = done[i] if done and i < len(done) else None
        if p is None:
            return "破線〜点線の区間の中の間隔です（Prefill の計算中か KV の受け渡し中かは、この記録では分けられません）"
        if t <= p:
            return (f"Prefill のプロセスが計算していたあいだ（Prefill の完了は開始から {p:.3f} s）の間隔です。"
                    f"考えられる原因は、Prefill のプロセスとコアを分け合ったことか、{other}です")
        if t - g / 1e3 >= p:
            return (f"Prefill の完了（開始から {p:.3f} s）のあと、KV の受け渡しのあいだの間隔です。このあいだは、"
                    "Decode のプロセスの受信スレッドが KV を読み込んでコピーします。考えられる原因は、この受け渡しが"
                    f" Decode のループと CPU を分け合ったことか、{other}です")
        return (f"Prefill の完了（開始から {p:.3f} s）をまたぐ間隔で、Prefill の計算と KV の受け渡しの"
                "どちらが伸ばしたかは分けられません")
    return (f"どの区間の理由でもありません。この実行では原因を区別できません（候補は、CPU のクロックの変化、Python の"
            f"ガベージコレクション、{other}です）")


def handoff_reading(hi: dict, d: dict, threads: int | None = None, prefill_threads: int = 1) -> str:
    """Where Disaggregation's extra TTFT went, measured: the wait in the prefill process (arrival -> first scheduled,
    queue_ms_long), its compute (-> first token sampled) against the one engine's TTFT, the copy out + pipe
    (kv_transfer_s, set against one in-process copy of the same bytes, copy_ms_long) and the rest until the decode
    side admitted it; the largest part is named. Thread counts are named only where they differ. The long prompts'
    arrivals are printed for both: they follow the token count, so they differ between the setups."""
    if "prefill_ms_long" not in d:
        return f"\n  受け渡しの代償: KV の取り出しと転送が長いプロンプト1件あたり平均 {d['kv_ms_long']:.1f} ms。"
    pre, kv, adm, q = d["prefill_ms_long"], d["kv_ms_long"], d["admit_ms_long"], d.get("queue_ms_long")
    parts = {"待ち": q, "Prefill": pre - q - hi["long_ttft_ms"]} if q is not None else {"Prefill": pre - hi["long_ttft_ms"]}
    parts.update({"転送": kv, "受け入れ": adm})
    share = ("Prefill のプロセスは、同時に動く Decode のプロセスやほかのプログラムと、コアとメモリ帯域を分け合います。"
             "1エンジンの実行では、このラボのほかのプロセスは動いていません")
    slow = (f"Prefill のプロセスは {prefill_threads} スレッド、1エンジンは {threads} スレッドです。また、{share}"
            if threads is not None and threads != prefill_threads else f"スレッドの数は1エンジンと同じです。{share}")
    c = d.get("copy_ms_long")
    pipe = (f"区間の中でバイト列は約 {COPIES} 回コピーされます（取り出しのブロックの抜き出しと2回の stack、パイプへの"
            "書き込みと読み出し、受け取りのバッファへの書き込み、bytearray への変換）。"
            f"このプロセスで同じバイト数を1回コピーすると {c:.2f} ms なので、コピーだけでは {COPIES} 回で "
            f"{COPIES * round(c, 2):.2f} ms 程度です。"
            if c is not None else "")
    why = {"待ち": ("Prefill のプロセスで順番を待った時間です。このプロセスは、前の長いプロンプトの Prefill と、その KV の"
                  "送り出しを終えるまで、次のプロンプトを始めません（送り出しは同じステップの中で、送り終えるまで続きます）"),
           "Prefill": f"Prefill のプロセスの計算が1エンジンの TTFT より長いことです（{slow}）",
           "転送": (f"KV の取り出しと転送です。{pipe}考えられる残りの原因は、パイプがカーネルの小さなバッファを通すので"
                  "受け手が読むたびにしか進まないことと、受け手の受信スレッドが Decode のループと CPU や Python の GIL を"
                  "分け合うことです。この実行では、この2つは分けられません"),
           "受け入れ": ("届いた KV が、Decode 側の次のステップの前に受け入れられ、プールに書き込まれるまでの待ちです"
                    "（Decode の1ステップが長いほど伸びます）")}
    top = max(parts, key=parts.get)
    wait = f"うち Prefill のプロセスが始めるまでの待ちが {q:.0f} ms です。" if q is not None else ""
    arr = "・".join(f"{t:.3f}" for t in hi.get("long_arrivals_s", []))
    arr_d = "・".join(f"{t:.3f}" for t in d.get("long_arrivals_s", []))
    out = (f"\n  内訳（長いプロンプト1件あたりの平均、測定）: 到着から Prefill 完了まで {pre:.0f} ms。{wait}"
           f"予算 {hi['budget']} の1エンジンの TTFT は {hi['long_ttft_ms']:.0f} ms です。KV の取り出しと転送は {kv:.1f} ms、"
           f"受け取ってから Decode 側が受け入れるまでは {adm:.1f} ms です。")
    if arr and arr_d:
        out += (f"\n  長いプロンプトの到着（開始からの秒）: 1エンジン {arr}、Disaggregation {arr_d}。到着は出力トークンの数で"
                "決まるので、構成ごとに違うことがあります。")
    return out + f"\n  1エンジンより長くなった分のうち最も大きいのは、{why[top]}。"


def budget_reading(res: dict, disagg: bool = True) -> str:
    lo, hi = singles(res)[0], singles(res)[-1]      # disagg=False: the one-engine line only (lesson 2 節)
    out = (f"予算 {hi['budget']} → {lo['budget']}: 短いリクエストの ITL の p99 {hi['p99_itl_ms']:.1f} → "
           f"{lo['p99_itl_ms']:.1f} ms、長いプロンプトの TTFT（平均）{hi['long_ttft_ms']:.0f} → {lo['long_ttft_ms']:.0f} ms")
    d = res["setups"].get("disagg") if disagg else None
    if d:
        diff = d["long_ttft_ms"] - hi["long_ttft_ms"]
        out += (f"\nDisaggregation: ITL の p99 {d['p99_itl_ms']:.1f} ms、長いプロンプトの TTFT {d['long_ttft_ms']:.0f} ms"
                f"（予算 {hi['budget']} の1エンジンより {abs(diff):.0f} ms {'長い' if diff > 0 else '短い'}）")
        if diff > 0:
            out += handoff_reading(hi, d, res.get("threads"), res.get("prefill_threads", 1))
    return out


def budget_prediction(res: dict) -> Prediction:
    """Largest vs smallest budget; 判定できません when the run's load says it was disturbed (``res["load"]``)."""
    lo, hi = singles(res)[0], singles(res)[-1]
    return under_load([Prediction(f"予算を {hi['budget']} から {lo['budget']} に下げると、ITL の p99 は下がり、長いプロンプトの TTFT は伸びる",
                      lo["p99_itl_ms"] < hi["p99_itl_ms"] and lo["long_ttft_ms"] > hi["long_ttft_ms"],
                      f"p99 {hi['p99_itl_ms']:.1f} → {lo['p99_itl_ms']:.1f} ms、TTFT {hi['long_ttft_ms']:.0f} → "
                      f"{lo['long_ttft_ms']:.0f} ms",
                      "既定モデルが小さく、1ステップの時間の多くが固定の時間で、Prefill の重さが見えにくい。"
                      "プロンプトを長くするか、課題2の大きなモデルの形で試してください。" + BUSY)], res.get("load"))[0]


def kv_reading(res: dict) -> str:
    d = res["setups"].get("disagg")
    if not d:
        return "（Disaggregation を実行していないので、KV の転送はありません）"
    per = res["kv_bytes_per_token"]
    lines = []
    for label, n, b, ms in (("長いプロンプト", res["prompt_len"], d["kv_bytes_long"], d["kv_ms_long"]),
                            ("短いプロンプト", res["short_prompt_len"], d["kv_bytes_short"], d["kv_ms_short"])):
        blocks = math.ceil(n / BLOCK)
        formula = blocks * BLOCK * per
        lines.append(f"{label}（{n} トークン）1件: 測定 {b:,.0f} B、式 {blocks} ブロック × {BLOCK} × {per:,} B = "
                     f"{formula:,} B（{'一致' if round(b) == formula else '不一致'}）。転送時間の平均 {ms:.2f} ms")
    lines.append(f"（全リクエストを混ぜた平均は {d['kv_bytes_per_request']:,.0f} B で、どちらの1件とも違う値です）")
    return "\n".join(lines)


def dominated(p: tuple[float, float], q: tuple[float, float]) -> bool:
    """Whether q dominates p: at least as good on both axes and better on one (course/TERMS.md)."""
    return q[0] >= p[0] and q[1] >= p[1] and q != p


def pareto_reading(res: dict) -> str:
    pts = {r["label"]: (r["tok_s"], r["tok_s_per_user"]) for r in res["setups"].values()}
    front = [k for k, p in pts.items() if not any(dominated(p, q) for q in pts.values())]
    tok = max(pts, key=lambda k: pts[k][0])
    user = max(pts, key=lambda k: pts[k][1])
    out = (f"出力 tok/s が最も高いのは {tok}（{pts[tok][0]:.1f}）、tok/s/user が最も高いのは {user}（{pts[user][1]:.1f}）。\n"
           f"ほかのどの構成にも支配されない構成: {'、'.join(front)}")
    dis = next((r["label"] for r in res["setups"].values() if r["budget"] is None), None)
    if dis:
        out += f"\n{dis}は、この実行では{'フロンティアの上にあります' if dis in front else 'ほかの構成に支配されています'}"
    return out


def sweep_lines(res: dict) -> str:
    """Per budget: the median of the gaps of the chunk steps (step_split: a long prompt's prefill steps, arrival < t
    <= first token) against the median of the other gaps (decode-only steps: at small budgets the chunk steps can be
    most of the gaps, so the overall median is no baseline), the other gaps longer than STALL_FACTOR x theirs
    (noise), and which of the two the top p99_needs(n) gaps (those p99 is read from) belong to (p99_sources): p99
    is called noise only where none of them is a chunk step."""
    out = []
    for r in singles(res):
        split = step_split(r)
        if not split or not split[0] or not split[1]:
            continue
        inside, rest = split
        mp, mr = percentile(inside, 50), percentile(rest, 50)
        noise = sum(g > STALL_FACTOR * mr for g in rest)
        c, k = p99_sources(r)
        if c == 0:
            tail = f"　→ p99 を決める上位 {k} 個の間隔はどれもチャンクのステップの外なので、この予算の p99 は揺れで決まります"
        elif c == k:
            tail = f"　→ p99 を決める上位 {k} 個の間隔はすべてチャンクのステップで、p99 はチャンクのステップの長さです"
        else:
            tail = f"　→ p99 を決める上位 {k} 個の間隔は、チャンクのステップ {c} 個とそれ以外 {k - c} 個です"
        out.append(f"予算 {r['budget']:>3}: Prefill と同じステップの間隔 {len(inside)} 個の中央値 {mp:.1f} ms（それ以外の "
                   f"{len(rest)} 個の中央値 {mr:.1f} ms の {mp / mr:.1f} 倍）、それ以外の長い間隔 {noise} 個" + tail)
    return "\n".join(out) or "（長いプロンプトの時刻がないので、予算ごとには分けません）"


__all__ = ["BLOCK", "BUSY", "STALL_FACTOR", "budget_prediction", "budget_reading", "disagg_itl_reading", "dominated",
           "gaps", "handoff_reading", "kv_reading", "mean_reading", "p99_needs", "pareto_reading", "prefill_gaps",
           "singles", "stall_bound", "stall_reading", "stall_share", "sweep_lines"]
