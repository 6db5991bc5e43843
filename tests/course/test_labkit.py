"""The lab kit (course/labkit): thread policy, load warning, arrivals, repeats, sweep lists, history and CSV,
cost, readout tables, and the OpenAI-compatible backend against the project's own server on loopback."""
import os
import subprocess
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from course import labkit, runtime  # noqa: E402
from course.labkit import load  # noqa: E402
from minimal_engine import calculators as calc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model(llama_dir):
    return str(llama_dir)


# ---------------------------------------------------------------- thread policy
def test_thread_policy_default_env_and_errors(monkeypatch):
    monkeypatch.delenv("COURSE_THREADS", raising=False)
    assert runtime.course_threads() == runtime.default_threads() == max(1, (os.cpu_count() or 1) // 2)
    monkeypatch.setenv("COURSE_THREADS", "3")
    assert runtime.course_threads() == 3
    before = torch.get_num_threads()
    try:
        assert runtime.apply_thread_policy() == 3 and torch.get_num_threads() == 3
        assert runtime.apply_thread_policy(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv("COURSE_THREADS", bad)
        with pytest.raises(ValueError, match="COURSE_THREADS"):
            runtime.course_threads()
    with pytest.raises(ValueError, match="threads"):
        runtime.apply_thread_policy(0)


def test_importing_the_kit_applies_the_thread_policy():
    code = ("import torch; torch.set_num_threads(2); import course.labkit; print(torch.get_num_threads())")
    env = {**os.environ, "COURSE_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


# ---------------------------------------------------------------- load warning
def test_load_warning_decision():
    assert load.load_warning(0.2, 2, 1) is None                # others nearly idle
    assert load.load_warning(0.6, 16, 8) is None               # plenty of cores left
    w = load.load_warning(1.0, 2, 1)                           # one busy process on a 2-core laptop
    assert w and "ほかのプログラム" in w and "1.0 コア" in w
    assert load.load_warning(8.0, 16, 8) is not None


def test_sweep_warnings_only_when_the_drop_exceeds_the_spread():
    def row(c, v, lo, hi):
        return {"concurrency": c, "tok_s": v, "tok_s_min": lo, "tok_s_max": hi}
    rising = [row(1, 100, 95, 105), row(2, 190, 180, 200), row(4, 350, 340, 360)]
    assert load.sweep_warnings(rising) == []
    noisy = [row(1, 100, 60, 140), row(2, 80, 50, 120)]        # falls 20, spread 80: noise
    assert load.sweep_warnings(noisy) == []
    plateau = [row(8, 400, 398, 402), row(16, 380, 378, 382)]  # -5 %: within the tolerance
    assert load.sweep_warnings(plateau) == []
    broken = [row(4, 350, 340, 360), row(2, 190, 185, 195), row(8, 120, 110, 130)]
    warnings = load.sweep_warnings(broken)
    assert len(warnings) == 1 and "4 → 8" in warnings[0] and "下がりました" in warnings[0]
    assert load.sweep_warnings([{"concurrency": 1, "tok_s": 100}, {"concurrency": 2, "tok_s": 50}])   # no repeats


def test_busy_processes_are_seen_and_warned_about():
    n = load.usable_cpus()
    spin = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(n)]
    try:
        time.sleep(0.5)
        res = load.check_load(threads=1)
        assert res["other_busy_cores"] >= 0.5 * n, res
        assert res["warning"] and "ほかのプログラム" in res["warning"]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=10)


def test_disturbed_rule():
    assert not load.disturbed(0.3, 0.0, 2, 1)          # others nearly idle
    assert load.disturbed(0.6, 0.3, 2, 1)              # 0.9 cores taken + 1 thread > 90 % of 2 cores
    assert not load.disturbed(1.0, 0.0, 16, 8)         # plenty left
    assert load.disturbed(0.0, 1.0, 2, 1)              # the hypervisor's steal alone
    assert not load.was_disturbed(None, {"disturbed": False})          # unwatched or quiet runs
    assert load.was_disturbed(None, {"disturbed": False}, {"disturbed": True})


def _spin(seconds: float, detach: bool):
    """A busy loop: our own child, or (detach) re-parented away from us like another program."""
    loop = f"timeout {seconds} sh -c 'while :; do :; done'"
    if detach:
        subprocess.run(["bash", "-c", f"({loop} &)"], check=True)
        return None
    return subprocess.Popen(["bash", "-c", loop])


def test_load_watch_sees_others_during_the_run_but_not_its_own_workers():
    from course.labkit.predictions import HELD, UNDECIDED, Prediction, verdicts
    n = load.usable_cpus()
    watch = load.LoadWatch(threads=1)
    child = _spin(1.5, detach=False)              # a worker process of the run: its own CPU time
    child.wait(timeout=10)
    quiet = watch.finish()
    assert quiet["during"]["other_cores"] < 0.5, quiet
    p = Prediction("A は B より速い", True, "A 1.0 ms、B 2.0 ms")
    watch = load.LoadWatch(threads=1)             # the check before sees nothing ...
    for _ in range(n):
        _spin(1.5, detach=True)                   # ... then other programs start mid-run
    time.sleep(1.8)
    busy = watch.finish()
    assert busy["disturbed"] and busy["during"]["other_cores"] >= 0.5 * n, busy
    assert "計測のあいだ" in busy["warning"] and "判定できません" in busy["warning"]
    assert verdicts([p], quiet).startswith(HELD)
    line = verdicts([p], quiet, busy)
    assert line.startswith(UNDECIDED) and "A 1.0 ms" in line and "ほかのプログラム" in line


# ---------------------------------------------------------------- arrivals
def test_arrival_plans():
    plan = labkit.arrival_plan("all", 3, 16, 8)
    assert [p["offset_s"] for p in plan] == [0.0] * 3 and not any(p["late"] for p in plan)
    pois = labkit.arrival_plan("poisson", 200, 16, 8, seed=1, rate=50.0)
    offsets = [p["offset_s"] for p in pois]
    assert offsets == sorted(offsets) and offsets[0] == 0.0
    assert offsets[-1] / 199 == pytest.approx(1 / 50, rel=0.25)     # mean gap 1/rate
    assert pois == labkit.arrival_plan("poisson", 200, 16, 8, seed=1, rate=50.0)
    assert pois != labkit.arrival_plan("poisson", 200, 16, 8, seed=2, rate=50.0)
    late = labkit.arrival_plan("late_long", 4, 16, 9, late_prompt_len=100)
    assert len(late) == 5 and late[-1] == {"prompt_len": 100, "offset_s": None, "after_tokens": 12, "late": True}
    with pytest.raises(ValueError, match="arrivals"):
        labkit.arrival_plan("burst", 2, 16, 8)
    with pytest.raises(ValueError, match="rate"):
        labkit.arrival_plan("poisson", 2, 16, 8, rate=0)


def test_local_engine_adds_requests_at_their_arrival_times(model):
    b = labkit.local_backend(model, "cpu")
    plan = labkit.arrival_plan("poisson", 4, 12, 4, seed=3, rate=200.0)
    seen = []
    res = labkit.run_plan(b, plan, 4, progress=lambda d, t: seen.append((d, t)))
    for p, r in zip(plan, res["requests"]):
        assert r["arrival_ms"] == pytest.approx(p["offset_s"] * 1e3)
        assert r["arrival_ms"] <= r["prefill_start_ms"] < r["first_token_ms"]
        assert len(r["token_times_ms"]) == 4
    assert seen[-1] == (16, 16)
    late = labkit.run_plan(b, labkit.arrival_plan("late_long", 3, 12, 9, late_prompt_len=120), 9)
    first, last = late["requests"][:3], late["requests"][3]
    assert last["late"] and last["prompt_len"] == 120
    assert last["arrival_ms"] >= max(r["first_token_ms"] for r in first)   # it came while the others decoded
    assert late["max_itl_ms"] >= late["p99_itl_ms"] >= late["itl_ms"]
    spike = late["spike"]
    assert spike["end_ms"] - spike["start_ms"] == pytest.approx(late["max_itl_ms"])
    assert late["summary"]["max_itl_ms"] == late["max_itl_ms"]


# ---------------------------------------------------------------- repeats and sweep lists
def test_aggregate_median_min_max():
    runs = [{"tok_s": v, "tpot_ms": t} for v, t in [(10, 3.0), (30, 1.0), (20, 2.0)]]
    agg = labkit.aggregate(runs, ("tok_s", "tpot_ms"))
    assert agg == {"tok_s": 20, "tok_s_min": 10, "tok_s_max": 30, "tpot_ms": 2.0, "tpot_ms_min": 1.0, "tpot_ms_max": 3.0}


def test_measure_repeats(model):
    m = labkit.measure(labkit.local_backend(model, "cpu"), 12, 4, 2, repeats=3)
    assert len(m["runs"]) == 3 and m["repeats"] == 3 and m["threads"] == torch.get_num_threads()
    for k in labkit.METRICS:
        assert m[f"{k}_min"] <= m[k] <= m[f"{k}_max"]
    assert isinstance(m["warnings"], list) and "other_busy_cores" in m["load"]
    with pytest.raises(ValueError, match="repeats"):
        labkit.measure(labkit.local_backend(model, "cpu"), 12, 4, 2, repeats=0)


@pytest.mark.parametrize("text, values", [("1, 2, 4, 8, 16", [1, 2, 4, 8, 16]), ("16,8 ４、2", [2, 4, 8, 16]),
                                          ("32 48 64", [32, 48, 64]), ([3, 1], [1, 3])])
def test_sweep_list_parsing(text, values):
    assert labkit.parse_sweep_list(text) == values


@pytest.mark.parametrize("text, word", [("1, two", "整数をカンマで区切って"), ("", "1〜12 個"), ("0, 1", "1〜64"),
                                        ("1, 65", "1〜64"), ("1.5", "整数をカンマで区切って"),
                                        (", ".join(map(str, range(1, 14))), "1〜12 個"), (None, "文字列か")])
def test_bad_sweep_lists_say_why_in_japanese(text, word):
    with pytest.raises(ValueError, match=word):
        labkit.parse_sweep_list(text)


def test_sweep_rows_repeats_and_order(model):
    s = labkit.sweep(labkit.local_backend(model, "cpu"), 12, 4, "1, 2", repeats=2)
    assert [r["concurrency"] for r in s["rows"]] == [1, 2]
    assert all(len(v) == 2 for v in s["runs"].values())
    assert all(r["tok_s_min"] <= r["tok_s"] <= r["tok_s_max"] for r in s["rows"])
    assert labkit.order_held([{"concurrency": 1, "tok_s": 1}, {"concurrency": 2, "tok_s": 2}])
    assert not labkit.order_held([{"concurrency": 1, "tok_s": 2}, {"concurrency": 2, "tok_s": 1}])


# ---------------------------------------------------------------- history, CSV, merge
def fake_measurement(tok_s, concurrency=1, repeats=3, **extra):
    m = {"backend": "local", "base_url": "", "model": "default", "device": "cpu", "threads": 1, "arrivals": "all",
         "rate": None, "late_prompt_len": None, "prompt_len": 64, "output_len": 32, "concurrency": concurrency,
         "repeats": repeats, "warnings": []}
    for k in labkit.METRICS:
        v = tok_s if k == "tok_s" else 9 * tok_s if k == "total_tok_s" else 5.0
        m.update({k: v, f"{k}_min": 0.9 * v, f"{k}_max": 1.1 * v})
    m.update(extra)
    return m


def fake_sweep(scale):
    return {"rows": [fake_measurement(scale * c, c) for c in (1, 2, 4)], "warnings": ["注意"]}


def test_history_rows_csv_round_trip_and_summary(tmp_path):
    history = []
    row = labkit.add_measurement(history, fake_measurement(100.0))
    rows = labkit.add_sweep(history, fake_sweep(50.0))
    assert row["run"] == 1 and {r["run"] for r in rows} == {2} and len(history) == 4
    assert rows[0]["warnings"] == "注意" and rows[1]["warnings"] == ""
    path = labkit.save_csv(history, tmp_path / "h.csv", learner="tanaka")
    back = labkit.read_csv(path)
    assert len(back) == 4 and back[0]["learner"] == "tanaka" and back[3]["concurrency"] == 4
    assert back[3]["tok_s"] == pytest.approx(200.0) and back[3]["tok_s_min"] == pytest.approx(180.0)
    assert back[0]["rate"] is None and back[0]["threads"] == 1
    line = labkit.summary_line(history, "tanaka")
    assert "\n" not in line and line.startswith("tanaka") and "200.0" in line and "同時 4" in line
    assert labkit.summary_line([]) == "（まだ実行していません）"
    with pytest.raises(ValueError, match="履歴 CSV"):
        labkit.read_csv("a,b\n1,2\n")


def test_merge_csvs_one_line_per_learner(tmp_path):
    paths = []
    for i, name in enumerate(["sato", "suzuki", ""]):
        h = []
        labkit.add_sweep(h, fake_sweep(10.0 * (i + 1)))
        paths.append(labkit.save_csv(h, tmp_path / f"learner{i}.csv", learner=name))
    merged = labkit.read_csvs(paths)
    assert list(merged) == ["sato", "suzuki", "learner2"]
    fig = labkit.plot_merged(paths)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["sato", "suzuki", "learner2"]
    assert "3 人" in ax.get_title()


def test_history_plot_overlays_the_last_three_sweeps():
    history = []
    for scale in (1.0, 2.0, 3.0, 4.0):
        labkit.add_sweep(history, fake_sweep(scale))
    assert [s[0]["run"] for s in labkit.sweeps(history, 3)] == [2, 3, 4]
    ax = labkit.plot_history_sweeps(history, last=3).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(labels) == 3 and labels[0].startswith("#2")
    assert len({line.get_color() for line in ax.get_lines()}) == 3     # one colour per sweep
    with pytest.raises(ValueError, match="スイープ"):
        labkit.plot_history_sweeps([])


# ---------------------------------------------------------------- cost and tables
def test_cost_uses_the_calculators_output_vs_total():
    c = labkit.cost(2.0, 700.0, tok_s=100.0, total_tok_s=900.0)       # 8:1 input:output
    assert c["usd_per_m_output_tokens"] == pytest.approx(calc.usd_per_million_tokens(2.0, 100.0))
    assert c["usd_per_m_total_tokens"] == pytest.approx(calc.usd_per_million_tokens(2.0, 900.0))
    assert c["j_per_output_token"] == pytest.approx(7.0) and c["j_per_total_token"] == pytest.approx(700 / 900)
    for bad in (-1, "2", None):
        with pytest.raises(ValueError, match="usd_per_hour"):
            labkit.cost(bad, 0, 100.0, 900.0)
    html = labkit.cost_html(c)
    assert "100万出力トークン" in html and "全込み電力（all-in）" in html


def test_readout_table_is_spaced_with_values_right_aligned():
    html = labkit.readout_html(fake_measurement(123.4))
    assert "padding:" in html and "text-align:right'>123.4（111.1〜135.7）" in html
    assert "<td style='padding:0.2em 0.9em;border-bottom:1px solid #eee;text-align:left'>1人が体感する速さ" in html
    assert "繰り返し 3 回の中央値（最小〜最大）" in html
    assert "tok/s（出力）" in html and "合計 tok/s（入力＋出力）" in html
    one = labkit.readout_html(fake_measurement(50.0, repeats=1))
    assert "〜" not in one
    hist = labkit.history_html([])
    assert "まだありません" in hist


# ---------------------------------------------------------------- OpenAI-compatible backend
@pytest.fixture(scope="module")
def server(llama_dir):
    from minimal_engine import LLM
    from minimal_engine.serve.app import ServerThread, build_app
    llm = LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=16)
    with ServerThread(build_app(llm, max_queue=32, served_model_name="tiny"), timeout_s=30) as s:
        yield s


def test_openai_backend_measures_the_projects_server(server, llama_dir):
    b = labkit.openai_backend(server.url, "tiny", tokenizer=str(llama_dir))
    seen = []
    m = labkit.measure(b, prompt_len=10, output_len=5, concurrency=3, repeats=2, progress=lambda d, t: seen.append(d))
    assert m["backend"] == "openai" and m["threads"] is None and len(m["runs"]) == 2
    run = m["runs"][-1]
    assert run["summary"]["completed"] == 3 and run["summary"]["total_output_tokens"] == 15
    assert all(len(r["token_times_ms"]) == 5 and r["prompt_len"] > 0 for r in run["requests"])
    assert m["tok_s_min"] <= m["tok_s"] <= m["tok_s_max"] and m["max_itl_ms"] >= m["itl_ms"]
    assert seen[-1] == 30
    late = labkit.run_plan(b, labkit.arrival_plan("late_long", 2, 8, 6, late_prompt_len=40), 6)
    assert late["requests"][-1]["late"]
    assert late["requests"][-1]["arrival_ms"] >= min(r["first_token_ms"] for r in late["requests"][:2])
    s = labkit.sweep(b, 8, 4, [1, 2])
    assert [r["concurrency"] for r in s["rows"]] == [1, 2] and s["rows"][0]["backend"] == "openai"


def test_openai_backend_errors_are_explained(server, llama_dir):
    with pytest.raises(ValueError, match="base_url"):
        labkit.openai_backend("127.0.0.1:8000", "tiny")
    with pytest.raises(ValueError, match="モデル名"):
        labkit.openai_backend(server.url, " ")
    b = labkit.openai_backend(server.url, "no-such-model", tokenizer=str(llama_dir))
    with pytest.raises(ValueError, match="失敗しました.*model"):
        labkit.run_plan(b, labkit.arrival_plan("all", 1, 8, 4), 4)
    import socket
    with socket.socket() as s:                       # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(ValueError, match="失敗しました.*Connect"):
        labkit.run_plan(labkit.openai_backend(closed, "tiny", tokenizer=str(llama_dir)),
                        labkit.arrival_plan("all", 1, 8, 4), 4)


def test_add_variant_rows_gives_one_row_per_variant_with_one_run_number():
    """The labs of chapters 5, 6, 8 and 9 compare variants (policies, settings, methods, setups) in one run."""
    from course.labkit.history import add_variant_rows
    fields = ("run", "prompt_len", "threads", "method", "tok_s")
    res = {"prompt_len": 64, "threads": 1, "methods": {"none": {"tok_s": 10.0}, "ngram": {"tok_s": 25.0}}}
    history = [{"run": 3}]
    rows = add_variant_rows(history, res, fields, "method", res["methods"])
    assert rows == [{"run": 4, "prompt_len": 64, "threads": 1, "method": "none", "tok_s": 10.0},
                    {"run": 4, "prompt_len": 64, "threads": 1, "method": "ngram", "tok_s": 25.0}]
    assert history[1:] == rows
