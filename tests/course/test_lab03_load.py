"""Lab 3 and lesson 3 under load (course.labkit.load.LoadWatch): a run whose ``load`` says ``disturbed`` prints
every timed verdict as 判定できません with its numbers still shown; without it the verdicts are unchanged. Also
the cached doubling's reasons (the Prefill is named only when its measured share can explain the miss) and its
undecided case (the repeats' ranges reach across the band's edge)."""
from __future__ import annotations

import json
from pathlib import Path

from course.labkit.predictions import DISTURBED, HELD, MISSED, UNDECIDED, verdicts
from course.labs import lab03, lab03_explain as ex

ROOT = Path(__file__).resolve().parents[2]
POS = list(range(65, 224))
QUIET = {"other_busy_cores": 0.0, "cpu_count": 2, "threads": 1, "warning": None, "disturbed": False,
         "during": {"other_cores": 0.1, "steal_cores": 0.0, "seconds": 40.0}}
BUSY = {**QUIET, "disturbed": True, "during": {"other_cores": 1.2, "steal_cores": 0.0, "seconds": 40.0},
        "warning": "⚠ 計測のあいだ、ほかのプログラムが平均 約 1.2 コアを使っていました"}


def run(load):
    n = len(POS) + 1
    return {"positions": POS, "cached_ms": [21.0] * len(POS), "no_cache_ms": [6.6 + 0.13 * x for x in POS],
            "cached_total_s": 0.8, "no_cache_total_s": 4.0, "tokens_equal": True, "no_cache_one_ms": 20.0,
            "tokens_processed": {"cached": 64 + n - 1, "no_cache": n * 64 + n * (n - 1) // 2}, "load": load}


def totals(cached, load, p=64, prefill=None, nocache=(1.6, 4.1, 11.4)):
    return {n: {"cached_total_s": c, "no_cache_total_s": u, "load": load, "repeats": 1,
                "tokens_processed": {"no_cache": n * p + n * (n - 1) // 2},
                **({"first_cached_ms": prefill * 1e3} if prefill else {})} for n, c, u in zip((80, 160, 320), cached, nocache)}


def test_a_disturbed_run_prints_undecided_with_its_numbers():
    for res in (run(QUIET), run(BUSY)):
        preds = ex.steps_predictions(ex.steps_numbers(res))
        plain, shown = verdicts(preds).splitlines(), verdicts(preds, res["load"]).splitlines()
        if res["load"]["disturbed"]:
            assert all(x.startswith(UNDECIDED) and DISTURBED in x for x in shown)
            assert [p.measured in x for p, x in zip(preds, shown)] == [True] * len(preds)   # numbers still shown
            assert len(shown) == 5 and "1位置" not in ex.steps_reading(res)
        else:
            assert shown == plain and all(x.startswith((HELD, MISSED)) for x in shown)
            assert "1位置のステップ 20.00 ms" in shown[1] and shown[1].startswith(HELD)
    # a task over several runs: one disturbed run is enough
    runs = [totals((0.45, 0.87, 1.75), QUIET), totals((0.45, 0.87, 1.75), BUSY)]
    for r in runs:
        rows = ex.task1_numbers(r)
        loads = [x["load"] for x in r.values()]
        out = verdicts(ex.task1_predictions(rows), *loads).splitlines()
        assert all(x.startswith(UNDECIDED if loads[0]["disturbed"] else HELD) for x in out), out
    nums = {"default": {"cached_ms": 5.0, "ratio": 3.0}, "synthetic:llama-125m": {"cached_ms": 20.0, "ratio": 3.0}}
    assert verdicts(ex.task4_predictions(nums), QUIET, BUSY).count(UNDECIDED) == 2


def test_disturbed_figure_says_so():
    res = lab03.run_kv_lab("default", prompt_len=8, output_len=6, repeats=1, threads=1, load_check=False)
    assert "⚠" not in lab03.plot_steps(res)._suptitle.get_text()
    res["load"] = BUSY
    assert "⚠" in lab03.plot_steps(res)._suptitle.get_text()


def test_cached_doubling_names_prefill_only_when_its_share_can_explain_the_miss():
    # 1.2x with the first token 3 % of the shorter run: Prefill can pull the ratio only to 1.97x
    small = ex.task1_predictions(ex.task1_numbers(totals((0.60, 0.72, 1.44), QUIET, prefill=0.018)))[0]
    assert small.held is False and "Prefill だけでは比は 1.6 倍までは下がらない" in small.otherwise
    assert "占める" not in small.otherwise
    # the first token half of the shorter run: Prefill is the candidate
    big = ex.task1_predictions(ex.task1_numbers(totals((0.60, 0.90, 1.44), QUIET, prefill=0.30)))[0]
    assert big.held is False and "この一定の部分が合計の多くを占める" in big.otherwise
    assert ex.task1_table(ex.task1_numbers(totals((0.60, 0.90, 1.44), QUIET, prefill=0.30))).count("最初のトークンまで") == 3


def test_cached_doubling_within_the_repeats_spread_is_undecided():
    rows = ex.task1_numbers(totals((0.45, 0.70, 1.40), QUIET))
    for r, (lo, hi) in zip(rows, ((0.40, 0.50), (0.66, 0.74), (1.3, 1.5))):
        r["cached_s_min"], r["cached_s_max"] = lo, hi
    p = ex.task1_predictions(rows)[0]                       # 1.56x, but the repeats allow 1.32 .. 1.85
    assert p.held is None and p.verdict().startswith(UNDECIDED)
    assert "（0.40〜0.50）" in ex.task1_table(rows)


def test_notebooks_pass_the_runs_loads_to_their_timed_verdicts():
    for rel, calls in (("labs/03_kv_cache_lab.ipynb", ('steps_numbers(res)), res["load"])', 'for r in runs1]))',
                                                       'for r in runs2]))', 'for r in runs4]))')),
                       ("lessons/03_transformer_kv_cache.ipynb", ('steps_numbers(res)), res["load"])',))):
        src = "".join("".join(c["source"]) for c in json.loads((ROOT / rel).read_text(encoding="utf-8"))["cells"])
        assert all(c in src for c in calls), rel
