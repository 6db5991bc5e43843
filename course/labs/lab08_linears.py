"""Lab 8: how long the default model's Linear layers alone take at a few batch sizes (the weight pass
inside one decode step), to split the step's "fixed time" on this CPU::

    t = linear_pass_ms((1, 4, 8))      # {1: ms, 4: ms, 8: ms}: every Linear layer once, B rows each

Each layer is the engine's own module (CpuLinear, the kernel the engine chose at load), fed B rows, as
in a decode step of B requests (lm_head included: it also runs on one row per request). The figure is
the minimum over ``repeats`` passes. If the time hardly grows from 1 to 4 rows, the extra rows are
hidden behind reading the weights (the roofline idea behind a GPU's small batches; whether it holds on
this CPU, and how large a share of the step the pass is, is measured, not assumed), so the weight pass
is part of the per-step fixed time that batching and speculation share; the rest of the step is Python,
attention, sampling and the scheduler.
"""
from __future__ import annotations

import torch

from course.labkit.linear_rows import linear_layers, linear_ms, pass_ms, table_words
from course.runtime import cached_llm
from minimal_engine import LLM


def _llm(device: str = "cpu") -> LLM:
    return cached_llm(("lab8", "linears", device),
                      lambda: LLM(None, device=device, max_num_seqs=1, kv_cache_memory=16 << 20))


def _model(device: str = "cpu"):
    return _llm(device).model


def linear_pass_ms(batches=(1, 4, 8), repeats: int = 30, device: str = "cpu") -> dict[int, float]:
    """Minimum time (ms) of one pass through every Linear layer of the default model with B rows."""
    layers = linear_layers(_model(device))
    out = {}
    with torch.inference_mode():
        for b in batches:
            xs = [torch.randn(b, m.in_features, dtype=m.weight.dtype, device=m.weight.device) for m in layers]
            pass_ms(layers, xs)                   # warm-up (first calls are slow)
            out[b] = min(pass_ms(layers, xs) for _ in range(repeats))
    return out


def weight_bytes(device: str = "cpu") -> int:
    """Bytes of the Linear layers' weights (what one pass reads)."""
    return sum(m.weight.numel() * m.weight.element_size() for m in _model(device).modules()
               if isinstance(m, torch.nn.Linear))


def kernel_rows(rows=(1, 3, 5, 9), rounds: int = 12, device: str = "cpu") -> dict[int, dict]:
    """{rows: {"min", "median"}} ms of one pass through every Linear layer (course.labkit.linear_rows, rounds shuffled)."""
    return linear_ms(_llm(device), rows, rounds)


KERNEL = ("エンジンの Linear のカーネル自体の、行数による速さの違いです（カーネルは minimal_engine/model/cpu_linears.py "
          "が読み込み時に選んだもの）")


def verify_cost_reading(kt: dict[int, dict], ks=(2, 4, 8)) -> str:
    """The formula assumes a verify step (k+1 rows) takes as long as a decode step (1 row). Compares the Linear
    pass at k+1 rows with 1 row: faster beyond the rounds' spread (its median below 1 row's minimum), slower
    beyond it, or within it. Blind reading 2026-12-07d ch08 #2: 5 rows ran faster than 1 row on an AVX-512 EPYC."""
    base = kt[1]
    words = []
    for k in ks:
        r = kt[k + 1]
        side = ("短い" if r["median"] < base["min"] else "長い" if r["min"] > base["median"] else "差は繰り返しの幅の中")
        words.append(f"k = {k}（{k + 1} 行）{side}")
    text = f"Linear 層だけの時間: {table_words(kt)}\n→ 1 行（Decode）と比べた検証: " + "、".join(words)
    if any("短い" in w for w in words):
        text += (f"\n→ 行の多いほうが短いのは、{KERNEL}。その k では、式の「検証1回 = Decode 1ステップ」の仮定が検証を"
                 "長く見積もるので、Linear 層の分だけ予測は実測より小さくなる向きです")
    if any("長い" in w for w in words):
        text += "\n→ 検証が長い k では、Linear 層の分だけ予測は実測より大きくなる向きです"
    return text


def verify_rows_reading(linear_ms: dict[int, float], rows: list[dict], k: int) -> str:
    """The verify step at concurrency B runs B(k+1) rows through the Linear layers, the no-speculation step B rows.
    linear_ms: ``linear_pass_ms`` at both row counts; rows: concurrency, ngram_speedup (tok/s) and
    ngram_tpot_speedup (TPOT). Prints how much longer the verify's rows take than the baseline's, and the two
    speedups: tok/s includes the prefill both runs pay (its share grows with the concurrency), TPOT does not."""
    parts = []
    for r in rows:
        c = r["concurrency"]
        t0, t1 = linear_ms[c], linear_ms[c * (k + 1)]
        parts.append(f"同時 {c}: {c} 行 {t0:.2f} ms → {c * (k + 1)} 行 {t1:.2f} ms（{t1 / t0:.1f} 倍）")
    faster = [r["concurrency"] for r in rows if linear_ms[r["concurrency"] * (k + 1)] < linear_ms[r["concurrency"]]]
    grow = linear_ms[rows[-1]["concurrency"] * (k + 1)] / linear_ms[rows[-1]["concurrency"]]
    text = ("Linear 層だけの時間、投機なしの行数 → 検証の行数（同時リクエスト数 × (k+1)）:\n  " + "\n  ".join(parts))
    if faster:                # blind reading 2026-12-07 (reviews10) ch08 #4: minima only, no spread: no attribution
        c = faster[0]
        text += (f"\n→ 同時 {c} では、検証の行の Linear 層の時間が投機なしの行以下に測れました（差 "
                 f"{linear_ms[c] - linear_ms[c * (k + 1)]:.2f} ms。最小値どうしの比較で、繰り返しの幅は測っていません）。"
                 "余分な行は重みを読む時間に隠れています。ただし、この小さな差だけでは、検証のステップが Decode の"
                 "ステップより短いとは言えません。Linear 層は1ステップの一部です")
    if grow >= 1.5:
        text += (f"\n→ 同時 {rows[-1]['concurrency']} では、検証の余分な行が重みを読む時間に隠れず、検証のステップが"
                 "長くなります。行が増えると演算で決まるようになるのは、GPU のルーフラインと同じ形です。")
    else:
        text += "\n→ この行数までは、検証の余分な行の多くが重みを読む時間に隠れています。"
    text += (f"\n→ このエンジンは、検証の k+1 トークンをリクエストごとの Prefill のチャンクとして扱います。そのためアテンションは"
             "リクエストごとに1回ずつ（ブロックを集め、マスクを作り、SDPA）計算します。投機なしの Decode のアテンションは"
             "バッチ全体で1回です。同時リクエスト数が多いほど、この分も検証のステップを長くします（ここでは時間を"
             "測っていません）。これはこのエンジンの実装による分で、GPU のルーフラインとは別の仕組みです"
             "（minimal_engine/model/attention.py の paged_attention）。")
    first, last = rows[0], rows[-1]
    text += (f"\n速度比（tok/s）{first['ngram_speedup']:.2f} → {last['ngram_speedup']:.2f}、"
             f"速度比（TPOT）{first['ngram_tpot_speedup']:.2f} → {last['ngram_tpot_speedup']:.2f}"
             f"（同時 {first['concurrency']} → {last['concurrency']}）。tok/s は、どちらの実行も同じだけ払う Prefill の時間を"
             "含み、TPOT は含みません。Prefill の割合が大きいほど、速度比（tok/s）は速度比（TPOT）より 1 に近くなります。")
    return text


__all__ = ["KERNEL", "kernel_rows", "linear_pass_ms", "verify_cost_reading", "verify_rows_reading", "weight_bytes"]
