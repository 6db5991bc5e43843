"""Chapter 8: lab 8's comparison of no speculation, n-gram and the draft model on the same prompts (greedy tokens
identical, acceptance figures consistent), the prompts, the step trace, the calculators, history and the panel."""
import pytest

from course.labs import lab08
from course.panels import build as build_panel
from minimal_engine import calculators as calc


def test_calculators_by_hand():
    assert calc.spec_tokens_per_step(0.0, 4) == 1
    assert calc.spec_tokens_per_step(1.0, 4) == 5
    assert calc.spec_tokens_per_step(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert calc.spec_speedup(0.5, 2, 0.1) == pytest.approx(1.75 / 1.2)
    # batch 1 is memory-bound: verifying k+1 tokens costs one step; a huge batch is compute-bound: the gain fades
    small = calc.spec_roofline_speedup("Llama 3.1 8B", "H200", 1, 4, 0.8)
    big = calc.spec_roofline_speedup("Llama 3.1 8B", "H200", 512, 4, 0.8)
    assert small == pytest.approx(calc.spec_tokens_per_step(0.8, 4)) and big < 1
    with pytest.raises(ValueError):
        calc.spec_tokens_per_step(1.5, 2)
    # break-even acceptance: k = 2 solves a^2 + a - 2c = 0; a draft that costs a whole step never pays off
    for c in (0.1, 0.3):
        assert lab08.break_even_alpha(2, c) == pytest.approx((-1 + (1 + 8 * c) ** 0.5) / 2, abs=1e-9)
        assert calc.spec_speedup(lab08.break_even_alpha(4, c), 4, c) == pytest.approx(1)
    assert lab08.break_even_alpha(2, 1.5) != lab08.break_even_alpha(2, 1.5)   # nan: slower even when always right


@pytest.fixture(scope="module")
def res():
    return lab08.run_spec_lab(prompt_len=24, k=3, concurrency=2, output_len=12, repeats=1, load_check=False)


def test_three_methods_on_the_same_prompts(res):
    m = res["methods"]
    assert set(m) == {"none", "ngram", "draft_model"}
    assert res["same_tokens"]                                   # greedy: speculation never changes tokens
    assert all(len(t) == 12 for t in m["none"]["tokens"])
    for k in ("ngram", "draft_model"):
        assert m[k]["proposed"] > 0 and 0 <= m[k]["accepted"] <= m[k]["proposed"]
        assert m[k]["acceptance_rate"] == pytest.approx(m[k]["accepted"] / m[k]["proposed"])
        assert 1 <= m[k]["mean_accepted_length"] <= res["k"] + 1
        assert m[k]["speedup"] == pytest.approx(m[k]["tok_s"] / m["none"]["tok_s"])
        # Leviathan's alpha: the formula at it gives the measured mean length (the share does not)
        length = calc.spec_tokens_per_step(m[k]["alpha"], 3)
        assert length == pytest.approx(m[k]["mean_accepted_length"], abs=1e-6)
    assert m["none"]["proposed"] == 0 and m["none"]["speedup"] == 1


def test_acceptance_by_position_and_the_undistilled_draft():
    r = lab08.run_spec_lab(prompt_len=24, k=2, concurrency=1, output_len=12, text="ordinary", repeats=1,
                           methods=("none", "draft_model", "draft_model_lm"), load_check=False)
    assert r["same_tokens"] and set(r["methods"]) == {"none", "draft_model", "draft_model_lm"}
    for m in ("draft_model", "draft_model_lm"):
        x = r["methods"][m]
        by_pos = x["acceptance_by_position"]
        assert len(by_pos) == 2 and 1 >= by_pos[0] >= by_pos[1] >= 0   # a later draft counts only after the earlier
        assert sum(by_pos) == pytest.approx(x["mean_accepted_length"] - 1)  # per step: the accepted drafts
    assert r["methods"]["none"]["acceptance_by_position"] == []
    assert lab08.spec_config("draft_model_lm", 2)["model"] == str(lab08.DRAFT_LM)
    cost = lab08.measure_draft_cost(method="draft_model_lm", num_steps=3)
    assert cost["draft_step_ms"] > 0 and cost["c"] == pytest.approx(cost["draft_step_ms"] / cost["target_step_ms"])
    with pytest.raises(ValueError):
        lab08.measure_draft_cost(method="ngram")


def test_prompts_have_the_asked_length_and_kind():
    llm = lab08._engine("none", 1, 1, "cpu")
    rep = lab08.make_prompts(llm, "repetitive", 40, 2)
    ordi = lab08.make_prompts(llm, "ordinary", 40, 2)
    assert all(len(p) == 40 for p in rep + ordi) and rep[0] != rep[1] and ordi[0] != ordi[1]
    text = llm.tokenizer.decode(rep[0])
    assert text.count("吾輩は猫である。") >= 3                     # one sentence, over and over
    with pytest.raises(ValueError):
        lab08.make_prompts(llm, "poetry", 40, 1)


def test_trace_shows_drafts_and_what_was_kept():
    rows = lab08.trace_steps("ngram", 4, prompt=lab08.PASSAGES[0][:16] * 4, max_tokens=16)
    ordinary = lab08.trace_steps("draft_model", 2, max_tokens=8, text="ordinary", prompt_len=24)
    assert sum(len(r["tokens"]) for r in ordinary) == 8
    assert sum(len(r["tokens"]) for r in rows) == 16
    assert any(r["accepted"] > 0 for r in rows)
    for r in rows:
        assert len(r["tokens"]) == r["accepted"] + 1 and r["accepted"] <= len(r["drafts"])
        assert r["tokens"][:r["accepted"]] == r["drafts"][:r["accepted"]]


def test_history_rows_per_method(res):
    history = []
    lab08.add_run(history, res)
    assert [r["method"] for r in history] == ["none", "ngram", "draft_model"]
    assert all(r["prompt_len"] == 24 and r["k"] == 3 for r in history)
    assert "24" in lab08.history_html(history)
    assert lab08.history_csv(history).count("\n") == 4
    assert lab08.plot_run(res) is not None and "提案の採用率" in lab08.readout_html(res)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        lab08.run_spec_lab(k=0, load_check=False)
    with pytest.raises(ValueError):
        lab08.run_spec_lab(methods=("ngram",), load_check=False)
    with pytest.raises(ValueError):
        lab08.run_spec_lab(temperature=-1, load_check=False)


def test_panel_has_the_browser_contract():
    pytest.importorskip("ipywidgets")
    app = build_panel(8, prompt_len=16, k=2, concurrency=1, output_len=8, repeats=1)
    assert app.sliders["prompt_len"].description == "プロンプト長" and app.run_button.description == "実行"
    assert app.on_run() is not None
    assert [r["prompt_len"] for r in app.history] == [16, 16, 16]
