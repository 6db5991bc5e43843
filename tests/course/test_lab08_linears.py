"""Lab 8's weight-pass timing (course/labs/lab08_linears.py): every Linear layer of the default model
once with B rows, a minimum over repeats, and the bytes of weights that pass reads."""
from __future__ import annotations

import torch

from course.labs import lab08_linears


def test_linear_pass_times_each_batch_and_counts_the_weights():
    t = lab08_linears.linear_pass_ms((1, 4), repeats=2)
    assert set(t) == {1, 4} and all(v > 0 for v in t.values())
    model = lab08_linears._model()
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert layers
    assert lab08_linears.weight_bytes() == sum(m.weight.numel() * m.weight.element_size() for m in layers)


def test_verify_rows_reading_names_the_rows_and_the_prefill():
    """Final blind reading ch08 #1: at concurrency B the verify runs B(k+1) rows; the reading prints the Linear
    pass at both row counts and the tok/s and TPOT speedups side by side (the blind reading's own numbers)."""
    ms = {1: 3.27, 4: 2.75, 5: 2.76, 8: 3.79, 20: 7.61, 40: 13.37}
    rows = [{"concurrency": 1, "ngram_speedup": 4.67, "ngram_tpot_speedup": 5.14},
            {"concurrency": 4, "ngram_speedup": 1.60, "ngram_tpot_speedup": 2.11},
            {"concurrency": 8, "ngram_speedup": 1.37, "ngram_tpot_speedup": 1.76}]
    text = lab08_linears.verify_rows_reading(ms, rows, k=4)
    assert "8 行 3.79 ms → 40 行 13.37 ms（3.5 倍）" in text and "1 行 3.27 ms → 5 行 2.76 ms（0.8 倍）" in text
    assert "隠れず" in text and "速度比（tok/s）4.67 → 1.37、速度比（TPOT）5.14 → 1.76" in text and "Prefill" in text
    flat = lab08_linears.verify_rows_reading({**ms, 40: 4.0}, rows, k=4)       # planted: the rows still hide
    assert "隠れています" in flat and "隠れず" not in flat


def test_verify_cost_reading_names_the_kernel_when_more_rows_run_faster():
    """Blind reading 2026-12-07d ch08 #2: one Linear pass on 5 rows ran faster than on 1 row (3.45 vs 3.79 ms)."""
    kt = {1: {"min": 3.79, "median": 3.85}, 3: {"min": 3.80, "median": 3.90}, 5: {"min": 3.40, "median": 3.45},
          9: {"min": 4.60, "median": 4.70}}
    text = lab08_linears.verify_cost_reading(kt)
    assert "k = 4（5 行）短い" in text and "k = 8（9 行）長い" in text and "k = 2（3 行）差は繰り返しの幅の中" in text
    assert lab08_linears.KERNEL in text and "小さくなる向き" in text and "大きくなる向き" in text
    flat = lab08_linears.verify_cost_reading({r: {"min": 3.0 + r / 10, "median": 3.05 + r / 10} for r in (1, 3, 5, 9)})
    assert lab08_linears.KERNEL not in flat and "短い" not in flat


def test_verify_rows_reading_names_the_kernel_when_the_verify_rows_are_faster():
    ms = {1: 3.79, 4: 3.78, 5: 3.45, 8: 3.78, 20: 6.82, 40: 10.42}
    rows = [{"concurrency": c, "ngram_speedup": 2.0, "ngram_tpot_speedup": 2.0} for c in (1, 4, 8)]
    text = lab08_linears.verify_rows_reading(ms, rows, k=4)
    assert "同時 1 では、検証の行の Linear 層の時間が投機なしの行以下" in text and "差 0.34 ms" in text
    assert lab08_linears.KERNEL not in text and "言えません" in text     # reviews10 ch08 #4: no attribution
    assert "投機なしの行以下" not in lab08_linears.verify_rows_reading({**ms, 5: 3.9}, rows, k=4)
    assert "リクエストごとに1回ずつ" in text                                # reviews10 ch08 #1: the attention path
