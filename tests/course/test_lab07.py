"""Chapter 7: lab 7's measured TP=1 vs TP=N run (tokens identical, communication counted, history and panel),
its formulas (all-reduce bytes per token, ring all-reduce time) and the predicted TP/DP table."""
import pytest

from course.labs import lab07
from course.panels import build as build_panel


@pytest.fixture(scope="module")
def res():
    out = lab07.run_tp_lab(prompt_len=24, batch_size=2, tp=2, repeats=1, num_steps=3, load_check=False)
    yield out
    lab07.close_all()


def test_tp_run_measures_both_and_keeps_the_tokens(res):
    assert res["same_tokens"] and not res["warnings"]
    one, two = res["runs"][1], res["runs"][2]
    assert one["decode_comm_ms"] == 0 and one["prefill_comm_ms"] == 0     # TP=1 has no communication
    assert 0 < two["decode_comm_share"] < 1 and 0 < two["prefill_comm_share"] < 1
    for k in ("decode", "prefill"):                                        # the repeats' range of the shares
        assert two[f"{k}_comm_share_min"] <= two[f"{k}_comm_share"] <= two[f"{k}_comm_share_max"]
    assert res["allreduces_per_step"] == 12                                # 6 layers x 2
    assert res["decode_allreduce_bytes"] == 2 * 6 * 2 * 320 * 4             # 2 per layer x tokens x hidden x fp32
    assert res["prefill_allreduce_bytes"] == 2 * 6 * 24 * 320 * 4


def test_history_and_plot(res):
    history = []
    lab07.add_run(history, res)
    assert [r["tp_size"] for r in history] == [1, 2] and all(r["prompt_len"] == 24 for r in history)
    assert "24" in lab07.history_html(history) and "TP=2" in lab07.readout_html(res)
    assert lab07.history_csv(history).count("\n") == 3
    assert lab07.plot_run(res) is not None


def test_formulas_by_hand():
    b = lab07.allreduce_bytes_per_token("llama-3.3-70b")
    assert b["bytes_per_layer"] == 2 * 8192 * 2 and b["bytes_per_token"] == 80 * 2 * 8192 * 2
    assert lab07.ring_allreduce_us(1e6, 1, 450) == 0
    assert lab07.ring_allreduce_us(1e6, 2, 100) == pytest.approx(10.0)          # 2 x 1/2 x 1 MB / 100 GB/s
    assert lab07.ring_allreduce_us(1e6, 8, 100, latency_us=5) == pytest.approx(5 + 17.5)


def test_tp_dp_table_is_predicted_and_complete():
    rows = lab07.tp_dp_table("llama-3.3-70b", "H100", gpu_counts=(1, 2, 8))
    assert [(r["num_gpus"], r["tp"]) for r in rows] == [(1, 1), (2, 1), (2, 2), (8, 1), (8, 2), (8, 4), (8, 8)]
    assert all(r["dp"] * r["tp"] == r["num_gpus"] for r in rows)
    assert not rows[0]["fits"]                       # 141 GB of bf16 weights do not fit one 80 GB H100
    assert rows[-1]["fits"] and rows[-1]["tpot_ms"] < rows[-2]["tpot_ms"]
    assert "予測" in lab07.tp_dp_html(rows)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        lab07.run_tp_lab(tp=1, load_check=False)
    with pytest.raises(ValueError):
        lab07.run_tp_lab(prompt_len=0, load_check=False)
    with pytest.raises(ValueError):
        lab07.run_tp_lab(batch_size=99, load_check=False)


def test_panel_has_the_browser_contract(res):
    pytest.importorskip("ipywidgets")
    app = build_panel(7, prompt_len=16, batch_size=1, tp=2, repeats=1)
    assert app.sliders["prompt_len"].description == "プロンプト長" and app.run_button.description == "実行"
    assert app.on_run() is not None
    assert [r["prompt_len"] for r in app.history] == [16, 16]


def test_tp1_gets_the_same_total_threads_but_never_more_than_the_cores(res):
    from course.labkit.load import usable_cpus
    tp1_threads, tp1_procs = res["threads_per_config"][1]
    per_rank, procs = res["threads_per_config"][2]
    assert tp1_procs == 1 and procs == 2
    assert tp1_threads == max(per_rank, min(per_rank * procs, usable_cpus()))
    assert tp1_threads <= max(per_rank, usable_cpus())
    assert res["tp1_own_decode_ms"] > 0 and res["load_warned"] is False      # load_check=False
    same = tp1_threads == per_rank * procs
    assert ("合計のスレッド数は同じ" if same else "TP=1 はコア数まで") in lab07.readout_html(res)
    assert 0 < res["decode_compute_ratio"] and 0 < res["prefill_compute_ratio"]


def test_rank0_share_predicts_the_compute_ratio(res):
    """Rank 0 holds 3 of the 5 heads and the replicated lm_head; the expected range uses TP=1 timed on rank 0's
    threads (measured): from its matmul share of that time to all of it, over TP=1's step."""
    assert res["rank0"]["heads"] == 3 and res["rank0"]["num_heads"] == 5
    for kind, share in (("decode", res["rank0"]["share"]), ("prefill", res["prefill_rank0_share"])):
        scale = res[f"tp1_own_{kind}_ms"] / res["runs"][1][f"{kind}_ms"]
        assert res[f"{kind}_expected_range"] == pytest.approx((share * scale, scale))
    assert res["prefill_rank0_share"] < res["rank0"]["share"]     # prefill: one row samples
    own = res["threads_per_config"][2][0]
    if own != res["threads_per_config"][1][0]:          # TP=1 on one rank's threads is a row of the table
        assert f"TP=1（{own} スレッド）" in lab07.readout_html(res)


def test_every_rank_s_all_reduces_are_recorded(res):
    for kind, steps in (("prefill", 1), ("decode", 4)):          # repeats 1; decode: one untimed + num_steps 3
        s = res["calls"][kind]
        assert s["calls"] == steps * res["allreduces_per_step"] and s["ranks"] == 2
        assert sum(s["last_counts"]) == s["calls"] and 0 <= s["rank0_wait_share"] <= 1


def test_bare_all_reduce_is_timed():
    from course.labs import lab07_ping
    out = lab07_ping.bare_allreduce_us((1_280, 40_960), calls=20, warmup=2)
    assert set(out) == {1_280, 40_960}
    assert all(0 < v["median_us"] <= v["p90_us"] and v["calls"] == 20 for v in out.values())
    # blind reading 2026-12-07d ch07 #1: the last-arrived rank's time inside (the exchange's statistic), which
    # leaves out waiting for the peer, so it is at most rank 0's whole time in most calls
    assert all(v["rank0_median_us"] > 0 and v["load"]["during"] is not None for v in out.values())
    assert lab07_ping.floor_load(out) is out[1_280]["load"] and lab07_ping.floor_load(None) is None
