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
    from course.labs.lab05_explain import idle_share                 # every group, as the readings (ch05 #6)
    assert res["idle_share"] == pytest.approx(idle_share(res["output_lens"], 2))
    # ch05 reviews6 #1: the engine's probed Linear kernels are recorded for the transformers-gap reading
    from minimal_engine.model.cpu_linears import cpu_kernels
    k = cpu_kernels(lab05._engine("continuous", 2, 0, "cpu").engine.runner.model)
    assert res["engine_kernels"] == {"one_row": k.one_row, "more_rows": k.more_rows, "line": k.describe()}
    # final reading 2026-12-07c ch05 #1: the same layers timed at 1-8 rows, for a step time that falls with the batch
    assert sorted(res["linear_ms"]) == [1, 2, 4, 8]
    assert all(0 < v["min"] <= v["median"] for v in res["linear_ms"].values())


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


def test_prefill_step_share_counts_decode_steps_that_also_ran_a_prompt():
    """Continuous batching admits a newcomer's prefill into steps where others decode; static
    never does (a group's prefill runs before anyone in it decodes): static's other TPOT cause."""
    res = lab05.run_batching_lab(prompt_len=16, concurrency=2, num_requests=6, output_len=12, repeats=1,
                                 load_check=False)
    p = res["policies"]
    assert 0 < p["continuous"]["prefill_step_share"] <= 1
    assert p["static"]["prefill_step_share"] == 0
    assert p["hf_static"]["prefill_step_share"] is None


def test_history_shows_the_load_warning_and_the_repeats_range(res):
    history = []
    lab05.add_run(history, {**res, "repeats": 3, "warnings": ["⚠ ほかのプログラムが CPU を使っています"]})
    lab05.add_run(history, res)
    text = lab05.history_html(history)
    rows = _rows(text)
    n = len(res["policies"])
    c = res["policies"]["continuous"]
    assert [r[-1] for r in rows] == ["⚠"] * n + [""] * n               # the busy run, and only it
    assert "実行 1: ⚠ ほかのプログラムが CPU を使っています" in text
    assert rows[0][8] == f"{c['tok_s']:.1f}（{c['tok_s_min']:.1f}〜{c['tok_s_max']:.1f}）"
    assert rows[n][8] == f"{c['tok_s']:.1f}"                             # one repeat: no range
    assert "ほかのプログラム" in lab05.history_csv(history).splitlines()[1]


def _task1_run(lens, cont, stat):
    return {"output_lens": lens, "concurrency": 4,
            "policies": {"continuous": {"tok_s": cont}, "static": {"tok_s": stat}}}


def test_task1_idle_share_is_the_lessons_formula_and_falls_with_the_lab_seed():
    """The reader's check: with the lab's seed the idle share falls as the absolute spread grows."""
    import random

    from course.labs.lab05_explain import TASK1_OUTPUT_LENS, idle_share
    shares = []
    for o in TASK1_OUTPUT_LENS:
        rng = random.Random(0)                  # run_batching_lab's lengths (seed 0, 16 requests)
        lens = [rng.randint(max(1, o // 4), o) for _ in range(16)]
        shares.append(round(100 * idle_share(lens, 4), 1))
    assert shares == [28.5, 25.0, 21.3]
    one = [10, 100, 20, 50]
    assert idle_share(one, 4) == pytest.approx(calc.static_batch_idle_share(one))


def test_task1_verdicts_follow_the_numbers():
    """A planted contradicting number turns each verdict."""
    from course.labkit.predictions import HELD, MISSED
    from course.labs.lab05_explain import task1_predictions
    short, long_ = [4, 16, 10, 12, 16, 8, 6, 14], [32, 128, 80, 96, 128, 64, 48, 112]
    wide_long = [120, 128, 32, 40, 128, 125, 32, 33]                          # idle share up
    base = _task1_run(short, 110, 100)
    good = task1_predictions({16: base, 128: _task1_run(long_, 112, 100)})
    assert [p.held for p in good] == [True, True]
    assert all(p.verdict().startswith(HELD) for p in good)
    idle_up = task1_predictions({16: base, 128: _task1_run(wide_long, 112, 100)})
    assert [p.held for p in idle_up] == [False, False]                 # the step ratio grew too (1.07 -> 1.55)
    assert idle_up[1].verdict().startswith(MISSED) and "ステップ数の比 1.07 → 1.55 倍" in idle_up[1].verdict()
    diluted = task1_predictions({16: base, 128: _task1_run(long_, 100, 100)})   # blind reading 10 ch05 #2
    assert [p.held for p in diluted] == [True, False]
    assert "測った比 ÷ ステップ数の比 1.03 → 0.94" in diluted[1].verdict() and "Attention" in diluted[1].verdict()
    ranged = {o: {**r, "policies": {k: {"tok_s": v["tok_s"], "tok_s_min": v["tok_s"] * 0.9, "tok_s_max": v["tok_s"] * 1.1}
                                    for k, v in r["policies"].items()}}
              for o, r in ((16, base), (128, _task1_run(long_, 125, 100)))}
    wide = task1_predictions(ranged)[1]                      # quotient 1.03 -> 1.17, yet the ranges overlap
    assert wide.held is None and wide.verdict().startswith("判定できません") and "0.84〜1.26 → 0.96〜1.43" in wide.verdict()


def test_task1_saved_verdicts_agree_with_the_saved_table():
    """The lab's saved 課題1 cell: each verdict re-derived from the numbers printed above it."""
    import json
    import re
    from pathlib import Path

    from course.labkit.predictions import HELD, MISSED, UNDECIDED
    path = Path(__file__).resolve().parents[2] / "labs/05_batching_lab.ipynb"
    cells = json.loads(path.read_text("utf-8"))["cells"]
    cell = next(c for c in cells if c["cell_type"] == "code" and "task1_predictions" in "".join(c["source"]))
    text = "".join("".join(o.get("text", "")) for o in cell["outputs"]
                   if o.get("output_type") == "stream")
    rows = re.findall(r"出力長（最大）\s*(\d+): 最大 − 最小\s*(\d+)、静的の空き枠 ([\d.]+) %、ステップ数の比 ([\d.]+) 倍、"
                      r"連続 ÷ 静的の出力 tok/s ([\d.]+) 倍", text)
    assert len(rows) == 3, text
    lo, hi = rows[0], rows[-1]
    idle_held = int(hi[1]) > int(lo[1]) and float(hi[2]) <= float(lo[2]) + 2
    saved = [line for line in text.splitlines() if line.startswith((HELD, MISSED, UNDECIDED))]
    assert saved[0].startswith(HELD) == idle_held, text
    # blind reading 10 ch05 #2: the step ratio does not grow, measured ÷ step ratio rises (decided on the ranges)
    steps = re.search(r"ステップ数の比 ([\d.]+) → ([\d.]+) 倍、測った比 ÷ ステップ数の比 ([\d.]+) → ([\d.]+)", saved[1])
    assert steps and steps.groups()[:2] == (lo[3], hi[3]), text
    flat = float(hi[3]) <= float(lo[3]) + 0.02 + 0.01                      # printed to 0.01
    both = re.search(r"繰り返しの組み合わせで ([\d.]+)〜([\d.]+) → ([\d.]+)〜([\d.]+)", saved[1])
    a0, a1, b0, b1 = map(float, both.groups()) if both else (float(steps[3]),) * 2 + (float(steps[4]),) * 2
    ratio_held = (True if b0 > a1 else False if b1 < a0 else None) if flat else False
    state = True if saved[1].startswith(HELD) else False if saved[1].startswith(MISSED) else None
    assert state == ratio_held, text


def test_history_warns_when_the_two_engine_policies_disagree_at_concurrency_one(res):
    """At concurrency 1 continuous and static schedule alike: ranges apart flag a noisy run."""
    def run(c_range, s_range):
        pol = {k: {**v} for k, v in res["policies"].items()}
        for k, (lo, hi) in (("continuous", c_range), ("static", s_range)):
            pol[k].update(tok_s=(lo + hi) / 2, tok_s_min=lo, tok_s_max=hi)
        history = []
        lab05.add_run(history, {**res, "concurrency": 1, "repeats": 3, "policies": pol})
        return lab05.history_html(history)
    assert "同時リクエスト数 1 では連続と静的" in run((130, 140), (120, 125))
    assert "同時リクエスト数 1 では連続と静的" not in run((130, 140), (125, 135))


def test_the_load_is_watched_over_the_whole_run():
    """The run's load comes from course.labkit.load.LoadWatch: the check before, plus the cores others used
    during the run and whether they disturbed it (its verdicts then print 判定できません)."""
    r = lab05.run_batching_lab(prompt_len=8, concurrency=2, num_requests=2, output_len=4, repeats=1,
                               policies=("continuous",))
    load = r["load"]
    assert {"during", "disturbed", "warning"} <= set(load) and isinstance(load["disturbed"], bool)
    assert load["during"] is None or load["during"]["seconds"] > 0
    assert (load["warning"] in r["warnings"]) == bool(load["warning"])
