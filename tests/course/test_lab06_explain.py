"""Chapter 6's predictions (course/labs/lab06_explain.py): each verdict turns when a contradicting number is
planted, and every verdict saved in lab 6 and lesson 6 agrees with the numbers saved next to it. Also: the
outlier task's metric (rows without the outlier, against the original weight) and the emulated INT8 format
that equals the engine's Int8Linear."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from course.demos import formats
from course.labkit.predictions import HELD, MISSED
from course.labs import lab06_explain as ex

ROOT = Path(__file__).resolve().parents[2]
KERNELS = "int8 weights: _weight_int8pack_mm for short steps (CPU AVX512)"


def run(b1: float, bB: float, kernels: str = KERNELS) -> dict:
    return {"ratios": {"tpot_b1": b1, "tpot_bB": bB}, "settings": {"int8": {"kernels": kernels}}}


def test_task1_verdicts_follow_the_numbers():
    good = {2: run(0.78, 1.05), 8: run(0.77, 1.60), 32: run(0.79, 1.22)}
    assert [p.held for p in ex.task1_predictions(good)] == [True, True]
    table = ex.task1_table(good)
    assert "バッチ  8" in table and "int8pack" in table.splitlines()[1]
    assert "逆量子化してから行列積" in table.splitlines()[2]
    # planted: INT8 keeps its gain at batch 8 (the ratio below batch 1's)
    assert not ex.task1_predictions({**good, 8: run(0.77, 0.70)})[0].held
    # planted: the largest batch still far below 1
    missed = ex.task1_predictions({**good, 32: run(0.79, 0.85)})[1]
    assert not missed.held and missed.verdict().startswith(MISSED) and "0.85" in missed.verdict()
    # batch 2 is shown but not judged: one extra row moves the ratio by less than the noise
    assert ex.task1_predictions({**good, 2: run(0.78, 0.70)})[0].held
    # planted: batch 8 above batch 1's median, but by less than the noise margin
    assert not ex.task1_predictions({**good, 8: run(0.77, 0.78 + ex.NOISE_MARGIN - 0.01)})[0].held
    # planted: the batch-1 ratios of identical runs spread 0.59-0.96 (load); the margin widens to that spread, and
    # the reason names the noise first
    noisy = {2: run(0.59, 0.88), 8: run(0.96, 1.17), 32: run(0.95, 1.09)}
    assert ex.task1_margin(ex.task1_rows(noisy)) == pytest.approx(0.37)
    p = ex.task1_predictions(noisy)[0]
    assert not p.held and "0.59〜0.96" in p.verdict() and p.otherwise.startswith("比の差が") and "分けられません" in p.otherwise
    assert ex.task1_predictions({2: run(0.94, 0.88), 8: run(0.96, 1.17), 32: run(0.95, 1.09)})[0].held
    # the lab's first run beside task 1's batch-1 ratios: inside or outside their range
    assert "範囲の中" in ex.batch1_note(run(0.78, 1.0), good)
    far = ex.batch1_note(run(1.97, 1.3), good)
    assert "1.97" in far and "0.77〜0.79" in far and "範囲の外" in far
    # a CPU without the int8 kernel: every batch dequantizes
    assert "int8pack" not in ex.task1_table({2: run(1.3, 1.4, "int8 weights: dequantize+matmul (CPU DEFAULT)")})


def test_lesson_batch_and_kernel_verdicts_follow_the_numbers():
    res = {"batch": 32, "ratios": {"tpot_b1": 0.75, "tpot_bB": 1.18}}
    assert ex.batch_predictions(res, [0.76, 0.74])[0].held
    assert not ex.batch_predictions({**res, "ratios": {"tpot_b1": 0.75, "tpot_bB": 0.50}}, [0.76])[0].held
    # planted: above batch 1's ratio and above NEAR_ONE, but within NOISE_MARGIN: undecided, not held
    p = ex.batch_predictions({**res, "ratios": {"tpot_b1": 0.92, "tpot_bB": 0.95}})[0]
    assert isinstance(p, ex.Undecided) and not p.held and p.verdict().startswith(ex.UNDECIDED)
    # planted: the re-measured batch-1 ratios spread 0.76-1.29 (load), so 1.12 against a median 1.02 is within
    # the noise (the reader's case: a fixed 0.05 margin had called it 予想どおり)
    p = ex.batch_predictions({**res, "ratios": {"tpot_b1": 1.02, "tpot_bB": 1.12}}, [0.76, 1.29])[0]
    assert isinstance(p, ex.Undecided) and "揺れの幅 0.53" in p.verdict()
    # the same 1.12 with a tight batch-1 spread is decided
    assert ex.batch_predictions({**res, "ratios": {"tpot_b1": 0.80, "tpot_bB": 1.12}}, [0.81, 0.79])[0].held

    # the lesson's saved 1728 x 320 column: int8pack 16.68 -> 2096.79 us, BF16 56.98 -> 548.76 us, 1 -> 256 rows
    rows = [{"rows": 1, "int8pack_us": 16.68, "bf16_us": 56.98}, {"rows": 256, "int8pack_us": 2096.79, "bf16_us": 548.76}]
    p = ex.kernel_predictions(rows, shape="1728 × 320: ")[0]
    assert p.held and "指数 0.87" in p.verdict()
    flat = [rows[0], {**rows[1], "int8pack_us": 160.0}]                # planted: int8pack batches rows well
    assert not ex.kernel_predictions(flat)[0].held
    nan = [{**r, "int8pack_us": float("nan")} for r in rows]           # the kernel failed its probe
    assert not ex.kernel_predictions(nan)[0].held
    # reviews11 ch06 #3: the growth starts at 8 rows (BF16's 1 row is ATen's mat-vec); judged on per-row cost at 256
    four = [{"rows": 1, "int8pack_us": 35.17, "bf16_us": 75.34}, {"rows": 8, "int8pack_us": 134.0, "bf16_us": 71.5},
            {"rows": 32, "int8pack_us": 530.0, "bf16_us": 195.0}, {"rows": 256, "int8pack_us": 4292.13, "bf16_us": 1338.02}]
    v = ex.kernel_predictions(four)[0].verdict()
    assert "行数 8 → 256" in v and "1行あたり int8pack 16.8 µs、BF16 5.2 µs" in v and ex.kernel_predictions(four)[0].held
    assert not ex.kernel_predictions([*four[:3], {**four[3], "int8pack_us": 1200.0}])[0].held


def test_memory_reading_sets_the_three_ratios_together():
    good = {2: run(0.83, 0.81), 8: run(0.85, 1.10), 32: run(0.85, 1.20)}
    far = [{"rows": 1, "int8pack_over_bf16": 1.29}, {"rows": 8, "int8pack_over_bf16": 2.40}]
    line = ex.memory_reading(far, good, near=[{"rows": 1, "int8pack_over_bf16": 0.47}])
    assert "キャッシュに収まる大きさ 0.47、メモリから読む大きさ 1.29" in line and "説明できません" in line
    assert "候補に残ります" in ex.memory_reading([{"rows": 1, "int8pack_over_bf16": 0.6}], good)
    assert "決められません" in ex.memory_reading([{"rows": 1, "int8pack_over_bf16": 1.02}], good)


def cap(users: dict[str, int]) -> list[dict]:
    return [{"kv": k, "users": u, "blocks": 16 * u} for k, u in users.items()]


def test_task2_verdicts_follow_the_numbers():
    good = {128: cap({"float32": 8, "bf16": 17, "fp8": 34, "int8": 34}),
            512: cap({"float32": 2, "bf16": 4, "fp8": 8, "int8": 8})}
    assert [p.held for p in ex.task2_predictions(good)] == [True, True]
    assert "34 リクエスト（544 ブロック）" in ex.task2_table(good)
    planted = {512: cap({"float32": 2, "bf16": 4, "fp8": 6, "int8": 8})}        # FP8 only 1.5x BF16
    assert not ex.task2_predictions(planted)[0].held
    tiny = {512: cap({"float32": 0, "bf16": 1, "fp8": 2, "int8": 2})}           # nothing fits in float32
    assert not ex.task2_predictions(tiny)[0].held


def test_task3_scores_the_other_rows_against_the_original_weight():
    w = formats.default_weight()
    rows = ex.outlier_rows(w, factor=50)
    assert [p.held for p in ex.outlier_predictions(rows)] == [True, True, True]
    by = {r["format"]: r for r in rows}
    assert by["int8_channel"]["rest_after"] == pytest.approx(by["int8_channel"]["rest_before"])
    assert by["int8_channel"]["row_after"] > 10 * by["int8_channel"]["row_before"]   # the damage stays in its row
    # the diluted metric the task no longer uses: the whole matrix's error of per-row INT4 *falls*
    w_out = w.clone()
    w_out[0, 0] = 50 * w.abs().max()
    whole = {r["format"]: r["rel_error"] for r in formats.rounding_table(w)}
    whole_out = {r["format"]: r["rel_error"] for r in formats.rounding_table(w_out)}
    assert whole_out["int4_channel"] < whole["int4_channel"]


def test_task3_verdicts_follow_planted_numbers():
    rows = ex.outlier_rows(formats.default_weight(), factor=50)

    def planted(fmt, after):
        return [dict(r, rest_after=after * r["rest_before"]) if r["format"] == fmt else r for r in rows]
    assert not ex.outlier_predictions(planted("int8_tensor", 1.5))[0].held
    assert not ex.outlier_predictions(planted("int4_g32", 1.3))[1].held
    assert not ex.outlier_predictions(planted("fp8_e4m3_tensor", 1.5))[2].held


def qrows(diffs: dict[str, float], f32_top1: float = 0.992) -> list[dict]:
    rows = [{"setting": "bfloat16", "nats_per_char": 3.0496, "top1_agreement": 1.0}]
    return rows + [{"setting": s, "nats_per_char": 3.0496 + d, "top1_agreement": f32_top1 if s == "float32" else 0.98}
                   for s, d in diffs.items()]


def test_quality_verdicts_follow_the_numbers():
    good = qrows({"float32": 0.0001, "bfloat16 + weights int8": 0.0006, "bfloat16 + KV fp8": 0.0010})
    assert [p.held for p in ex.quality_predictions(good)] == [True, True]
    text = ex.quality_reading(good)
    assert "bfloat16 + KV fp8（+0.0010 nats/文字" in text and "98.0%（bfloat16 + weights int8）〜99.2%（float32）" in text
    assert not ex.quality_predictions(qrows({"float32": 0.0001, "bfloat16 + KV fp8": 0.02}))[0].held
    assert not ex.quality_predictions(qrows({"float32": 0.0}, f32_top1=1.0))[1].held
    # a difference that rounds to zero prints as ±0.0000, never -0.0000
    tiny = ex.quality_predictions(qrows({"float32": -0.00001, "bfloat16 + KV int8": 0.0002}))[0].verdict()
    assert "float32 ±0.0000" in tiny and "-0.0000" not in tiny and "+0.0002" in tiny


def test_the_emulated_int8_format_is_the_engines_int8_linear():
    from torch import nn

    from minimal_engine.features.quantization import Int8Linear
    w = formats.default_weight().to(torch.bfloat16)
    lin = nn.Linear(w.shape[1], w.shape[0], bias=False).to(torch.bfloat16)
    lin.weight.data.copy_(w)
    layer = Int8Linear(lin, use_int8pack=False)
    engine = layer.weight_int8.float() * layer.scales.float()[:, None]
    assert torch.equal(engine, formats.fake_quantize(w.float(), "int8_channel")[0])
    # the docstring's bound: half the float32 scale, plus |q| <= 127 times the bfloat16 scale's rounding (2^-8)
    s = w.float().abs().amax(1, keepdim=True) / 127
    worst = float(((engine - w.float()).abs() / s).max())
    assert 0.5 < worst <= 0.5 + 127 * 2.0 ** -8


# ---------------------------------------------------------------- the saved notebooks
def saved_lines(rel: str, marker: str) -> list[str]:
    nb = json.loads((ROOT / rel).read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"]))
    text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    return text.splitlines()


def verdict_lines(lines: list[str]) -> list[str]:
    return [x for x in lines if x.startswith((HELD, MISSED, ex.UNDECIDED))]


def agree(saved: list[str], derived) -> None:
    assert len(saved) == len(derived) and saved, saved
    for line, p in zip(saved, derived):
        want = ex.UNDECIDED if isinstance(p, ex.Undecided) else HELD if p.held else MISSED
        assert line.startswith(want), (line, p)


T1 = re.compile(r"バッチ\s*(\d+): TPOT の比（INT8 ÷ BF16）バッチ 1 で ([\d.]+)、バッチ \d+ で ([\d.]+)（.*経路: (.+)）")


def test_lab6_saved_task1_verdicts_agree_with_the_saved_table():
    lines = saved_lines("labs/06_quantization_lab.ipynb", "task1_predictions")
    runs = {int(b): run(float(a), float(c)) for b, a, c, _ in (T1.match(x).groups() for x in lines if T1.match(x))}
    assert sorted(runs) == list(ex.TASK1_BATCHES), lines
    agree(verdict_lines(lines), ex.task1_predictions(runs))


T2 = re.compile(r"(\d+) トークン: (.*)")
USERS = re.compile(r"(\w+) (\d+) リクエスト（(\d+) ブロック）")


def test_lab6_saved_task2_verdicts_agree_with_the_saved_table():
    lines = saved_lines("labs/06_quantization_lab.ipynb", "task2_predictions")
    caps = {int(t): [{"kv": k, "users": int(u), "blocks": int(b)} for k, u, b in USERS.findall(rest)]
            for t, rest in (T2.match(x).groups() for x in lines if T2.match(x))}
    assert sorted(caps) == list(ex.TASK2_TOKENS), lines
    agree(verdict_lines(lines), ex.task2_predictions(caps))


T3 = re.compile(r"(\S+)\s+ほかの行\s+([\d.]+) →\s+([\d.]+) %")


def test_lab6_saved_task3_verdicts_agree_with_the_saved_table():
    lines = saved_lines("labs/06_quantization_lab.ipynb", "outlier_predictions")
    rows = [{"format": f, "rest_before": float(a), "rest_after": float(b)}
            for f, a, b in (T3.match(x).groups() for x in lines if T3.match(x))]
    assert [r["format"] for r in rows] == list(ex.OUTLIER_FORMATS), lines
    agree(verdict_lines(lines), ex.outlier_predictions(rows))


DIFF = re.compile(r"(bfloat16 \+ [\w ]+?|float32) ([+\-±][\d.]+)")
TOP1 = re.compile(r"float32 の top-1 一致率 ([\d.]+)%")


@pytest.mark.parametrize("rel", ["labs/06_quantization_lab.ipynb", "lessons/06_quantization.ipynb"])
def test_saved_quality_verdicts_agree_with_their_numbers(rel):
    saved = verdict_lines(saved_lines(rel, "quality_predictions"))
    assert len(saved) == 2, saved
    diffs = {s: float(d.replace("±", "")) for s, d in DIFF.findall(saved[0].split("測定：")[1])}
    assert "float32" in diffs and len(diffs) == 4, saved[0]
    rows = qrows(diffs, f32_top1=float(TOP1.search(saved[1]).group(1)) / 100)
    agree(saved, ex.quality_predictions(rows))


KGROW = re.compile(r"^(.*?: )?行数 (\d+) → (\d+) で.*int8pack ([\d.]+) 倍、BF16 ([\d.]+) 倍"
                   r"(?:.*1行あたり int8pack ([\d.]+) µs、BF16 ([\d.]+) µs)?")
BATCH = re.compile(r"バッチ 1 で ([\d.、]+)（\d+ 回の.*?）、バッチ (\d+) で ([\d.]+)")


def test_lesson6_saved_kernel_and_batch_verdicts_agree_with_their_numbers():
    saved = verdict_lines(saved_lines("lessons/06_quantization.ipynb", "batch_predictions"))
    assert len(saved) == 3, saved
    derived = []
    for line in saved[:2]:
        _, r0, r1, t8, tb, p8, pb = KGROW.match(line.split("：", 1)[1]).groups()
        z8, zb = (float(p8) * int(r1), float(pb) * int(r1)) if p8 else (float(t8), float(tb))   # per-row µs
        rows = [{"rows": int(r0), "int8pack_us": z8 / float(t8), "bf16_us": zb / float(tb)},
                {"rows": int(r1), "int8pack_us": z8, "bf16_us": zb}]
        derived += ex.kernel_predictions(rows)
    b1, b, bB = BATCH.search(saved[2]).groups()
    b1s = [float(x) for x in b1.split("、")]
    derived += ex.batch_predictions({"batch": int(b), "ratios": {"tpot_b1": b1s[0], "tpot_bB": float(bB)}}, b1s[1:])
    agree(saved, derived)


def test_an_undecided_batch_verdict_names_the_load_the_repeats_and_a_ratio_no_kernel_allows():
    """Blind reading 2026-12-07b reviews6 ch06 #2: the saved 1.66 (re-measured 0.61, 1.06) stood unexplained."""
    def run_(b1, bB=1.79, load=2.6, reps=(1.2, 1.9)):
        return {"batch": 32, "ratios": {"tpot_b1": b1, "tpot_bB": bB}, "load1": load, "cores": 2,
                "b1_repeat_ratios": list(reps)}
    p = ex.batch_predictions(run_(1.66), [run_(0.61, load=1.4, reps=(0.6, 0.7)), run_(1.06)], kernel_b1=[0.43, 0.40])[0]
    v = p.verdict()
    assert isinstance(p, ex.Undecided) and v.startswith(ex.UNDECIDED), v
    assert "ロードアベレージ（os.getloadavg）は最大 2.6 で、使えるコア数（2）を超えて" in v
    assert "1.20〜1.90、0.60〜0.70、1.20〜1.90" in v
    assert "バッチ 1 の比 1.66 は、INT8 のカーネルで説明できる範囲を超えて" in v and "0.40〜0.43" in v
    quiet = ex.batch_predictions(run_(1.00, bB=1.02, load=0.8), [0.98, 1.01])[0].verdict()
    assert "使えるコア数（2）以下" in quiet and "説明できる範囲を超えて" not in quiet


DISTURBED = {"disturbed": True, "warning": "⚠ 計測のあいだ…", "during": {"other_cores": 1.4, "steal_cores": 0.0}}


def test_a_disturbed_run_decides_nothing_and_keeps_its_numbers():
    """A run whose LoadWatch says disturbed (course.labkit.load): every timed verdict of lab 6 and lesson §7 prints
    判定できません with the same measured numbers; a quiet load (or none) leaves them as they were."""
    from course.labkit.predictions import UNDECIDED
    from course.labs.lab06 import prefill_reading
    good = {2: run(0.78, 1.05), 8: run(0.77, 1.60), 32: run(0.79, 1.22)}
    quiet = {b: {**r, "load": {"disturbed": False, "warning": None}} for b, r in good.items()}
    crowded = {**quiet, 8: {**quiet[8], "load": DISTURBED}}                     # one of task 1's runs crowded
    before = [p.verdict() for p in ex.task1_predictions(quiet)]
    after = [p.verdict() for p in ex.task1_predictions(crowded)]
    assert [p.held for p in ex.task1_predictions(quiet)] == [True, True]
    assert all(a.startswith(UNDECIDED) and "ほかのプログラム" in a for a in after)
    assert [b.split("（", 1)[1].split("）")[0] for b in before] == [a.split("（", 1)[1].split("）")[0] for a in after]
    assert "1.60" in after[0] and "1.22" in after[1]
    res = {"batch": 32, "ratios": {"tpot_b1": 0.75, "tpot_bB": 1.18}}
    assert ex.batch_predictions(res, [0.76, 0.74])[0].verdict().startswith(HELD)
    line = ex.batch_predictions({**res, "load": DISTURBED}, [0.76, 0.74])[0].verdict()
    assert line.startswith(UNDECIDED) and "1.18" in line
    again = [{**res, "ratios": {"tpot_b1": 0.76, "tpot_bB": 1.0}, "load": DISTURBED}]      # a re-run crowded
    assert ex.batch_predictions(res, again)[0].verdict().startswith(UNDECIDED)
    pairs = {"batch": 32, "bB_repeat_ratios": [(0.9, 1.2), (1.0, 1.05)]}
    assert prefill_reading(pairs).startswith(HELD)
    text = prefill_reading({**pairs, "load": DISTURBED})
    assert text.startswith(UNDECIDED) and "1.08、1.05" in text


def test_task1_within_the_noise_is_undecided_not_missed():
    """Blind reading 2026-12-07d ch06 #2: batch 8's 0.87 against batch 1's median 0.82 +- 0.23 cannot be decided;
    only a ratio below median - margin is 予想と違う (the same rule as lesson §7's batch_predictions)."""
    runs = {2: run(0.61, 0.79), 8: run(0.82, 0.87), 32: run(0.84, 1.21)}
    first, last = ex.task1_predictions(runs)
    assert isinstance(first, ex.Undecided) and first.verdict().startswith(ex.UNDECIDED) and "0.87" in first.verdict()
    assert last.held and last.verdict().startswith(HELD)                  # 1.21 is beyond 0.9 + 0.23
    assert isinstance(ex.task1_predictions({**runs, 32: run(0.84, 1.0)})[1], ex.Undecided)     # 1.0 within 0.9 +- 0.23
    assert ex.task1_predictions({**runs, 8: run(0.82, 0.55)})[0].verdict().startswith(MISSED)  # below 0.82 - 0.23
