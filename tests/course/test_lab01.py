"""Lab 1 (course/labs/lab01.py): experiments, validation, plots and the widget's callbacks, on a tiny model."""
import io
import warnings

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from course import runtime  # noqa: E402
from course.labs import lab01
from course.panels import build as build_panel
from minimal_engine.llm import DEFAULT_MODEL  # noqa: E402


@pytest.fixture(scope="module")
def model(llama_dir):
    return str(llama_dir)


def draw_strict(fig):
    """Render to PNG with every warning (a missing Japanese glyph, for one) turned into an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig.savefig(io.BytesIO(), format="png")


def test_timeline_records_prefill_then_one_tick_per_token(model):
    seen = []
    res = lab01.run_timeline(model, prompt_len=20, output_len=6, concurrency=3, device="cpu",
                            progress=lambda d, t: seen.append((d, t)))
    assert (res["prompt_len"], res["output_len"], res["concurrency"]) == (20, 6, 3)
    assert len(res["requests"]) == 3
    for r in res["requests"]:
        assert len(r["token_times_ms"]) == 6
        assert 0 <= r["prefill_start_ms"] < r["first_token_ms"] == r["token_times_ms"][0]
        assert r["token_times_ms"] == sorted(r["token_times_ms"])
        assert r["ttft_ms"] == pytest.approx(r["first_token_ms"])
        assert r["tpot_ms"] == pytest.approx((r["token_times_ms"][-1] - r["first_token_ms"]) / 5)
    s = res["summary"]
    assert s["total_output_tokens"] == 18 and s["total_input_tokens"] == 60
    assert res["tok_s"] == pytest.approx(18 / res["duration_s"])
    assert res["tok_s_per_user"] == pytest.approx(1000 / res["tpot_ms"])
    assert res["ttft_ms"] == pytest.approx(s["median_ttft_ms"])
    assert sum(st["tokens_out"] for st in res["steps"]) == 18
    assert sum(st["first_tokens"] for st in res["steps"]) == 3
    assert seen[-1] == (18, 18) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert "TTFT" in lab01.format_readout(res) and "tok/s/user" in lab01.readout_html(res)
    assert res["total_tok_s"] == pytest.approx((60 + 18) / res["duration_s"])
    assert res["max_itl_ms"] >= res["p99_itl_ms"] >= res["itl_ms"] > 0
    assert isinstance(res["warnings"], list) and res["threads"] >= 1
    assert isinstance(res["load"]["disturbed"], bool) and "during" in res["load"]    # LoadWatch over the run
    assert lab01.run_timeline(model, 16, 4, 2, load_check=False)["load"] is None


def test_timeline_keeps_the_keys_the_lesson_reads(model):
    res = lab01.run_timeline(model, 16, 4, 2, "cpu", 0, None)
    for key in ("ttft_ms", "tpot_ms", "tok_s", "total_tok_s", "tok_s_per_user", "requests", "steps", "summary",
                "duration_s", "num_preemptions"):
        assert key in res


def test_late_long_prompt_is_marked_on_the_timeline(model):
    res = lab01.run_timeline(model, prompt_len=16, output_len=9, concurrency=3, arrivals="late_long",
                            late_prompt_len=150, load_check=False)
    assert len(res["requests"]) == 4 and res["requests"][-1]["late"] and res["late_prompt_len"] == 150
    res = dict(res, itl_ms=res["max_itl_ms"] / 4)          # force the spike band (3x the median)
    fig = lab01.plot_timeline(res)
    ax = fig.axes[0]
    assert ax.get_yticklabels()[-1].get_text() == "#3 長"
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(t.startswith("いちばん長いトークン間隔") for t in labels) and "到着" in labels
    assert "遅れて届いた長いプロンプトのPrefill（プロンプト処理）" in labels
    draw_strict(fig)
    with pytest.raises(ValueError, match="late_prompt_len"):
        lab01.run_timeline(model, 16, 4, 2, arrivals="late_long", late_prompt_len=0)


def test_measure_lab_repeats_and_readout(model):
    m = lab01.measure_lab(model, 12, 4, 2, repeats=2, arrivals="poisson", rate=500.0)
    assert len(m["runs"]) == 2 and m["arrivals"] == "poisson" and m["rate"] == 500.0
    text = lab01.format_readout(m)
    assert "繰り返し 2 回の中央値（最小〜最大）" in text and f"（{m['tpot_ms_min']:.1f}〜{m['tpot_ms_max']:.1f}）" in text
    tl = lab01.timeline_of(m)
    assert tl["requests"] is m["runs"][-1]["requests"] and tl["prompt_len"] == 12
    s = lab01.sweep_lab(model, 12, 4, "1, 2", repeats=2)
    assert [r["concurrency"] for r in s["rows"]] == [1, 2] and "〜" in lab01.sweep_html(s["rows"])


def test_quick_mode_shrinks_the_repeats(monkeypatch):
    monkeypatch.setenv("COURSE_QUICK", "1")
    assert lab01.default_repeats() == 1
    monkeypatch.setenv("COURSE_QUICK", "0")
    assert lab01.default_repeats() == 3


def test_prompts_are_random_distinct_and_of_the_asked_length(model):
    llm = lab01.get_llm(model, "cpu")
    prompts = lab01.random_prompts(llm, 50, 4, seed=1)
    assert [len(p) for p in prompts] == [50] * 4
    assert len({tuple(p) for p in prompts}) == 4
    assert prompts == lab01.random_prompts(llm, 50, 4, seed=1)
    assert llm.tokenizer.eos_token_id not in {t for p in prompts for t in p}


def test_llm_cache_reuses_loaded_models(model):
    assert lab01.get_llm(model, "cpu") is lab01.get_llm(model, "cpu")


def test_sweep_rows_and_progress(model):
    seen = []
    rows = lab01.run_concurrency_sweep(model, prompt_len=16, output_len=4, concurrencies=[4, 1, 2],
                                      device="cpu", progress=lambda d, t: seen.append((d, t)))
    assert [r["concurrency"] for r in rows] == [1, 2, 4]
    assert all(set(r) == set(lab01.SWEEP_FIELDS) for r in rows)
    assert all(r["tok_s"] > 0 and r["tok_s_per_user"] > 0 for r in rows)
    assert seen[-1] == (28, 28)
    assert "tok/s/user" in lab01.format_sweep(rows) and "<table" in lab01.sweep_html(rows) and "padding" in lab01.sweep_html(rows)


def test_quick_mode_shrinks_the_sweep(monkeypatch):
    monkeypatch.setenv("COURSE_QUICK", "1")
    quick = lab01.sweep_concurrencies()
    monkeypatch.setenv("COURSE_QUICK", "0")
    assert len(quick) < len(lab01.sweep_concurrencies())
    assert all(lab01.CONCURRENCY_RANGE[0] <= c <= lab01.CONCURRENCY_RANGE[1] for c in lab01.sweep_concurrencies())


@pytest.mark.parametrize("kwargs, word", [
    (dict(prompt_len=0), "prompt_len"), (dict(prompt_len=5000), "prompt_len"), (dict(prompt_len=2.5), "prompt_len"),
    (dict(prompt_len=True), "prompt_len"), (dict(output_len=1), "output_len"), (dict(output_len=1000), "output_len"),
    (dict(concurrency=0), "concurrency"), (dict(concurrency=65), "concurrency"), (dict(concurrency="4"), "concurrency"),
    (dict(model="gpt-5"), "model"), (dict(model=""), "model"), (dict(model=None), "model"),
    (dict(device="tpu"), "device"),
])
def test_out_of_range_settings_are_refused_in_japanese_and_english(kwargs, word):
    settings = dict(model="synthetic:llama-125m", prompt_len=8, output_len=4, concurrency=1, device="cpu")
    settings.update(kwargs)
    with pytest.raises(ValueError, match=word) as e:
        lab01.check_settings(**settings)
    assert "してください" in str(e.value) or "使えません" in str(e.value) or "選べません" in str(e.value)
    with pytest.raises(ValueError, match=word):
        lab01.run_timeline(**settings)


def test_unavailable_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(runtime, "available_devices", lambda: ["cpu"])
    with pytest.raises(ValueError, match="cuda"):
        lab01.check_settings(device="cuda")


def test_too_long_for_the_model_is_refused(model):
    with pytest.raises(ValueError, match="max_model_len"):
        lab01.run_timeline(model, prompt_len=250, output_len=10, concurrency=1)   # the tiny model has 256


@pytest.mark.parametrize("bad", [[], [0], [1, 65], list(range(1, 10)), "1, x", 4, None])
def test_bad_sweep_concurrencies(bad):
    with pytest.raises(ValueError, match="concurrenc|sweep list"):
        lab01.check_concurrencies(bad)


def test_sweep_list_text_is_accepted():
    assert lab01.check_concurrencies("8, 1, 2") == [1, 2, 8]


def test_plots_return_figures_without_missing_glyphs(model):
    res = lab01.run_timeline(model, prompt_len=30, output_len=5, concurrency=2)
    fig = lab01.plot_timeline(res)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    assert len(fig.axes[0].get_yticks()) == 2
    draw_strict(fig)
    rows = lab01.run_concurrency_sweep(model, 8, 3, concurrencies=[1, 2])
    fig = lab01.plot_sweep(rows)
    assert isinstance(fig, Figure) and len(fig.axes[0].get_lines()) == 1
    draw_strict(fig)
    fig = lab01.plot_sweep(lab01.sweep_lab(model, 8, 3, [1, 2], repeats=2)["rows"])     # with min-max error bars
    draw_strict(fig)


def test_widget_run_button_updates_readout_history_and_plot(model):
    app = build_panel(1, model=model, device="cpu", concurrencies=[1, 2], repeats=1)
    app.prompt_len.value, app.output_len.value, app.concurrency.value = 24, 5, 2
    app.run_button.click()
    m = app.last_result
    assert m is not None and (m["prompt_len"], m["output_len"], m["concurrency"]) == (24, 5, 2)
    assert "TTFT" in app.readout.value and f"{m['tpot_ms']:.1f} ms" in app.readout.value
    assert isinstance(app.last_figure, Figure)
    assert app.progress.value == app.progress.max == 10
    assert app.status.value == "完了" and not app.run_button.disabled
    assert len(app.history) == 1 and "実行の履歴" in app.kit.history_view.value
    app.kit.repeats.value = 2
    app.run_button.click()
    assert len(app.last_result["runs"]) == 2 and len(app.history) == 2
    assert "（" in app.readout.value and "〜" in app.readout.value          # median (min〜max)


def test_widget_sweep_button_overlays_the_last_sweeps(model):
    app = build_panel(1, model=model, device="cpu", output_len=3, concurrencies=[1, 2], repeats=1)
    assert app.sweep_button.description == "同時リクエスト数スイープ [1, 2]"
    app.sweep_button.click()
    assert [r["concurrency"] for r in app.last_sweep] == [1, 2]
    assert "tok/s/user" in app.readout.value and isinstance(app.last_figure, Figure)
    app.kit.sweep_list.value = "1, 3"
    assert app.sweep_button.description == "同時リクエスト数スイープ [1, 3]"
    app.sweep_button.click()
    assert [r["concurrency"] for r in app.last_sweep] == [1, 3] and len(app.history) == 4
    assert len(app.last_figure.axes[0].get_legend().get_texts()) == 2       # both sweeps overlaid
    app.kit.sweep_list.value = "1, zwei"
    assert "直して" in app.sweep_button.description
    assert app.on_sweep() is None and "整数をカンマで区切って" in app.status.value


def test_widget_threads_arrivals_cost_and_export(model, tmp_path, monkeypatch):
    import torch
    monkeypatch.chdir(tmp_path)
    app = build_panel(1, model=model, device="cpu", output_len=4, concurrency=2, repeats=1)
    assert app.kit.rate.layout.display == "none"
    app.kit.arrivals.value = "poisson"
    assert app.kit.rate.layout.display == "" and app.kit.late_prompt_len.layout.display == "none"
    app.kit.arrivals.value, app.kit.late_prompt_len.value = "late_long", 60
    app.kit.threads.value = 1
    app.kit.usd_per_hour.value, app.kit.watts.value = 2.0, 30.0
    app.run_button.click()
    m = app.last_result
    assert m["threads"] == 1 and torch.get_num_threads() == 1
    assert m["late_prompt_len"] == 60 and len(m["runs"][-1]["requests"]) == 3
    assert "100万出力トークン" in app.kit.cost_view.value
    app.kit.learner.value = "tanaka"
    path = app.kit.on_save()
    assert path.is_file() and "tanaka" in app.kit.export_view.value
    from course import labkit
    assert labkit.read_csv(path)[0]["learner"] == "tanaka"
    app.kit.clear_button.click()
    assert app.history == [] and "まだありません" in app.kit.history_view.value


def test_widget_server_backend_fields_and_errors(model):
    app = build_panel(1, model=model, device="cpu", repeats=1)
    assert app.kit.base_url.layout.display == "none"
    app.kit.backend.value = "openai"
    assert app.kit.base_url.layout.display == ""
    app.kit.base_url.value = "localhost:1"
    assert app.on_run() is None and "http://" in app.status.value


def test_widget_keeps_the_names_the_browser_test_uses(model):
    from course.tooling.notebooks import PANEL_PLACEHOLDER
    app = build_panel(1, model=model, device="cpu")
    assert app.run_button.description == "実行"
    assert app.sweep_button.description.startswith("同時リクエスト数スイープ")
    assert "lab-readout" in app.readout._dom_classes and "lab-history" in app.kit.history_view._dom_classes
    assert app.prompt_len.description == "プロンプト長"
    bundle = app._repr_mimebundle_()
    assert bundle["text/plain"] == PANEL_PLACEHOLDER and "application/vnd.jupyter.widget-view+json" in bundle


def test_widget_shows_errors_instead_of_raising(model):
    app = build_panel(1, model=model, device="cpu", repeats=1)
    app.prompt_len.value, app.output_len.value = 250, 10      # over the tiny model's 256 positions
    assert app.on_run() is None
    assert "max_model_len" in app.status.value and "超えています" in app.status.value
    assert not app.run_button.disabled


def test_widget_offers_every_model_and_device():
    app = build_panel(1, device="cpu")
    assert [v for _, v in app.model.options] == list(lab01.MODEL_CHOICES.values())
    assert list(app.device.options) == lab01.available_devices()


@pytest.mark.skipif(not (DEFAULT_MODEL / "model.safetensors").is_file(), reason="default model not trained yet")
def test_default_model_runs_at_default_settings_in_seconds():
    res = lab01.run_timeline()
    assert res["duration_s"] < 30
    assert res["summary"]["total_output_tokens"] == lab01.DEFAULTS["output_len"] * lab01.DEFAULTS["concurrency"]


def test_widget_fits_length_sliders_to_the_model(model):
    app = build_panel(1, model=model, device="cpu")          # the tiny model has 256 positions
    assert lab01.max_model_len(model) == 256
    assert app.prompt_len.max == 256 - lab01.OUTPUT_LEN_RANGE[0]
    assert app.output_len.max == min(lab01.OUTPUT_LEN_RANGE[1], 256 - lab01.PROMPT_LEN_RANGE[0])
    app.model.value = "synthetic:llama-125m"                 # 2048 positions: the lab's own limits apply
    assert app.prompt_len.max == lab01.PROMPT_LEN_RANGE[1]


def test_llm_cache_keeps_the_most_recent_models(model, tmp_path, monkeypatch):
    from conftest import save_tiny_model
    other = str(save_tiny_model(tmp_path / "other", "qwen2"))
    monkeypatch.setattr(runtime, "LLM_CACHE_SIZE", 1)
    first = runtime.get_llm(model, "cpu")
    second = runtime.get_llm(other, "cpu")
    assert second is runtime.get_llm(other, "cpu")
    assert runtime.get_llm(model, "cpu") is not first          # evicted, loaded again
    assert len(runtime._LLM_CACHE) == 1


def test_course_model_replaces_the_default_model(model, monkeypatch):
    monkeypatch.setenv("COURSE_MODEL", model)
    assert runtime.engine_model_arg("default") == model
    assert runtime.max_model_len("default") == 256


NOTEBOOKS = ["lessons/00_course_guide.ipynb", "lessons/01_inference_basics.ipynb", "labs/01_prefill_decode_lab.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_notebook_links_resolve_and_cells_are_tagged_not_commented(path):
    import re
    from pathlib import Path

    import nbformat
    nb_path = Path(__file__).resolve().parents[2] / path
    nb = nbformat.read(nb_path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for target in re.findall(r"\]\(([^)#]+)\)", cell.source):
                if not target.startswith("http"):
                    assert (nb_path.parent / target).exists(), f"{path}: broken link {target}"
        else:
            assert "nbval-ignore-output" not in cell.source, "use the cell tag, not a comment"
            assert cell.execution_count is not None, f"{path} is saved without executing every cell"


def test_widget_shows_the_load_warning(model, monkeypatch):
    import importlib
    load = importlib.import_module("course.labkit.load")
    busy = {"other_busy_cores": 1.5, "cpu_count": 2, "source": "test", "threads": 1,
            "warning": load.load_warning(1.5, 2, 1)}
    monkeypatch.setattr(load, "check_load", lambda threads, *a: busy)       # LoadWatch's check before the run
    monkeypatch.setattr(load, "disturbed", lambda *a: False)                # the machine's real load during it
    app = build_panel(1, model=model, device="cpu", output_len=3, concurrency=1, repeats=1)
    app.run_button.click()
    assert app.last_result["warnings"] == [busy["warning"]]
    assert "ほかのプログラムが CPU を使っています" in app.kit.warnings.value
    assert "ほかのプログラム" in app.history[-1]["warnings"]
