"""Chapter 10: lab 10's own sweep against the simulator's prediction, cost, datacenter frontiers, the cheapest
configuration under an SLO, history and the panel."""
import pytest

from course.labs import lab10
from course.panels import build as build_panel
from minimal_engine import calculators as calc
from minimal_engine.tools.sim_calibration import fit_machine, machine_spec, machine_table
from minimal_engine.calculators.simulator import simulate_batch

MODEL = lab10.DEFAULT_MODEL_DIR
PEAKS = {"flops_bf16": 200e9, "flops_fp32": 100e9, "bandwidth": 25e9}


@pytest.fixture(scope="module")
def res():
    return lab10.run_pareto_lab(prompt_len=16, output_len=8, max_concurrency=4, repeats=1,
                                usd_per_hour=0.5, watts=50)


def test_own_sweep_is_measured_predicted_and_priced(res):
    assert res["concurrencies"] == [1, 2, 4] and [t["concurrency"] for t in res["table"]] == [1, 2, 4]
    assert [t["split"] for t in res["table"]] == ["fit", "held-out", "fit"]
    for t, r in zip(res["table"], res["rows"]):
        assert t["tok_s"] == r["tok_s"] and t["pred_tok_s"] > 0 and t["pred_tpot_ms"] > 0
        assert r["usd_per_m_output_tokens"] == pytest.approx(calc.usd_per_million_tokens(0.5, r["tok_s"]))
        assert r["j_per_output_token"] == pytest.approx(calc.joules_per_token(0.05, r["tok_s"]))
    assert res["spec"]["flops_fp32"] == res["peaks"]["flops_fp32"] and res["dtype"] == "fp32"


def test_fitted_overheads_reproduce_the_fit_points():
    """Synthetic 'measurements' made by the simulator itself with known overheads: the fit finds them."""
    truth = {**machine_spec(PEAKS, memory_gb=8), "layer_overhead_us": 500.0, "seq_overhead_us": 50.0}
    rows = [simulate_batch(MODEL, truth, weight_dtype="fp32", kv_dtype="fp32", input_len=16, output_len=8,
                           concurrency=c) for c in (1, 2, 4, 8)]
    spec = fit_machine(machine_spec(PEAKS, memory_gb=8), MODEL, rows, 16, 8, "fp32", fit_on=(1, 8))
    assert spec["layer_overhead_us"] == pytest.approx(500, rel=0.05)
    assert spec["seq_overhead_us"] == pytest.approx(50, rel=0.1)
    table = machine_table(spec, MODEL, rows, 16, 8, "fp32", fit_on=(1, 8))
    assert [t["split"] for t in table] == ["fit", "held-out", "held-out", "fit"]
    assert all(abs(t["err_tpot_ms"]) < 0.05 for t in table)


def test_datacenter_frontiers_and_pareto_front():
    dc = lab10.datacenter_frontiers(concurrencies=(1, 8, 64))
    assert set(dc) == {c["label"] for c in lab10.DC_CONFIGS}
    for rows in dc.values():
        assert all(r["predicted"] and r["fits"] and "usd_per_m_total_tokens" in r for r in rows)
        assert len(lab10.pareto_front(rows)) == len(rows)        # a sweep: more tok/s/GPU for less tok/s/user
    pts = [{"interactivity": 10, "output_tok_s_per_gpu": 100}, {"interactivity": 5, "output_tok_s_per_gpu": 50},
           {"interactivity": 20, "output_tok_s_per_gpu": 20}]
    assert lab10.pareto_front(pts) == [pts[0], pts[2]]           # (5, 50) is beaten on both axes


def test_datacenter_curves_end_at_the_largest_concurrency_that_fits():
    """A doubling grid stops a curve at a power of two; the curve's last point is its capacity."""
    dc = lab10.datacenter_frontiers(configs=[lab10.DC_CONFIGS[1]], concurrencies=(1, 64, 128, 512))
    rows = next(iter(dc.values()))
    assert rows[-1]["concurrency"] == rows[-1]["max_concurrency"] > 128     # H200 FP8 1k/1k
    assert [r["concurrency"] for r in rows][:-1] == [1, 64, 128]
    assert len(lab10.pareto_front(rows)) == len(rows)
    small = lab10.datacenter_frontiers(configs=[lab10.DC_CONFIGS[1]], concurrencies=(1, 8))
    assert [r["concurrency"] for r in next(iter(small.values()))] == [1, 8]   # beyond the grid: no


def test_cheapest_configuration_meets_the_slo():
    best = lab10.cheapest_meeting_slo(2000, 50, gpus=("H100", "B200"), tps=(1, 2), concurrencies=(1, 16, 128))
    assert best and all(b["ttft_ms"] <= 2000 and b["tpot_ms"] <= 50 and b["fits"] for b in best)
    cost = [b["usd_per_m_output_tokens"] for b in best]
    assert cost == sorted(cost)
    assert all(b["weight_dtype"] in lab10.native_dtypes(b["gpu"]) for b in best)
    assert "fp4" not in lab10.native_dtypes("H100") and "fp4" in lab10.native_dtypes("B200")
    assert "予測" in lab10.cheapest_table_html(best)
    assert lab10.cheapest_meeting_slo(1, 1, gpus=("H100",), tps=(1,), concurrencies=(1,)) == []


def test_cheapest_rows_stop_at_the_slo_or_memory_not_at_the_grid():
    """Each row is the largest concurrency meeting the SLO to one request (C + 1 misses it or does not fit),
    whatever the grid: a coarse grid and a fine one give the same rows (blind reading ch10 2026-12-07b #2)."""
    from minimal_engine.calculators.simulator import simulate
    kw = dict(gpus=("MI355X",), tps=(1, 2))
    coarse, fine = (lab10.cheapest_meeting_slo(2000, 50, concurrencies=g, **kw) for g in ((1, 512), tuple(range(1, 2049, 64))))
    assert [(b["tp"], b["concurrency"]) for b in coarse] == [(b["tp"], b["concurrency"]) for b in fine]
    for b in coarse:
        if b["concurrency"] < b["max_concurrency"]:
            n = simulate("llama-3.3-70b", b["gpu"], num_gpus=b["num_gpus"], tp=b["tp"], weight_dtype=b["weight_dtype"],
                         kv_dtype=b["kv_dtype"], input_len=1024, output_len=1024, concurrency=b["concurrency"] + 1)
            assert n["tpot_ms"] > 50 or n["ttft_ms"] > 2000


def test_history_readout_and_plots(res):
    history = []
    lab10.add_run(history, res)
    assert [r["concurrency"] for r in history] == [1, 2, 4] and all(r["prompt_len"] == 16 for r in history)
    assert "16" in lab10.history_html(history) and "予測" in lab10.readout_html(res)
    assert lab10.history_csv(history).count("\n") == 4
    assert lab10.plot_run(res) is not None
    assert lab10.plot_frontiers(res, lab10.datacenter_frontiers(concurrencies=(1, 8))) is not None


def test_readout_never_prints_minus_zero_percent(res):
    """reviews11 ch10 #6: an error that rounds to zero prints "0%", not "-0%"."""
    import copy
    r = copy.deepcopy(res)
    r["table"][1]["err_tok_s"] = -0.004
    html = lab10.readout_html(r)
    assert "-0%" not in html and ">0%<" in html


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        lab10.run_pareto_lab(max_concurrency=0)
    with pytest.raises(ValueError):
        lab10.run_pareto_lab(prompt_len=10_000)


def test_panel_has_the_browser_contract():
    pytest.importorskip("ipywidgets")
    app = build_panel(10, prompt_len=8, output_len=4, max_concurrency=2, repeats=1)
    assert app.sliders["prompt_len"].description == "プロンプト長" and app.run_button.description == "実行"
    assert app.on_run() is not None
    assert [r["prompt_len"] for r in app.history] == [8, 8]


def test_cost_at_a_target_interactivity():
    rows = [{"interactivity": 10.0, "output_tok_s_per_gpu": 1000.0, "total_tok_s_per_gpu": 2000.0},
            {"interactivity": 40.0, "output_tok_s_per_gpu": 250.0, "total_tok_s_per_gpu": 500.0}]
    at = lab10.at_interactivity(rows, 20.0)                      # halfway on log axes: the geometric mean
    assert at["output_tok_s_per_gpu"] == pytest.approx(500.0) and at["total_tok_s_per_gpu"] == pytest.approx(1000.0)
    assert lab10.at_interactivity(rows, 100.0) is None
    dc = lab10.datacenter_frontiers(configs=[lab10.DC_CONFIGS[1]], input_len=8192, output_len=1024)
    (row,) = lab10.cost_at_interactivity(dc, 30.0)
    assert row["usd_per_m_output_tokens"] == pytest.approx(calc.usd_per_million_tokens(1.41, row["output_tok_s_per_gpu"]))
    assert row["usd_per_m_output_tokens"] == pytest.approx(9 * row["usd_per_m_total_tokens"], rel=1e-6)   # 8k/1k


def test_refitting_a_fitted_spec_gives_the_same_overheads():
    truth = {**machine_spec(PEAKS, memory_gb=8), "layer_overhead_us": 500.0, "seq_overhead_us": 50.0}
    rows = [simulate_batch(MODEL, truth, weight_dtype="fp32", kv_dtype="fp32", input_len=16, output_len=8,
                           concurrency=c) for c in (1, 4)]
    once = fit_machine(machine_spec(PEAKS, memory_gb=8), MODEL, rows, 16, 8, "fp32")
    twice = fit_machine(once, MODEL, rows, 16, 8, "fp32")
    assert twice["layer_overhead_us"] == pytest.approx(once["layer_overhead_us"])
    assert twice["seq_overhead_us"] == pytest.approx(once["seq_overhead_us"])


def test_a_point_inside_the_per_gpu_frontier_can_cost_less():
    """Lesson 10 section 4 (reviews11 ch10 #1): at 30 tok/s/user on 8k/1k, H100x2 TP2 FP8 gives fewer output
    tok/s/GPU than H200x1 FP8 yet costs less per output token (its $/GPU-hour is lower)."""
    dc = lab10.datacenter_frontiers(lab10.DC_CONFIGS[:2], input_len=8192, output_len=1024,
                                    concurrencies=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
    by = {r["label"]: r for r in lab10.cost_at_interactivity(dc, 30)}
    h100, h200 = by["H100×2 TP2 FP8"], by["H200×1 FP8"]
    assert h100["output_tok_s_per_gpu"] < h200["output_tok_s_per_gpu"]
    assert h100["usd_per_gpu_hour"] < h200["usd_per_gpu_hour"]
    assert h100["usd_per_m_output_tokens"] < h200["usd_per_m_output_tokens"]
