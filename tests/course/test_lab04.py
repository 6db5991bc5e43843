"""Chapter 4: the fragmentation simulation, the block pool picture from engine snapshots, lab 4's prefix
experiment and capacity rows, and the chapter's calculators."""
import pytest

from course.labs import lab04
from course.panels import build as build_panel
from course.demos import block_pool, kv_sim
from minimal_engine import calculators as calc


def test_calculators_by_hand():
    assert calc.padded_slots(100, 16) == 112 and calc.last_block_waste(100, 16) == 12
    assert calc.last_block_waste(96, 16) == 0
    assert calc.cached_prefix_tokens(1000, 16) == 992 and calc.cached_prefix_tokens(10, 16) == 0
    assert calc.prefix_hit_rate(256, 64, 16, 10) == pytest.approx(9 * 256 / (10 * 320))
    assert calc.prefix_hit_rate(256, 0, 16, 2) == pytest.approx(240 / 512)   # the last prompt token is computed
    assert calc.contiguous_users(65536, 8192) == 8 and calc.paged_users(65536, 700, 16) == 65536 // 704
    assert calc.paged_over_contiguous(65536, 8192, 700) == pytest.approx((65536 // 704) / 8)
    with pytest.raises(ValueError):
        calc.padded_slots(10, 0)


def test_stream_is_seeded_and_respects_limits():
    a, b = kv_sim.request_stream(50, seed=3), kv_sim.request_stream(50, seed=3)
    assert a == b and a != kv_sim.request_stream(50, seed=4)
    for r in a:
        assert 1 <= r["output_len"] <= r["max_tokens"] and r["prompt_len"] + r["max_tokens"] <= 4096
    # tightest: the same lengths, and max_tokens is the smallest choice that fits (never above the random draw)
    t = kv_sim.request_stream(50, seed=3, tightest=True)
    assert [(r["prompt_len"], r["output_len"]) for r in t] == [(r["prompt_len"], r["output_len"]) for r in a]
    assert all(x["max_tokens"] <= r["max_tokens"] for x, r in zip(t, a)) and t != a
    assert all(x["max_tokens"] == min([m for m in (256, 512, 1024, 2048) if m >= x["output_len"]
                                       and x["prompt_len"] + m <= 4096] or [4096 - x["prompt_len"]]) for x in t)


def test_paging_fits_more_requests_and_wastes_only_the_last_block():
    reqs = kv_sim.request_stream(120, seed=0)
    sim = kv_sim.compare(reqs, pool_tokens=32_768, block_size=16)
    cmax, ctok, paged = (sim[k]["summary"] for k in ("contiguous_max_model_len", "contiguous_max_tokens", "paged"))
    for s in (cmax, ctok, paged):
        assert s["finished"] == 120
    assert cmax["peak_running"] == 32_768 // 4096            # max_model_len reservations: 8 at a time
    assert cmax["mean_external_share"] == 0                   # equal-sized reservations leave no unusable gap
    assert ctok["mean_external_share"] > 0                    # different sizes do
    assert paged["mean_running"] > ctok["mean_running"] > cmax["mean_running"]
    assert paged["steps"] < ctok["steps"] < cmax["steps"]
    t = sim["paged"]["trace"]              # at most one block of empty slots per request (room for its next token)
    assert all(i <= 16 * r for i, r in zip(t["internal"], t["running"]))
    assert all(u <= 32_768 for u in t["reserved"])


def test_paged_preempts_when_the_pool_runs_out_and_still_finishes():
    reqs = [{"index": i, "prompt_len": 20, "output_len": 60, "max_tokens": 64, "arrival_step": 0} for i in range(6)]
    s = kv_sim.simulate(reqs, pool_tokens=16 * 12, policy="paged", block_size=16)["summary"]
    assert s["finished"] == 6 and s["preemptions"] > 0
    with pytest.raises(ValueError):
        kv_sim.simulate(reqs, 1024, policy="buddy")


def test_pool_picture_shows_sharing_and_cached_blocks():
    system = list(range(100, 108))                          # 2 full blocks of 4
    reqs = [{"prompt": system + [200 + i, 300 + i], "max_tokens": m, "at_step": s}
            for i, (m, s) in enumerate(((4, 0), (3, 1), (3, 8)))]
    snaps = block_pool.pool_steps(reqs, block_size=4, num_blocks=12)
    assert any(len(h) > 1 for s in snaps for h in s["holders"])      # the system prompt's blocks are shared
    assert snaps[-1]["owner"] == [None] * 12                          # all finished: nothing held (no leak)
    assert snaps[-1]["cached_free"]                                   # but full blocks stay cached
    late = next(s for s in snaps if s["step"] == 8)
    assert late["cached_tokens"].get(2) == 8                          # the late request reuses both blocks
    assert block_pool.plot_pool(snaps) is not None


def test_prefix_lab_measures_both_and_counts_hits():
    res = lab04.run_prefix_lab(shared_len=64, num_requests=3, repeats=1, load_check=False)
    assert res["available"]
    assert res["cached_tokens"] == [0, 64, 64]
    assert res["hit_rate"] == pytest.approx(res["expected_hit_rate"])
    assert res["counter_hit_rate"] == pytest.approx(res["expected_hit_rate"])     # the engine's hit counters
    assert res["ttft_off_ms"] > 0 and res["ttft_on_ms"] > 0 and res["ratio"] > 0
    again = lab04.run_prefix_lab(shared_len=64, num_requests=3, repeats=1, load_check=False)
    assert again["cached_tokens"][0] == 0                             # a fresh shared prompt every run
    history = []
    lab04.add_run(history, res)
    assert "64" in lab04.history_html(history) and lab04.history_csv(history, "me").startswith("learner,run")
    assert "TTFT" in lab04.readout_html(res)
    with pytest.raises(ValueError):
        lab04.run_prefix_lab(shared_len=lab04.SHARED_LEN_RANGE[1] + 1, load_check=False)


def test_capacity_rows_use_the_calculators():
    rows = lab04.capacity_rows(["Llama 3.1 8B", "Llama 3.3 70B"], ["H100"], [32_768])
    assert rows[0]["users"] == calc.max_concurrent_users("Llama 3.1 8B", 32_768, calc.gpu_memory_bytes("H100"), "bf16",
                                                          calc.weight_bytes("Llama 3.1 8B")) == 14
    assert rows[1]["users"] == 0 and "重みが入らない" in lab04.capacity_html(rows)
    h200 = lab04.capacity_html(lab04.capacity_rows(["Llama 3.3 70B"], ["H200"], [4_096]))
    assert "141.2" in h200 and "141.0" in h200 and "重みが入らない" in h200     # weights just above the memory
    # the weights fit on a B200, but one 131k request's KV does not: a different "nothing fits"
    b200 = lab04.capacity_rows(["Llama 3.3 70B"], ["B200"], [131_072])
    assert b200[0]["users"] == 0 and b200[0]["weights_fit"]
    assert "1件も入らない" in lab04.capacity_html(b200) and "重みが入らない" not in lab04.capacity_html(b200)


def test_reserved_slots_split_into_written_later_and_never_written():
    """Kwon et al. (SOSP 2023, Fig. 2): 'reserved' (written later) apart from internal fragmentation."""
    one = [{"index": 0, "prompt_len": 100, "output_len": 50, "max_tokens": 256, "arrival_step": 0}]
    t = kv_sim.simulate(one, 4096, "contiguous", reserve="max_model_len")["trace"]
    assert t["used"][0] == 101 and t["future"][0] == 49                      # step 0 wrote the first token
    assert t["internal"][0] == 4096 - 150                                    # never written: beyond the output
    t = kv_sim.simulate(one, 4096, "contiguous", reserve="max_tokens")["trace"]
    assert t["internal"][0] == 256 - 50
    sim = kv_sim.compare(kv_sim.request_stream(120, seed=0), pool_tokens=32_768, block_size=16)
    for v in sim.values():
        tr = v["trace"]
        assert all(u + f + i == r for u, f, i, r in zip(tr["used"], tr["future"], tr["internal"], tr["reserved"]))
        assert min(tr["future"]) >= 0 and min(tr["internal"]) >= 0
    paged = sim["paged"]["trace"]          # paging: only a finishing request's last-block remainder is never written
    assert all(i <= 15 * r for i, r in zip(paged["internal"], paged["running"]))


def test_pool_picture_keeps_the_final_step_blocks():
    """A request that finishes in a step has freed its blocks before the snapshot; last_blocks keeps them."""
    system = list(range(100, 108))
    reqs = [{"prompt": system + [200, 300, 400], "max_tokens": 3, "at_step": 0}]
    snaps = block_pool.pool_steps(reqs, block_size=4, num_blocks=8)
    end = next(s for s in snaps if s["finished"])
    held = {b for s in snaps for b, h in enumerate(s["holders"]) if h}
    assert end["last_blocks"][0][:3] == [0, 1, 2] and len(end["last_blocks"][0]) == 4   # 11 + 2 tokens: 4 blocks
    assert set(end["last_blocks"][0]) - held                          # the 4th block never shows as held


def test_panel_runs_and_adds_history_row():
    pytest.importorskip("ipywidgets")
    app = build_panel(4, shared_len=32, num_requests=2, repeats=1)
    assert app.sliders["shared_len"].description == "共有プロンプト長"
    assert app.on_run() is not None
    assert app.history[-1]["shared_len"] == 32 and "lab-readout" in app.readout._dom_classes


def test_busy_phase_averages_exclude_the_drain():
    """The lesson's 'while requests wait' columns: paging runs more requests then, and fills the pool."""
    sim = kv_sim.compare(kv_sim.request_stream(120, seed=0), pool_tokens=32_768, block_size=16)
    paged, cmax = sim["paged"]["summary"], sim["contiguous_max_model_len"]["summary"]
    assert 0 < paged["busy_steps"] < paged["steps"]
    assert paged["busy_running"] > paged["mean_running"]               # the drain tail lowers the whole-run mean
    assert paged["busy_used_share"] > paged["mean_used_share"]
    assert 7.5 < cmax["busy_running"] <= 32_768 // 4096              # ~8 reservations while someone waits


def test_cached_free_block_at_the_head_is_evicted_before_uncached_ones():
    """What quiz 04 `eviction` and lesson 4 Q3 say: one free queue, taken from the head, cached or not."""
    from minimal_engine.engine.block_manager import BlockManager
    from minimal_engine import SamplingParams
    from minimal_engine.engine.sequence import Sequence as _Seq

    def Sequence(rid, prompt, ids):
        return _Seq(rid, prompt, ids, SamplingParams(max_tokens=1))
    bm = BlockManager(4, 4, enable_prefix_caching=True)
    a = Sequence("a", None, list(range(100, 108)))                     # 2 full blocks: 0 and 1, both cached
    bm.allocate(a, 8)
    bm.free(a)                                                         # tail first: queue 2, 3, 1, 0
    b = Sequence("b", None, [7, 8])                                    # a partial block, never cached
    bm.allocate(b, 2)
    assert bm.cache.block_hash.keys().isdisjoint(b.block_table)
    bm.free(b)
    c = Sequence("c", None, [9])
    bm.allocate(c, 1)
    d = Sequence("d", None, [10])
    bm.allocate(d, 1)
    uncached_free = [x for x in bm.free_blocks if x not in bm.cache.block_hash]
    assert d.block_table[0] in {0, 1} and uncached_free                # a cached block went while uncached waited
