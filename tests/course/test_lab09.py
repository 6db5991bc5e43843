"""Chapter 9: lab 9's stream (short decodes + late long prompts) through chunk budgets and the disaggregated
pair: the same tokens everywhere, ITL/TTFT/KV figures present, history and panel; bad settings refused."""
import pytest

from course.labs import lab09
from course.panels import build as build_panel


@pytest.fixture(scope="module")
def res():
    r = lab09.run_interference_lab(prompt_len=100, num_decodes=2, output_len=12, num_long=1, budgets=(16, 512),
                                  repeats=1, load_check=False)
    yield r
    lab09.close_engines()


def test_stream_has_late_long_prompts():
    stream = lab09.build_stream(100, 3, 12, num_long=2)
    assert [r["late"] for r in stream] == [False] * 3 + [True] * 2
    assert [len(r["ids"]) for r in stream] == [lab09.SHORT_PROMPT_LEN] * 3 + [100, 100]
    assert [r["after_tokens"] for r in stream[3:]] == [12, 24]          # a third and two thirds of 3 x 12 tokens


def test_every_setup_gives_the_same_tokens_and_its_figures(res):
    s = res["setups"]
    assert set(s) == {"chunk_16", "chunk_512", "disagg"} and res["same_tokens"]
    for r in s.values():
        assert r["p99_itl_ms"] >= r["median_itl_ms"] > 0 and r["long_ttft_ms"] > 0 and r["tok_s"] > 0
        assert len(r["itl_points"]) == 2 * 11 and len(r["long_arrivals_s"]) == 1
        assert r["long_arrivals_s"][0] > min(t for t, _ in r["itl_points"])    # it came while the others decoded
    per_token = 6 * 2 * 5 * 64 * 4            # default model, float32: layers x (K, V) x KV heads x head dim x 4 B
    assert s["disagg"]["kv_bytes_per_request"] == pytest.approx((2 * 16 + 112) * per_token / 3)   # whole blocks
    assert s["chunk_16"]["kv_bytes_per_request"] == 0
    # the KV per long and per short prompt, not their mean: 100 tokens -> 7 blocks, 16 tokens -> 1 block
    assert res["kv_bytes_per_token"] == per_token
    assert s["disagg"]["kv_bytes_long"] == 112 * per_token and s["disagg"]["kv_bytes_short"] == 16 * per_token
    assert s["disagg"]["kv_ms_long"] > 0 and s["chunk_16"]["kv_bytes_long"] == 0
    for r in s.values():
        assert 1.0 <= r["mean_decoding"] <= 2.0                              # two short requests decode
        assert r["long_first_token_s"][0] > r["long_arrivals_s"][0]         # its first token after its arrival


def test_history_and_charts(res):
    history = []
    lab09.add_run(history, res)
    assert [r["setup"] for r in history] == ["chunk_16", "chunk_512", "disagg"]
    assert all(r["prompt_len"] == 100 for r in history) and "100" in lab09.history_html(history)
    assert lab09.history_csv(history).count("\n") == 4
    assert lab09.plot_itl(res) and lab09.plot_budget(res) and lab09.plot_pareto(res) and lab09.readout_html(res)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        lab09.run_interference_lab(prompt_len=5000, load_check=False)
    with pytest.raises(ValueError):
        lab09.run_interference_lab(budgets=(), load_check=False)
    with pytest.raises(ValueError):
        lab09.run_interference_lab(arrivals="all", load_check=False)


def test_panel_has_the_browser_contract():
    pytest.importorskip("ipywidgets")
    app = build_panel(9, prompt_len=40, num_decodes=1, output_len=8, num_long=1, repeats=1)
    assert app.sliders["prompt_len"].description == "プロンプト長" and app.run_button.description == "実行"
    app.run = lambda **kw: lab09.run_interference_lab(**kw, budgets=(64,), disagg=False, load_check=False)
    assert app.on_run() is not None
    assert [r["prompt_len"] for r in app.history] == [40]
