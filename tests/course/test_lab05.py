"""Chapter 5: lab 5's policies on one request stream (continuous, static, transformers), goodput,
preemptions with a small KV pool, history and the panel; the chapter's calculators."""
import pytest

from course.labs import lab05
from course.panels import build as build_panel
from minimal_engine import calculators as calc


def test_calculators_by_hand():
    assert calc.static_batch_idle_slots([10, 100, 20, 50]) == 220
    assert calc.static_batch_idle_share([10, 100, 20, 50]) == pytest.approx(0.55)
    assert calc.static_batch_idle_share([7, 7, 7]) == 0
    assert calc.padding_tokens([100, 400, 250, 50]) == 800
    assert calc.goodput_rps([100, 3000, 500], [20, 20, 500], 2.0, ttft_slo_ms=1000, tpot_slo_ms=100) == 0.5
    with pytest.raises(ValueError):
        calc.static_batch_idle_slots([])


@pytest.fixture(scope="module")
def res():
    return lab05.run_batching_lab(prompt_len=16, concurrency=2, num_requests=4, output_len=12, repeats=1,
                                 load_check=False, ttft_slo_ms=1e9, tpot_slo_ms=1e9)


def test_three_policies_on_the_same_stream(res):
    p = res["policies"]
    assert set(p) == {"continuous", "static", "hf_static"}
    assert res["same_tokens"]                                   # greedy: static gives continuous's tokens
    assert [len(t) for t in p["continuous"]["tokens"]] == res["output_lens"]
    for k in p:
        assert p[k]["tok_s"] > 0 and p[k]["tok_s_per_user"] > 0
    for k in ("continuous", "static"):                          # every request met an infinite SLO
        assert len(p[k]["ttft_ms_list"]) == 4
        assert p[k]["goodput_rps"] == pytest.approx(4 / p[k]["duration_s"])
    assert res["idle_share"] == pytest.approx(calc.static_batch_idle_share(res["output_lens"][:2]))


def test_history_rows_per_policy(res):
    history = []
    lab05.add_run(history, res)
    assert [r["policy"] for r in history] == list(res["policies"])
    assert all(r["prompt_len"] == 16 and r["run"] == 1 for r in history)
    assert "16" in lab05.history_html(history)
    assert lab05.history_csv(history).count("\n") == 4
    assert lab05.plot_run(res) is not None and lab05.plot_pareto(history) is not None


def test_small_kv_pool_preempts_with_the_same_tokens():
    kw = dict(prompt_len=16, concurrency=4, num_requests=4, output_len=48, policies=("continuous",), repeats=1,
              load_check=False)
    small = lab05.run_batching_lab(kv_blocks=6, **kw)["policies"]["continuous"]
    full = lab05.run_batching_lab(**kw)["policies"]["continuous"]
    assert small["num_preemptions"] > 0 and full["num_preemptions"] == 0
    assert small["tokens"] == full["tokens"]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        lab05.run_batching_lab(concurrency=0, load_check=False)
    with pytest.raises(ValueError):
        lab05.run_batching_lab(policies=("magic",), load_check=False)


def test_panel_has_the_browser_contract():
    pytest.importorskip("ipywidgets")
    app = build_panel(5, prompt_len=8, concurrency=2, num_requests=2, output_len=4, repeats=1)
    assert app.sliders["prompt_len"].description == "プロンプト長" and app.run_button.description == "実行"
    assert app.on_run() is not None
    assert [r["prompt_len"] for r in app.history] == [8, 8, 8]


def _rows(html_text):
    """The data rows of a history table: each a list of cell texts (the header row left out)."""
    import re
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", html_text)]
    return [r for r in rows if r]


SETTINGS = lab05.HISTORY_FIELDS[1:lab05.HISTORY_FIELDS.index("policy")]


@pytest.mark.parametrize("field", SETTINGS)
def test_history_shows_every_setting_that_changed(res, field):
    """Two runs that differ in one setting (课題1: 出力長 16 -> 128) must not look the same in the history."""
    other = {"device": "cuda", "threads": 7, "prompt_len": 99, "output_len": 128, "concurrency": 9,
             "num_requests": 33, "rate": 5.0, "kv_blocks": 24, "repeats": 5, "ttft_slo_ms": 300, "tpot_slo_ms": 50}
    assert set(SETTINGS) <= set(other)
    history = []
    lab05.add_run(history, res)
    lab05.add_run(history, {**res, field: other[field]})
    rows = _rows(lab05.history_html(history))
    n = len(res["policies"])
    first, second = [r[1:] for r in rows[:n]], [r[1:] for r in rows[n:]]      # without the run number
    assert first != second, f"{field} changed but the history rows look the same"


def test_one_slo_in_the_chapter_and_a_panel_control():
    import inspect
    import json
    from pathlib import Path
    sig = inspect.signature(lab05.run_batching_lab).parameters
    assert (sig["ttft_slo_ms"].default, sig["tpot_slo_ms"].default) == (1000, 200) == tuple(lab05.SLO.values())
    root = Path(__file__).resolve().parents[2]
    for nb in ("lessons/05_batching.ipynb", "labs/05_batching_lab.ipynb"):
        code = "".join("".join(c["source"]) for c in json.loads((root / nb).read_text(encoding="utf-8"))["cells"]
                       if c["cell_type"] == "code")
        assert "slo_ms=" not in code, f"{nb} sets its own SLO: use lab05.SLO (the chapter's one SLO)"
    pytest.importorskip("ipywidgets")
    app = build_panel(5, prompt_len=8, concurrency=2, num_requests=2, output_len=4, repeats=1)
    assert app.sliders["ttft_slo_ms"].value == 1000 and app.sliders["tpot_slo_ms"].value == 200
    app.sliders["ttft_slo_ms"].value = 300
    assert app.on_run()["ttft_slo_ms"] == 300
    assert "TTFT≤300 ms" in app.readout.value
    assert [r[6] for r in _rows(app.history_view.value)] == ["300 / 200"] * 3


def test_transformers_ttft_is_marked(res):
    cells = _rows(lab05.readout_html(res))
    hf = next(r for r in cells if r[0] == lab05.POLICIES["hf_static"])
    engine = next(r for r in cells if r[0] == lab05.POLICIES["continuous"])
    assert hf[3].endswith("※") and hf[4].endswith("※") and not engine[3].endswith("※")
    assert lab05.HF_TTFT_NOTE in lab05.readout_html(res)


def test_long_headers_wrap_only_between_words(res):
    """「プリエンプション」 broke over three lines in the readout: headers keep words whole."""
    import re
    history = []
    lab05.add_run(history, res)
    for html_text in (lab05.readout_html(res), lab05.history_html(history)):
        for th in re.findall(r"<th style='([^']*)'", html_text):
            assert "word-break:keep-all" in th
