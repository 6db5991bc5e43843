"""Chapter 5 (lab 5): the engine's Linear layers timed at several row counts, in the same run as the sweep.

A decode step of B requests feeds each Linear layer B rows. Its arithmetic never falls as B grows, but its time
can: the kernel the engine took at load (``minimal_engine.model.cpu_linears``; in float32, oneDNN weights
pre-packed for a 16-row hint, ``PACK_HINT``) need not be monotonic in the rows. Blind reading 2026-12-07c ch05 #1
(AMD EPYC, AVX-512, torch 2.13.0+cpu, 1 thread, the default model's 25 Linear layers, 12 interleaved rounds) timed
1 / 2 / 4 / 8 rows at 3.47 / 3.68 / 2.95 / 3.83 ms (minimum of the rounds). So a static TPOT that falls with the
batch may be the kernel's own shape, not load. ``linear_ms`` times every Linear module of the engine's model (its
own CpuLinear: the kernel it took) at ``ROWS``, rounds in a shuffled order; ``falls`` names the row counts whose
more-row time lies below the fewer-row time beyond the rounds' spread; ``step_fall_reason`` words it.
"""
from __future__ import annotations

import random
import statistics
import time

ROWS = (1, 2, 4, 8)
ROUNDS = 12


def linear_layers(model) -> list:
    """Every nn.Linear of ``model`` (the engine's CpuLinear included), in module order."""
    import torch
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def pass_ms(layers, xs) -> float:
    """ms of one pass: each layer called once on its input, back to back (call it under inference_mode)."""
    t0 = time.perf_counter()
    for m, x in zip(layers, xs):
        m(x)
    return (time.perf_counter() - t0) * 1e3


def linear_ms(llm, rows=ROWS, rounds: int = ROUNDS, seed: int = 0) -> dict[int, dict]:
    """{rows: {"min", "median"}}: ms for one pass through every Linear layer of ``llm``'s model with that many rows."""
    import torch
    layers = linear_layers(llm.engine.runner.model)
    gen = torch.Generator().manual_seed(seed)
    xs = {r: [torch.randn(r, m.in_features, generator=gen).to(m.weight.dtype) for m in layers] for r in rows}
    order = [r for _ in range(rounds) for r in rows]
    random.Random(seed).shuffle(order)
    times: dict[int, list[float]] = {r: [] for r in rows}
    with torch.inference_mode():
        for r in rows:                                  # a first pass per row count: not measured
            pass_ms(layers, xs[r])
        for r in order:
            times[r].append(pass_ms(layers, xs[r]))
    return {r: {"min": min(t), "median": statistics.median(t)} for r, t in times.items()}


def merged(runs: dict[int, dict]) -> dict[int, dict] | None:
    """The sweep's runs' ``linear_ms`` together: per row count the lowest minimum and the median of the medians."""
    found = [res["linear_ms"] for res in runs.values() if res.get("linear_ms")]
    if not found:
        return None
    rows = sorted({r for k in found for r in k})
    return {r: {"min": min(k[r]["min"] for k in found if r in k),
                "median": statistics.median(k[r]["median"] for k in found if r in k)} for r in rows}


def falls(kt: dict[int, dict]) -> list[tuple[int, int]]:
    """(fewer, more) rows where more rows ran faster beyond the rounds' spread: its median below fewer's minimum."""
    rs = sorted(kt)
    return [(a, b) for i, a in enumerate(rs) for b in rs[i + 1:] if kt[b]["median"] < kt[a]["min"]]


def table_words(kt: dict[int, dict]) -> str:
    return "・".join(f"{r} 行 {kt[r]['min']:.2f}" for r in sorted(kt)) + " ms（全層1回分、繰り返しの最小）"


def step_fall_reason(runs: dict[int, dict]) -> str:
    """Why a static TPOT fell as the batch grew: the kernel's own row dependence (measured in the same runs), or load."""
    kt = merged(runs)
    caveat = "直線の当てはめと終わった行の見積もりは、1ステップの時間が件数とともに伸びると仮定しているので、目安です"
    if kt is None:
        return ("件数の多いステップが少ないステップより速く測れました。1ステップの計算は件数とともに減りませんが、時間は "
                "Linear のカーネルが行数によって速さを変えることでも、混み具合でも下がります。負荷の警告を確かめ、"
                f"course.labkit.linear_rows.linear_ms でカーネルを行数ごとに測ってください。{caveat}")
    down = falls(kt)
    if down:
        pairs = "、".join(f"{b} 行が {a} 行より速い" for a, b in down)
        return (f"同じ実行で測ったエンジンの Linear のカーネル自体が、行の多いほうで速く測れました（{pairs}。"
                f"{table_words(kt)}）。1ステップの計算は件数とともに減りませんが、時間はカーネルが行数をどう扱うかで"
                "変わります。静的の TPOT が下がったのは、このカーネルの形か混み具合です。負荷の警告を確かめてください。"
                f"{caveat}")
    return ("件数の多いステップが少ないステップより速く測れましたが、同じ実行で測ったエンジンの Linear のカーネルは、"
            f"行が多いほうで速くなってはいません（{table_words(kt)}）。計測が混み具合に左右されています。負荷の警告を"
            f"確かめ、ほかのカーネルを止めて測り直してください。{caveat}")


__all__ = ["ROUNDS", "ROWS", "falls", "linear_layers", "linear_ms", "merged", "pass_ms", "step_fall_reason",
           "table_words"]
