"""Chapter 2: roofline formulas (minimal_engine.bench.roofline, minimal_engine.calculators.roofline) and lab 2."""
from __future__ import annotations

import pytest

from course.panels import build as build_panel

from minimal_engine import calculators as calc
from minimal_engine.bench import roofline
from minimal_engine.config import ModelConfig

CFG = ModelConfig(variant="llama", vocab_size=1000, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=16, max_position_embeddings=256)
MACHINE = {"flops_fp32": 1e11, "flops_bf16": 2e11, "bandwidth": 2e10}


# ---------------------------------------------------------------- step_cost: weights, KV read, KV written
def test_step_cost_splits_kv_read_and_written():
    kv_tok = CFG.kv_bytes_per_token(2)
    c = roofline.step_cost(CFG, 2, decode_contexts=[10, 30])
    assert c["kv_read_bytes"] == 40 * kv_tok and c["kv_write_bytes"] == 2 * kv_tok
    assert c["kv_bytes"] == c["kv_read_bytes"] + c["kv_write_bytes"]
    assert c["bytes"] == c["weight_bytes"] + c["kv_bytes"]
    assert c["intensity"] == pytest.approx(c["flops"] / c["bytes"])


def test_decode_intensity_grows_with_batch_and_prefill_is_compute_bound():
    one = roofline.step_cost(CFG, 2, decode_contexts=[1], machine=MACHINE)
    many = roofline.step_cost(CFG, 2, decode_contexts=[1] * 32, machine=MACHINE)
    assert one["bound"] == "memory" and many["intensity"] > 10 * one["intensity"]
    prefill = roofline.step_cost(CFG, 2, prefill_lens=[200], machine=MACHINE)
    assert prefill["intensity"] > roofline.ridge_point(MACHINE) and prefill["bound"] == "compute"
    assert prefill["t_bound"] == prefill["t_compute"]


def test_gpu_machine_and_attainable():
    m = roofline.gpu_machine("A100")
    assert m["flops_bf16"] == 312e12 and m["bandwidth"] == pytest.approx(2.039e12)
    assert roofline.ridge_point(m) == pytest.approx(153.0, rel=1e-3)
    assert roofline.attainable_flops(1.0, m) == pytest.approx(2.039e12)
    assert roofline.attainable_flops(1000, m) == 312e12


# ---------------------------------------------------------------- calculators (quiz answers)
def test_ridge_points_of_named_gpus():
    assert calc.ridge_point("H100") == pytest.approx(989 / 3.35)
    assert calc.ridge_point("MI300X") == pytest.approx(1307 / 5.3)
    assert all(g.bf16_tflops and g.flops_source for g in calc.GPU_SPECS.values())


def test_intensities():
    assert calc.weight_intensity(1) == 1.0 and calc.weight_intensity(64) == 64.0
    assert calc.weight_intensity(8, "fp8") == 16.0
    assert calc.matmul_intensity(3000, 3000, 3000) == pytest.approx(1000.0)
    assert calc.arithmetic_intensity(100, 50) == 2.0
    with pytest.raises(ValueError):
        calc.arithmetic_intensity(1, 0)


def test_llama2_7b_on_a100_and_gpt_fast():
    assert calc.decode_tpot_bound_ms("Llama 2 7B", "A100") == pytest.approx(6_738_415_616 * 2 / 2.039e12 * 1000)
    share = calc.share_of_bound(104.9, 1000 / calc.decode_tpot_bound_ms("Llama 2 7B", "A100"))
    assert 0.68 < share < 0.70                      # "about 70% of the bound"


def test_kv_joins_weights_and_moe_reads_active_params():
    small = calc.decode_step_bytes("Llama 3.1 8B", batch=1, context=1000)
    big = calc.decode_step_bytes("Llama 3.1 8B", batch=64, context=8192)
    assert small["kv_bytes"] < 0.1 * small["weight_bytes"] and big["kv_bytes"] > big["weight_bytes"]
    assert calc.decode_step_bytes("DeepSeek R1")["weight_bytes"] == 37e9 * 2
    assert calc.active_params("Llama 3.1 8B") == 8.03e9
    assert calc.decode_tpot_bound_ms("Llama 3.1 8B", "H100", batch=512) > calc.decode_tpot_bound_ms(
        "Llama 3.1 8B", "H100", batch=1)


# ---------------------------------------------------------------- lab 2 (real engine steps, small)
def test_prefill_lens_split_to_fit():
    from course.labs import lab02
    assert lab02.prefill_lens(512, 510) == [256, 256]
    assert lab02.prefill_lens(100, 510) == [100]
    assert sum(lab02.prefill_lens(1023, 300)) == 1023
    assert lab02.prefill_lens(1024, 510) == [342, 341, 341]   # the docstring's example (blind reading ch02 second #10)


@pytest.fixture(scope="module")
def result():
    from course.labs import lab02
    return lab02.run_roofline("default", context=16, batches=[1, 4], chunks=[16, 64], repeats=2, threads=1,
                             machine=MACHINE, load_check=False)


def test_run_roofline_points(result):
    assert result["load"] is None                           # load_check=False: no LoadWatch
    pts = result["points"]
    assert [(p["kind"], p["size"]) for p in pts] == [("decode", 1), ("decode", 4), ("prefill", 16), ("prefill", 64)]
    for p in pts:
        assert p["measured_ms_min"] <= p["measured_ms"] <= p["measured_ms_max"]
        assert p["predicted_ms"] == pytest.approx(max(p["t_compute_ms"], p["t_memory_ms"]))
        assert p["achieved_flops"] == pytest.approx(p["flops"] / (p["measured_ms"] / 1000))
    assert pts[1]["intensity"] > pts[0]["intensity"] and pts[3]["intensity"] > pts[2]["intensity"]


def test_run_roofline_measures_the_step_without_its_linear_layers(result):
    """Blind reading ch02 (reviews6) #2: batch 1's excess is split from the run (course.labkit.excess)."""
    import torch
    from course.labkit import excess
    from course.labs import lab02_explain
    from course.runtime import get_llm
    x = result["excess"]
    assert 0 < x["fixed_ms"] and x["cores"] >= 1 and "load1" in x and x["linears_ms"] > 0
    assert "線形層だけを続けて呼んだ時間" in lab02_explain.facts_text(lab02_explain.facts(result))
    f = lab02_explain.facts(result)
    assert f["excess"]["predicted_ms"] == pytest.approx(result["points"][0]["predicted_ms"])
    assert lab02_explain.excess_reading(f).startswith(("内訳（", "内訳：示しません"))   # the latter: a disturbed breakdown
    assert 0 < x["with_ms"] and f["excess"]["with_ms"] == x["with_ms"]
    p64 = result["points"][3]                               # the longest prefill carries the kernel timed beside it
    assert p64["kernel_flops"] > 0 and "kernel_flops" not in result["points"][2]
    assert f["prefill_kernel"]["best_ms"] == p64["measured_ms_min"]
    assert lab02_explain.prefill_reading(f).startswith("Prefill の内訳：")
    model = get_llm("default").model                       # the stand-ins are undone: the layers compute again
    lin = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    x1 = torch.ones(1, lin.in_features, dtype=lin.weight.dtype)
    with excess.without_linear_layers(model):
        assert not lin(x1).any()
    assert "forward" not in vars(lin) and lin(x1).any()


def test_predict_on_gpu_and_readouts(result):
    from course.labs import lab02
    pred = lab02.predict_on_gpu(result, "H100")
    assert len(pred) == 4 and all(p["predicted_ms"] > 0 for p in pred)
    assert pred[0]["bound"] == "memory"
    html = lab02.readout_html(result, "H100")
    assert "H100 予測" in html and "実測" in html
    rows = lab02.history_rows(result, 1)
    assert "16" in lab02.history_html(rows) and len(rows) == 4
    from course.labs import lab02_plots
    assert lab02_plots.plot_roofline(result, "H100") is not None


def test_panel_run_adds_history_with_context(monkeypatch):
    from course.labs import lab02
    app = build_panel(2, context=24, batches=[1], chunks=[16], repeats=1)
    assert "<" not in app._repr_mimebundle_()["text/plain"][:1]
    monkeypatch.setattr(lab02, "machine_peaks", lambda *a, **k: {**MACHINE, "threads": 1})
    app.on_run()
    assert app.last_result is not None and app.history[0]["context"] == 24
    assert ">24<" in app.kit.history_view.value
    assert "lab-readout" in app.kit.readout._dom_classes and "lab-history" in app.kit.history_view._dom_classes
    app.gpu.value = "B200"
    assert "B200 予測" in app.kit.readout.value


def test_threads_sweep_restores_policy():
    import torch

    from course.labs import lab02
    before = torch.get_num_threads()
    rows = lab02.threads_sweep([1], quick=True)
    assert rows[0]["threads"] == 1 and rows[0]["flops_fp32"] > 0 and rows[0]["bandwidth"] > 0
    # review 2026-12-07 ch02 #1: the peak is the faster of a plain matmul and the engine's Linear kernel
    for dtype in ("fp32", "bf16"):
        assert rows[0][f"flops_{dtype}"] == max(rows[0][f"mm_{dtype}"], rows[0][f"linear_{dtype}"]) > 0
    assert torch.get_num_threads() == before
    assert rows[0]["load"]["during"] is not None and "disturbed" in rows[0]["load"]   # LoadWatch over the sweep
    assert lab02.threads_sweep([1], quick=True, load_check=False)[0]["load"] is None


# ---------------------------------------------------------------- quiz: the roofline figure kind and the bank
def test_roofline_figure_kind():
    from course.quiz import figures as qf
    fig = qf.validate_figure({"kind": "roofline", "data": {"peak_tflops": 100, "bandwidth_tb_s": 1,
                                                            "labels": ["a", "b", "c"], "intensity": [1, 100, 400]}}, "q")
    assert qf.figure_answer({"func": "compute_bound_points"}, fig) == [2, 3]
    assert qf.figure_answer({"func": "roofline_ridge_point"}, fig) == 100
    assert "帯域律速" in qf.choice_fact(fig, 1) and "演算律速" in qf.choice_fact(fig, 3)
    assert qf.render_png(fig)[:4] == b"\x89PNG"
    with pytest.raises(ValueError):
        qf.validate_figure({"kind": "roofline", "data": {"peak_tflops": 1, "labels": ["a"], "intensity": [1]}}, "q")


def test_chapter2_bank_answers_come_from_calculators():
    from course.quiz.bank import load_bank
    from course.quiz.check import check_answer
    qs = {q.id: q for q in load_bank("02_hardware_roofline")}
    assert qs["ridge_a100"].answer == pytest.approx(calc.ridge_point("A100"))
    assert qs["llama2_7b_a100_bound"].answer == pytest.approx(1000 / calc.decode_tpot_bound_ms("Llama 2 7B", "A100"))
    assert [c.value for c in qs["roofline_figure_bound"].choices if c.correct] == [3, 5]
    assert check_answer(qs["decode_intensity_batch"], "8 FLOP/バイト")[0] is True


def test_size_lists_say_which_list_is_wrong():
    from course.labs import lab02
    assert lab02.check_sizes("16, 128、512", 1, 1024, "Prefill のトークン数") == [16, 128, 512]
    with pytest.raises(ValueError, match="Prefill のトークン数の一覧"):
        lab02.check_sizes("16, 4096", 1, 1024, "Prefill のトークン数")


# ---------------------------------------------------------------- the FLOP/s peak includes the engine's kernel
def test_peak_includes_the_engine_kernel_on_the_model_layer_shapes():
    """Review 2026-12-07 ch02 #1: a roof timed with a slower kernel than the engine's is beaten by the engine."""
    import torch

    from course.labs import lab02
    assert lab02.layer_shapes(CFG) == [(64, 128), (64, 64), (64, 256), (128, 64)]
    slow = {**MACHINE, "flops_fp32": 1.0, "mm_fp32": 1.0, "linear_fp32": 1.0}
    m = lab02.with_model_peak(slow, CFG, torch.float32, rows=32)
    assert m["flops_fp32"] == m["linear_model_fp32"] > 1.0 and slow["flops_fp32"] == 1.0
    fast = {**slow, "flops_fp32": 1e18}
    assert lab02.with_model_peak(fast, CFG, torch.float32, rows=32)["flops_fp32"] == 1e18
    text = lab02.peak_text(m)
    assert "a @ b" in text and "このモデルの線形層の形" in text and f"{m['flops_fp32'] / 1e9:.0f} GFLOP/s を屋根" in text
