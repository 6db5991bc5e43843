"""Tensor parallelism on a CPU (lab 7): what one all-reduce of the engine's TP is made of, measured on every rank,
and rank 0's share of the matmuls (``rank0_share``, ``lm_head_share``: what the compute ratio is read against);
``configs`` and ``best_speedup``: the three configurations lab 7's table and figure show (TP=1 on two thread counts, TP=N).

    traces = tp_model.trace_calls(True) ... steps ... tp_model.trace_calls(False)   # engine records, rank 0 first
    s = call_stats(traces)                  # medians per call (µs), who arrived last, rank 0's waiting share
    print(calls_reading(s, floor_us))       # floor_us: lab07_ping.bare_allreduce_us(...)[size]["median_us"]

Each rank records each all-reduce's entry and exit on time.perf_counter (one clock for every process of the
machine, ``TensorParallelModel.trace_calls``). For call i the rank that enters last cannot wait for anyone:
its time inside is the exchange itself once every rank is there. The earlier ranks first wait for it (the
arrival gap), then exchange. Rank 0's time inside (what the lab's 「通信」 counts, besides sending the step)
therefore splits into its wait before the last rank arrived and its time after; ``call_stats`` sums both over
the calls (shares of rank 0's in-call total). The exchange is compared with the bare all-reduce between two
idle processes (``lab07_ping``) by the same statistic: median against median. Why the exchange is slower
while the ranks compute is not separated by these numbers; the candidates on a CPU with few cores are
listed as candidates (``CANDIDATES``).
"""
from __future__ import annotations

import statistics

TAIL_X = 5.0           # a call of rank 0 longer than this many times its median is a long call (call_stats)

from minimal_engine.features.tensor_parallel.sharding import head_ranges, split_sizes

CANDIDATES = ("gloo の受け渡しで、待っていたプロセスが起こされて CPU に割り当てられるまでの遅れ（両方のプロセスが"
              "計算しているときのスケジューリング）、2つのランクのスレッド（PyTorch と gloo）が少ないコアを分け合うこと、"
              "キャッシュの影響（計算の合間に通信のデータが追い出される）")


def pair_calls(traces: list[list[tuple]]) -> list[list[tuple]]:
    """Call i of every rank, side by side: [(entry, exit), one per rank] (the ranks make the same calls in order)."""
    n = len(traces[0])
    if any(len(t) != n for t in traces):
        raise ValueError(f"ranks recorded different call counts: {[len(t) for t in traces]}")
    return [[(t[i][0], t[i][1]) for t in traces] for i in range(n)]


def call_stats(calls: list[list[tuple]]) -> dict:
    """Per-call figures of paired calls (``pair_calls``; µs): each rank's median time inside, how often each rank
    arrived last, the median arrival gap, the median time inside of the rank that arrived last (the exchange
    with nobody to wait for), rank 0's median time after every rank arrived, and rank 0's waiting share.
    The tail: rank 0's mean time inside, and the calls over ``TAIL_X`` times its median (how many, and their
    share of rank 0's in-call total; the step's 「通信」 is the mean, so these long calls weigh in it)."""
    us = 1e6
    ranks = len(calls[0])
    last = [max(range(ranks), key=lambda r: c[r][0]) for c in calls]
    gap = [(max(e for e, _ in c) - min(e for e, _ in c)) * us for c in calls]
    inside = [[(c[r][1] - c[r][0]) * us for c in calls] for r in range(ranks)]
    wait0 = [min(max(0.0, (max(e for e, _ in c) - c[0][0]) * us), d) for c, d in zip(calls, inside[0])]
    after0 = [d - w for d, w in zip(inside[0], wait0)]
    med0 = statistics.median(inside[0])
    tail = [d for d in inside[0] if d > TAIL_X * med0]
    return {"calls": len(calls), "ranks": ranks,
            "inside_median_us": [statistics.median(x) for x in inside],
            "last_counts": [last.count(r) for r in range(ranks)],
            "gap_median_us": statistics.median(gap),
            "last_inside_median_us": statistics.median(inside[l][i] for i, l in enumerate(last)),
            "rank0_after_median_us": statistics.median(after0),
            "rank0_wait_share": sum(wait0) / sum(inside[0]) if sum(inside[0]) else 0.0,
            "rank0_mean_us": statistics.fmean(inside[0]), "rank0_tail_calls": len(tail),
            "rank0_tail_share": sum(tail) / sum(inside[0]) if sum(inside[0]) else 0.0}


WAIT_MOSTLY = 0.5      # rank 0's waiting share above this: the call is mostly waiting for the last rank
TAIL_MOSTLY = 2.0      # rank 0's mean at least this many times its median: over half its time is the excess of longer calls
PING_TAIL = 3.0        # the idle ping's p90 over its median above this: even idle processes waited for a core


STEAL_SEEN = 0.05      # the hypervisor's steal over the ping, in cores, from which it stays a candidate


def tail_line(s: dict, floor_us: float | None = None, floor_p90_us: float | None = None,
              floor_steal: float | None = None) -> str:
    """Rank 0's long calls (``call_stats``: mean against median, calls over ``TAIL_X`` times the median) and,
    when the idle ping's own p90 is ``PING_TAIL`` times its median or more, that even idle processes waited:
    for a core (OS scheduling) or for the hypervisor (steal), which the ping's times cannot separate; the
    steal that LoadWatch read over the ping (``floor_steal``, cores) is printed as the measurement that
    bears on it (blind reading 2026-12-07d ch07 #5)."""
    if "rank0_mean_us" not in s:
        return ""
    med = s["inside_median_us"][0]
    text = (f"\nランク 0 の1回の平均は {s['rank0_mean_us']:.0f} µs で、中央値の {s['rank0_mean_us'] / med:.1f} 倍です。"
            f"中央値の {TAIL_X:.0f} 倍を超えた回は {s['rank0_tail_calls']} 回"
            f"（{100 * s['rank0_tail_calls'] / s['calls']:.0f}%）で、ランク 0 の all-reduce の時間の "
            f"{100 * s['rank0_tail_share']:.0f}% を占めます。")
    if floor_us and floor_p90_us and floor_p90_us >= PING_TAIL * floor_us:
        text += (f"\n何もしない2プロセスの all-reduce でも、p90 {floor_p90_us:.0f} µs は中央値の "
                 f"{floor_p90_us / floor_us:.1f} 倍です。計算をしないプロセスがこれほど待つ原因の候補は2つです。"
                 "コアが空くのを待つこと（OS のスケジューリング）と、ハイパーバイザーがこの仮想マシンから CPU を"
                 "取り上げること（steal）です。")
        if floor_steal is not None:
            text += (f"これを測るあいだの steal は平均 約 {floor_steal:.2f} コアでした。"
                     + ("steal も候補に残ります。" if floor_steal >= STEAL_SEEN else
                        "steal は平均ではほとんどなかったので、OS のスケジューリングのほうが有力な候補です。"))
        else:
            text += "この計測では、この2つを分けられません。"
    return text


def calls_reading(s: dict, floor_us: float | None, label: str = "Decode", undecided: str = "",
                  floor_p90_us: float | None = None, floor_steal: float | None = None) -> str:
    """What the per-rank figures show (printed from ``call_stats``), and the verdict they support. ``undecided``:
    the line to print instead of that verdict when the run was busy (lab07_explain.undecidable fired: other programs
    may have taken the cores, and the bare call was timed at another moment), so no mechanism is named.
    ``floor_p90_us``: the idle ping's p90; a long tail there names OS scheduling for the long calls."""
    ranks = "、".join(f"ランク {r} {m:.0f} µs" for r, m in enumerate(s["inside_median_us"]))
    text = (f"{label} の all-reduce {s['calls']} 回（ランクごとの記録、中央値）: all-reduce の中の時間は {ranks}。"
            f"最後に来たのはランク 0 が {s['last_counts'][0]} 回、ほかのランクが {s['calls'] - s['last_counts'][0]} 回。"
            f"到着の差 {s['gap_median_us']:.0f} µs。最後に来たランク（だれも待たない）の中の時間 "
            f"{s['last_inside_median_us']:.0f} µs。\n"
            f"ランク 0 の all-reduce の中の時間の合計のうち、相手が来るまで待った分は {100 * s['rank0_wait_share']:.0f}%、"
            f"全員がそろってからの受け渡しが {100 * (1 - s['rank0_wait_share']):.0f}% です。")
    text += tail_line(s, floor_us, floor_p90_us, floor_steal)
    if floor_us:
        x = s["last_inside_median_us"] / floor_us
        text += (f"\nそろってからの受け渡し（最後に来たランクの中の時間）は中央値 {s['last_inside_median_us']:.0f} µs で、"
                 f"何もしない2プロセスの all-reduce（同じく最後に来たランクの中の時間）の中央値 {floor_us:.0f} µs の "
                 f"{x:.1f} 倍です。")
        if x < 1:
            text += ("この実行では、何もしない2プロセスのほうが長くかかったので、下限としては読めません。"
                     "何もしない2プロセスは TP の実行とは別の時刻に測ったので、その時刻の負荷で長くなることがあります。")
    if undecided:
        return text + "\n→ " + undecided
    if s["rank0_wait_share"] > WAIT_MOSTLY:
        return text + ("\n→ ランク 0 の all-reduce の時間の大半は、相手のランクが来るまで待つ時間です"
                       "（相手がランク 0 より遅れて来ています）。")
    if s.get("rank0_mean_us", 0.0) >= TAIL_MOSTLY * s["inside_median_us"][0]:
        text += (f"\n→ 相手を待つ時間では説明できません。平均が中央値の {TAIL_MOSTLY:.0f} 倍以上なので、ランク 0 の all-reduce の時間の"
                 "半分以上は、中央値より長くかかった回の、中央値を超えた分です。")
        if floor_us and floor_p90_us and floor_p90_us >= PING_TAIL * floor_us:
            text += ("何もしない2プロセスにも同じような長い回があるので、その主な原因は、プロセスが CPU を待つ時間"
                     "（上の行の2つの候補）と見られます。1回の受け渡しそのものは、中央値で読んでください。")
        else:
            text += "この計測では、長くかかった原因を分けられません。"
    else:
        text += "\n→ all-reduce の時間の大半は、相手を待つ時間では説明できません。全員がそろってからの受け渡しそのものに時間がかかっています。"
    if floor_us and s["last_inside_median_us"] > 1.5 * floor_us:
        text += ("中央値でも、何もしないプロセスどうしより遅くなっています。その原因の候補は、"
                 f"{CANDIDATES}です。この計測では、これらを分けられません。")
    return text


def lm_head_share(cfg) -> float:
    """Share of one token's matrix-multiply weights in lm_head (vocab x hidden), from the shape:
    the part that TP replicates and only rank 0 computes (lab07_explain.ratio_reading)."""
    attn = cfg.hidden_size * cfg.head_dim * (2 * cfg.num_heads + 2 * cfg.num_kv_heads)
    per_layer = attn + 3 * cfg.hidden_size * cfg.intermediate_size
    head = cfg.vocab_size * cfg.hidden_size
    return head / (cfg.num_layers * per_layer + head)


def rank0_share(cfg, tp: int, rows: int = 1, logit_rows: int = 1) -> dict:
    """Rank 0's share of TP=1's matrix-multiply work in one step of `rows` tokens, `logit_rows` of which go
    through lm_head: its query/KV heads (sharding.head_ranges: 3 of 5 for TP=2), its slice of the
    intermediate size (split_sizes) and the whole replicated lm_head (lab07_explain.ratio_reading)."""
    q, kv = head_ranges(cfg.num_heads, cfg.num_kv_heads, tp, 0)
    inter0 = split_sizes(cfg.intermediate_size, tp)[0]
    h, d = cfg.hidden_size, cfg.head_dim

    def layer(nq, nkv, inter):
        return h * d * (2 * nq + 2 * nkv) + 3 * h * inter
    head = cfg.vocab_size * h * logit_rows
    full = cfg.num_layers * rows * layer(cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size) + head
    mine = cfg.num_layers * rows * layer(len(q), len(kv), inter0) + head
    return {"share": mine / full, "heads": len(q), "num_heads": cfg.num_heads}


def configs(res: dict) -> list[tuple]:
    """The configurations to show side by side: (label, prefill_ms, prefill_comm_ms, decode_ms, decode_comm_ms) for
    TP=1 on its threads, TP=1 on one rank's threads (lab07's ``tp1_own_*``; left out when the counts are equal) and TP=N."""
    n, (tp1_threads, _), (own, _) = res["tp"], res["threads_per_config"][1], res["threads_per_config"][res["tp"]]
    one, many = res["runs"][1], res["runs"][n]
    out = [(f"TP=1（{tp1_threads} スレッド）", one["prefill_ms"], 0.0, one["decode_ms"], 0.0)]
    if own != tp1_threads:
        out.append((f"TP=1（{own} スレッド）", res["tp1_own_prefill_ms"], 0.0, res["tp1_own_decode_ms"], 0.0))
    out.append((f"TP={n}（{own} スレッド × {n}）", many["prefill_ms"], many["prefill_comm_ms"],
                many["decode_ms"], many["decode_comm_ms"]))
    return out


def best_speedup(res: dict, kind: str) -> tuple[float, int]:
    """TP=1's faster time (its threads or one rank's, the basis of the verdict) over TP=N's, and that TP=1's threads."""
    n, tp1_threads, own = res["tp"], res["threads_per_config"][1][0], res["threads_per_config"][res["tp"]][0]
    mine, own_ms = res["runs"][1][f"{kind}_ms"], res[f"tp1_own_{kind}_ms"]
    base, threads = (own_ms, own) if own_ms < mine else (mine, tp1_threads)
    return base / res["runs"][n][f"{kind}_ms"], threads


__all__ = ["CANDIDATES", "PING_TAIL", "TAIL_MOSTLY", "TAIL_X", "WAIT_MOSTLY", "tail_line", "best_speedup", "call_stats", "configs", "calls_reading", "lm_head_share", "pair_calls", "rank0_share"]
