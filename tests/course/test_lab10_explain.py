"""Lab 10's printed explanations follow the run's numbers (planted here), and the default model's
H100 curve shows what the fitted serving constant, not the GPU, decides."""
import pytest

from course.labs import lab10_explain as ex
from course.labs import lab10_serving as sv
from minimal_engine.calculators.simulator import DEFAULT_CONSTANTS
from minimal_engine.tools.sim_calibration import machine_spec


def _row(c, split, ttft, pred_ttft, tpot, pred_tpot, tok_s, pred_tok_s):
    return {"concurrency": c, "split": split, "ttft_ms": ttft, "pred_ttft_ms": pred_ttft,
            "tpot_ms": tpot, "pred_tpot_ms": pred_tpot, "tok_s": tok_s, "pred_tok_s": pred_tok_s,
            "err_ttft_ms": pred_ttft / ttft - 1, "err_tpot_ms": pred_tpot / tpot - 1,
            "err_tok_s": pred_tok_s / tok_s - 1}


@pytest.fixture
def res():
    peaks = {"flops_bf16": 200e9, "flops_fp32": 100e9, "bandwidth": 25e9}
    spec = {**machine_spec(peaks, memory_gb=8), "layer_overhead_us": 400.0, "seq_overhead_us": 20.0,
            "compute_eff": 1.4}
    table = [_row(1, "fit", 10, 15, 3.0, 3.0, 300, 310),
             _row(2, "held-out", 14, 21, 3.5, 3.15, 440, 400),
             _row(4, "held-out", 23, 30, 4.0, 4.4, 800, 880),
             _row(8, "fit", 47, 94, 5.0, 5.0, 1200, 1100)]
    rows = [{"concurrency": t["concurrency"], "tok_s": t["tok_s"], "total_tok_s": 3 * t["tok_s"],
             "tok_s_per_user": 1000 / t["tpot_ms"], "tpot_ms": t["tpot_ms"], "ttft_ms": t["ttft_ms"]} for t in table]
    return {"spec": spec, "peaks": {"bandwidth": 25e9}, "table": table, "rows": rows,
            "prompt_len": 64, "output_len": 32, "concurrencies": [1, 2, 4, 8]}


def test_prediction_lines_quote_the_run(res):
    held, ttft, tpot = ex.prediction_lines(res)
    assert "同時 2・4" in held and "TPOT の誤差は -10%〜+10%" in held and "-9%〜+10%" in held
    assert "同時 1 で 1.50 倍" in ttft and "同時 8 で 2.00 倍" in ttft and "compute_eff = 1.40" in ttft
    res["table"][3]["pred_ttft_ms"] = 47.0          # a planted exact fit changes the sentence
    assert "同時 8 で 1.00 倍" in ex.prediction_lines(res)[1]
    one = dict(res, table=[res["table"][0], res["table"][1], res["table"][3]])
    assert "TPOT の誤差は -10%、" in ex.prediction_lines(one)[0]   # one held-out point: no range
    assert "同時 1 で 0%" in ex.prediction_lines(res)[2]              # not "-0%" nor "+0%"


def test_constants_rows_name_value_provenance_and_meaning(res):
    rows = {r["定数"]: r for r in ex.constants_rows(res)}
    assert rows["layer_overhead_us"]["値"] == "400 µs" and "右端" in rows["layer_overhead_us"]["意味"]
    assert rows["seq_overhead_us"]["値"] == "20.0 µs" and rows["compute_eff"]["値"] == "1.40"
    assert rows["request_overhead_ms"]["決め方"] == "設定" and rows["演算性能"]["決め方"] == "測定"


def test_cost_line_uses_the_given_prices(res):
    line = ex.cost_line(res, 0.10, 65.0)
    usd1 = 0.10 / (300 * 3600 / 1e6)
    assert f"${usd1:.3f}" in line and "同時 1 → 8" in line and "tok/s/user は 333 → 200" in line


def test_serving_constant_not_the_gpu_shapes_the_default_model_curve(res):
    gpu = sv.default_model_on_gpu(res)
    b, s = gpu["batch"], gpu["served"]
    assert b[0]["output_tok_s_per_gpu"] == pytest.approx(s[0]["output_tok_s_per_gpu"], rel=0.05)
    for bb, ss in zip(b[1:], s[1:]):
        c = ss["concurrency"]
        assert ss["ttft_ms"] >= DEFAULT_CONSTANTS.request_overhead_ms * (1 - 1 / c)   # all of it
        assert ss["ttft_ms"] > 50 * bb["ttft_ms"]
        assert ss["output_tok_s_per_gpu"] < bb["output_tok_s_per_gpu"] / 5
    assert len(sv.serving_overhead_lines(gpu)) == 4


def test_ttft_overhead_share_follows_the_fitted_overheads(res):
    share = ex.ttft_overhead_share(res)
    assert 0 < share["share"] < 1 and share["overhead_ms"] == pytest.approx(
        share["share"] * share["ttft_ms"])
    res["spec"] = {**res["spec"], "layer_overhead_us": 0.0, "seq_overhead_us": 0.0}
    # no overhead, no share
    assert ex.ttft_overhead_share(res)["share"] == pytest.approx(0, abs=1e-9)


def test_serving_constant_lines_show_the_formula_not_the_gpu(res):
    gpu = sv.default_model_on_gpu(res)
    lines = sv.serving_constant_lines(gpu)
    r = DEFAULT_CONSTANTS.request_overhead_ms
    assert "= " + f"{0:5.1f}" + " ms" in lines[0]                    # C = 1: nothing
    assert f"= {r / 2:5.1f} ms" in lines[1]                          # C = 2: half of it
    assert ex.constants_rows(res)[3]["意味"].startswith("ルーフラインで説明できない")


# ---------------------------------------------------------------- blind reading 2026-12-07 (issue 39)
def test_right_end_overhead_is_mostly_layer_overhead_with_one_requests_seq_overhead(res):
    """The batch-1 fixed time is layers x (layer + seq x 1): the right end is not layer_overhead_us alone."""
    o = ex.right_end_overhead(res)
    layers = o["layers"]
    assert o["total_ms"] == pytest.approx(layers * (400 + 20 * 1) / 1e3)
    assert o["seq_share"] == pytest.approx(20 / 420) and "[右端の固定の時間]" in o["line"]
    res["spec"] = {**res["spec"], "seq_overhead_us": 0.0}            # planted: no per-request time
    assert ex.right_end_overhead(res)["seq_share"] == 0


def _synthetic_run(tpot_scale_at_largest=1.0):
    """'Measurements' made by the simulator with known linear overheads; the largest concurrency's TPOT
    can be scaled to plant a run whose straight line does not extend past the fitted range."""
    from minimal_engine.calculators.simulator import simulate_batch
    from minimal_engine.tools.sim_calibration import fit_machine_all, machine_table
    peaks = {"flops_bf16": 200e9, "flops_fp32": 100e9, "bandwidth": 25e9}
    base = machine_spec(peaks, memory_gb=8)
    truth = {**base, "layer_overhead_us": 500.0, "seq_overhead_us": 50.0}
    cs = [1, 2, 4, 8]
    rows = [simulate_batch(ex.DEFAULT_MODEL_DIR, truth, weight_dtype="fp32", kv_dtype="fp32", input_len=16,
                           output_len=8, concurrency=c) for c in cs]
    rows[-1] = {**rows[-1], "tpot_ms": rows[-1]["tpot_ms"] * tpot_scale_at_largest,
                "tok_s": rows[-1]["tok_s"] / tpot_scale_at_largest}
    spec = fit_machine_all(base, ex.DEFAULT_MODEL_DIR, rows, 16, 8, "fp32")
    return {"spec": spec, "rows": rows, "concurrencies": cs, "prompt_len": 16, "output_len": 8, "dtype": "fp32",
            "table": machine_table(spec, ex.DEFAULT_MODEL_DIR, rows, 16, 8, "fp32")}


def test_extrapolation_refits_without_the_largest_concurrency_and_predicts_it():
    run = _synthetic_run()
    ext = ex.extrapolation(run)
    assert ext["fit_on"] == (1, 4) and ext["row"]["concurrency"] == 8
    assert abs(ext["row"]["err_tpot_ms"]) < 0.05                       # a straight line extends
    assert "それ以下です" in ex.extrapolation_lines(run, ext)[-1]
    bent = _synthetic_run(tpot_scale_at_largest=1.5)                   # planted: c=8 is 1.5x slower
    ext = ex.extrapolation(bent)
    assert ext["row"]["err_tpot_ms"] == pytest.approx(1 / 1.5 - 1, abs=0.05)
    lines = ex.extrapolation_lines(bent, ext)
    assert "外挿" in lines[0] and "より大きいです" in lines[-1] and "キャッシュ" in lines[-1]
    assert "少なすぎる向き" in lines[-1] and "コアを取り合" not in lines[-1]     # no threads recorded: one
    assert ex.extrapolation({**run, "concurrencies": [1, 2]}) is None


def _ext(err=0.14, held=0.08, end_err=-0.08, threads=1, eff=0.30, eff_refit=0.30, end_width=0.05, last_width=0.05):
    return {"err": err, "held": held, "end": 8, "end_err": end_err, "threads": threads, "eff": eff,
            "eff_refit": eff_refit, "end_width": end_width, "last": 16, "last_width": last_width}


def test_extrapolation_verdict_is_undecided_when_the_repeats_spread_is_wider_than_the_error():
    """The blind reading's second run (2026-12-07b ch10 second #3): +83% from a refit whose upper end (c=8,
    -34% off the full fit) spread 30.6-73.1 ms over its repeats: not a slowing growth, not a kernel effect."""
    wide = ex.extrapolation_verdict(_ext(err=0.83, held=0.34, end_err=-0.34, end_width=0.85))
    assert "判定できません" in wide and "中央値の 85%" in wide and "カーネル" not in wide and "緩やか" not in wide
    last = ex.extrapolation_verdict(_ext(err=-0.14, end_err=0.0, last_width=0.20))
    assert "判定できません" in last and "同時 16 の TPOT の繰り返しの幅（中央値の 20%）" in last
    assert "判定できません" not in ex.extrapolation_verdict(_ext(err=0.83, held=0.34, end_err=-0.34, end_width=0.2))


def test_extrapolation_verdict_follows_the_sign_and_threads():
    over = ex.extrapolation_verdict(_ext())                       # the blind reader's run: +14%, c=8 at -8%
    assert "多すぎる向き" in over and "同時 8 は" in over and "キャッシュ" not in over and "コア" not in over
    assert "compute_eff（" not in over
    assert "compute_eff（0.20" in ex.extrapolation_verdict(_ext(eff_refit=0.20))
    assert "同時 8 は" not in ex.extrapolation_verdict(_ext(end_err=0.0))
    under = ex.extrapolation_verdict(_ext(err=-0.14))             # planted: the growth steepened
    assert "少なすぎる向き" in under and "キャッシュ" in under and "コアを取り合" not in under
    assert "コアを取り合" in ex.extrapolation_verdict(_ext(err=-0.14, threads=2))
    assert "それ以下です" in ex.extrapolation_verdict(_ext(err=0.09))
    assert "そのまま当てはまっています" in ex.extrapolation_verdict(_ext(err=0.09))
    small = ex.extrapolation_verdict(_ext(err=0.08, held=0.10, end_width=0.13))   # the blind reading's run: c=8 13%
    assert "揺れの範囲では外れは見えない" in small and "同時 8 で中央値の 13%" in small and "当てはまっています" not in small


def test_saved_extrapolation_verdict_follows_the_saved_numbers():
    """The saved [外挿の見立て] is the one extrapolation_verdict gives for the printed [外挿の材料]."""
    import json
    import re
    from pathlib import Path
    nb = json.loads((Path(__file__).resolve().parents[2] / "labs/10_pareto_tco_lab.ipynb").read_text("utf-8"))
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                   for o in c.get("outputs", []))
    m = re.search(r"\[外挿の材料\] 外挿の TPOT の誤差 ([+-]?\d+)%、内挿のいちばん大きい誤差（絶対値）(\d+)%、"
                  r"全体の当てはめでの同時 (\d+) の TPOT の誤差 ([+-]?\d+)%、compute_eff は全体 ([\d.]+)・"
                  r"当てはめ直し ([\d.]+)、スレッド数 (\d+)、TPOT の繰り返しの幅（中央値に対する最大 − 最小）"
                  r"同時 \d+ で (\d+)%・同時 (\d+) で (\d+)%", text)
    verdict = re.search(r"\[外挿の見立て\][^\n]*", text)
    if verdict and "判定できません：計測のあいだに" in verdict[0]:    # a crowded run decides nothing (LoadWatch)
        return
    if "[外挿の材料]" in text and "繰り返しの幅（中央値に対する" not in text:
        pytest.fail("lab 10 saved before [外挿の材料] printed the repeats' spread: re-execute the lab")
    assert m and verdict, "the lab's saved outputs lack the extrapolation facts and verdict"
    f = {"err": int(m[1]) / 100, "held": int(m[2]) / 100, "end": int(m[3]), "end_err": int(m[4]) / 100,
         "eff": float(m[5]), "eff_refit": float(m[6]), "threads": int(m[7]), "end_width": int(m[8]) / 100,
         "last": int(m[9]), "last_width": int(m[10]) / 100}
    assert ex.extrapolation_verdict(f) == verdict[0]


def _split(roof, seq, c_compute, a=1, b=16, share=None, near=()):
    return {"from": a, "to": b, "pred_ms": roof + seq, "measured_ms": roof + seq, "roof_ms": roof,
            "seq_ms": seq, "roof_share": roof / (roof + seq) if share is None else share, "near": list(near),
            "gflops": 34.0, "compute_eff": 0.6, "gbs": 10.1, "ridge": 2.0,
            "per_request": 0.5, "c_compute": c_compute, "dtype": "fp32"}


def test_slope_verdict_follows_planted_numbers():
    roof = ex.slope_verdict(_split(14.0, 6.0, 4.0))              # 70% roofline, compute-bound from c=4
    assert "大きい方はルーフラインの項でした" in roof and "compute_eff" in roof and "演算で決まります" not in roof
    assert "測定ではありません" in roof                           # a model attribution, not a measurement
    seq = ex.slope_verdict(_split(2.0, 10.5, 4.0))               # planted: seq_overhead_us dominates
    assert "大きい方は seq_overhead_us の項でした" in seq and "演算で決まる範囲もありますが" in seq
    assert "ほぼ帯域で決まり" in ex.slope_verdict(_split(2.0, 10.5, 40.0))
    kv = ex.slope_verdict(_split(14.0, 6.0, 40.0))               # roofline grew without compute: KV reads
    assert "KV を読む時間" in kv


def test_slope_verdict_is_undecided_for_a_near_tie_or_a_flip_within_one_fit_step():
    """The blind reading's run: 51% roofline, 47% one fit step of compute_eff away: not a finding."""
    tie = ex.slope_verdict(_split(2.3, 2.1, 6.5, share=0.51, near=[(0.75, 0.58), (0.85, 0.47)]))
    assert "判定できません" in tie and "ルーフラインの項でした" not in tie and "0.85 で 47%" in tie
    assert "判定できません" in ex.slope_verdict(_split(6.0, 4.0, 6.5, share=0.60))          # on the band's edge
    flip = ex.slope_verdict(_split(6.5, 3.5, 6.5, share=0.65, near=[(0.75, 0.72), (0.85, 0.45)]))
    assert "判定できません" in flip                                                       # one step flips it
    kept = ex.slope_verdict(_split(6.5, 3.5, 6.5, share=0.65, near=[(0.75, 0.72), (0.85, 0.62)]))
    assert "大きい方はルーフラインの項でした" in kept


def test_slope_verdict_is_undecided_when_one_fit_step_lands_in_the_band():
    """The blind reading's second run (2026-12-07b ch10 second #4): 61% roofline, but compute_eff one fit step
    up gives 57%, inside 50 ± 10: the fitted share's side is not a finding."""
    edge = ex.slope_verdict(_split(11.4, 7.2, 1.8, share=0.61, near=[(0.75, 0.66), (0.85, 0.57)]))
    assert "判定できません" in edge and "ルーフラインの項でした" not in edge and "0.85 で 57%" in edge
    low = ex.slope_verdict(_split(11.4, 7.2, 1.8, share=0.39, near=[(0.75, 0.34), (0.85, 0.43)]))
    assert "判定できません" in low and "seq_overhead_us の項でした" not in low


def test_tpot_slope_split_adds_up_and_follows_the_overheads(res):
    sp = ex.tpot_slope_split(res)
    layers = ex.get_sim_model(ex.DEFAULT_MODEL_DIR).shape.layers
    assert sp["roof_ms"] + sp["seq_ms"] == pytest.approx(sp["pred_ms"])
    assert sp["seq_ms"] == pytest.approx(layers * 20.0 * (8 - 1) / 1e3, rel=1e-6)
    assert sp["measured_ms"] == pytest.approx(2.0) and sp["ridge"] == pytest.approx(100e9 * 1.4 / 25e9)
    res["spec"] = {**res["spec"], "seq_overhead_us": 0.0}       # no per-request time: the roofline is all
    sp0 = ex.tpot_slope_split(res)
    assert sp0["seq_ms"] == pytest.approx(0, abs=1e-9) and sp0["roof_share"] == pytest.approx(1.0)
    assert [e for e, _ in sp["near"]] == pytest.approx([1.35, 1.45])     # one fit step either side, refitted
    assert all(0 <= x <= 1.0 + 1e-9 for _, x in sp["near"])


def test_saved_slope_verdict_follows_the_saved_numbers():
    """The verdict printed in the saved lab is the one slope_verdict gives for the numbers printed above it."""
    import json
    import re
    from pathlib import Path
    nb = json.loads((Path(__file__).resolve().parents[2] / "labs/10_pareto_tco_lab.ipynb").read_text("utf-8"))
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                   for o in c.get("outputs", []))
    m = re.search(r"\[TPOT の伸びの内訳\] 同時 (\d+) → (\d+) .*?ルーフラインの項 ([+-][\d.]+) ms（(\d+)%）.*?"
                  r"seq_overhead_us の項 ([+-][\d.]+) ms[^\n]*", text)
    c = re.search(r"同時 約 ([\d.]+) から上は演算で決まります", text)
    verdict = re.search(r"\[傾きを決めたもの\][^\n]*", text)
    if verdict and "判定できません：計測のあいだに" in verdict[0]:    # a crowded run decides nothing (LoadWatch)
        return
    assert m and c and verdict, "the lab's saved outputs lack the TPOT slope split"
    if "繰り返しの幅（中央値に対する" not in text:           # saved with the same cell run as [外挿の材料]
        pytest.fail("lab 10 saved before slope_verdict applied the 50 ± 10 band to one fit step's shares: re-execute the lab")
    near = [(float(e), int(x) / 100) for e, x in re.findall(r"([\d.]+) で (\d+)%", m[0].split("当てはめ直すと")[-1])]
    assert len(near) == 2, m[0]
    sp = _split(float(m[3]), float(m[5]), float(c[1]), int(m[1]), int(m[2]), share=int(m[4]) / 100, near=near)
    assert ex.slope_verdict(sp) == verdict[0]


def _order_res(repeats, rows):
    return {"repeats": repeats, "rows": [{"concurrency": c, "tpot_ms": m, "tpot_ms_min": lo, "tpot_ms_max": hi}
                                         for c, m, lo, hi in rows]}


def test_tpot_order_lines_flag_an_inversion_against_the_repeats_ranges():
    """The saved run's c=4 TPOT (6.3 ms) below c=1 and c=2 (blind reading ch10 2026-12-07b #6)."""
    inside = ex.tpot_order_lines(_order_res(3, [(1, 6.7, 6.5, 7.4), (2, 7.0, 6.6, 7.2), (4, 6.3, 6.2, 6.9)]))
    assert len(inside) == 1 and "同時 4 の TPOT 6.30 ms" in inside[0] and "同時 2 の 7.00 ms" in inside[0]
    assert "0.70 ms 短い" in inside[0] and "内挿の誤差" not in inside[0]       # reviews8 ch10 #1/#4: no claim about the error
    assert "区別できません" in inside[0]
    beyond = ex.tpot_order_lines(_order_res(3, [(1, 6.7, 6.6, 6.8), (2, 7.0, 6.9, 7.1), (4, 6.3, 6.2, 6.4)]))
    assert "繰り返しの幅を超える差" in beyond[0]
    assert "2 行の行列積が 4 行より遅い経路" in beyond[0] and "decode_groups.py" in beyond[0]   # reviews10 ch10 #2: absolute time, two candidates
    assert "判定できません" in ex.tpot_order_lines(_order_res(1, [(1, 6.7, 6.7, 6.7), (2, 6.0, 6.0, 6.0)]))[0]
    assert "伸びました" in ex.tpot_order_lines(_order_res(3, [(1, 6.7, 6.6, 6.8), (2, 7.0, 6.9, 7.1)]))[0]


def test_a_disturbed_run_prints_lab10_readings_as_undecided(res):
    """A load dict saying ``disturbed`` (LoadWatch) turns lab 10's measured readings into 判定できません: the TPOT
    order, the extrapolation and the slope verdict; the numbers before them are still printed."""
    from course.labkit.predictions import UNDECIDED
    res["repeats"] = 3
    for r in res["rows"]:
        r["tpot_ms_min"], r["tpot_ms_max"] = r["tpot_ms"] * 0.99, r["tpot_ms"] * 1.01
    res["rows"][2]["tpot_ms"], res["rows"][2]["tpot_ms_min"], res["rows"][2]["tpot_ms_max"] = 3.0, 2.99, 3.01
    quiet = ex.tpot_order_lines(res)
    assert "繰り返しの幅を超える差です" in quiet[0]
    ext = ex.extrapolation(res)
    calm = ex.extrapolation_lines(res, ext)
    res["load"] = {"disturbed": True}
    (order,) = ex.tpot_order_lines(res)
    assert order.startswith(quiet[0][:40]) and f"{UNDECIDED}：" in order and "繰り返しの幅を超える" not in order
    crowded = ex.extrapolation_lines(res, ext)
    assert crowded[:-1] == calm[:-1] and crowded[-1].startswith(f"[外挿の見立て] {UNDECIDED}：")
    sp = ex.tpot_slope_split(res)
    assert f"{UNDECIDED}：" in ex.slope_verdict(sp) and ex.slope_lines(sp)[0] == ex.slope_lines({**sp, "disturbed": False})[0]
