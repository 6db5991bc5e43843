"""Automatic prefix caching (block_manager.py, prefix_cache.py) and SamplingParams(n > 1).

Bookkeeping is tested on the BlockManager alone (hash chain, reference counts, LRU eviction); the engine
tests check that greedy tokens are the same with caching on and off in every situation that moves a request's
first computed position (alone, mixed batches, chunked prefill, preemption, 0 / part / all blocks shared),
that hits are counted, and that no block leaks."""
import pytest

from minimal_engine import LLM, SamplingParams
from minimal_engine.engine.block_manager import BlockManager
from minimal_engine.engine.sequence import Sequence

GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
BASE = list(range(10, 50))                                   # 40 tokens = 10 blocks of 4
PROMPTS = [BASE + [1, 2, 3],            # first: nothing cached yet
           BASE + [7, 8],               # shares all 10 full blocks of the first
           BASE[:20] + [99] * 9,        # shares 5 blocks, then differs
           [5, 6, 7],                   # shorter than a block: nothing to share
           list(BASE),                  # all of its blocks cached, but the last token is recomputed
           [3] + BASE,                  # same tokens shifted by one: no block hash matches
           BASE + [9]]                  # 40 tokens cached, one computed: a decode-shaped step


def seq(rid, tokens):
    return Sequence(str(rid), None, tokens, SamplingParams())


def admit(bm, s):
    """What the scheduler does for a waiting request: take the cached prefix, allocate the rest."""
    s.num_computed_tokens = bm.take_cached(s)
    bm.allocate(s, len(s))
    return s.num_computed_tokens


def test_hash_chain_lookup_and_reference_counts():
    bm = BlockManager(num_blocks=20, block_size=4, enable_prefix_caching=True)
    a = seq("a", list(range(12)))                         # 3 full blocks
    assert admit(bm, a) == 0
    b = seq("b", list(range(12)) + [50])                  # a's 3 blocks, then one token to compute
    assert bm.num_cached_tokens(b) == 12 and admit(bm, b) == 12
    assert b.block_table[:3] == a.block_table and all(bm.ref_counts[x] == 2 for x in a.block_table)
    c = seq("c", list(range(12)))                         # the whole prompt cached: its last block is recomputed
    assert admit(bm, c) == 8 and c.block_table[:2] == a.block_table[:2] and c.block_table[2] != a.block_table[2]
    d = seq("d", [0, 1, 2, 3, 9, 9, 9, 9, 8, 9, 10, 11, 5])   # block 1 differs, so block 2 cannot match either
    assert admit(bm, d) == 4
    assert bm.cache.queries == 12 + 13 + 12 + 13 and bm.cache.hits == 12 + 8 + 4
    for s in (a, b, c, d):
        bm.free(s)
    snap = bm.snapshot()
    assert bm.num_free_blocks == 20 and snap["owners"] == {} and not any(bm.ref_counts)
    assert len(snap["cached_free"]) == len(snap["cached"]) > 0
    e = seq("e", list(range(12)) + [7])                   # cached blocks survive their owners
    assert admit(bm, e) == 12


def test_snapshot_shows_owners_and_shared_blocks():
    bm = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=True)
    a, b = seq("a", list(range(9))), seq("b", list(range(8)) + [42])
    admit(bm, a), admit(bm, b)
    snap = bm.snapshot()
    assert snap["owners"]["a"][:2] == snap["owners"]["b"][:2] and snap["ref_counts"][snap["owners"]["a"][0]] == 2
    assert len(snap["free"]) == 8 - 4 and snap["cached_free"] == []


def test_lru_eviction_order():
    """Freed cached blocks wait at the back of the free queue; the least recently freed is evicted first,
    and within a request its tail goes before its prefix."""
    bm = BlockManager(num_blocks=5, block_size=2, enable_prefix_caching=True)
    a, b = seq("a", [1, 2, 3, 4, 0]), seq("b", [5, 6, 0])   # a: 2 full blocks (+1 token), b: 1
    admit(bm, a)
    admit(bm, b)
    a_blocks, b_blocks = list(a.block_table), list(b.block_table)
    bm.free(a)
    bm.free(b)
    assert list(bm.free_blocks) == [a_blocks[2], a_blocks[1], a_blocks[0], b_blocks[1], b_blocks[0]]
    c = seq("c", [9, 9, 9, 9, 9])                          # needs 3 blocks: evicts the oldest cached ones
    admit(bm, c)
    assert bm.num_cached_tokens(seq("a2", [1, 2, 3, 4, 0])) == 0     # a's blocks were evicted first
    assert bm.num_cached_tokens(seq("b2", [5, 6, 0])) == 2           # b's block, freed later, is still cached


def test_caching_off_caches_nothing():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = seq("a", list(range(9)))
    admit(bm, a)
    bm.free(a)
    assert bm.num_cached_tokens(seq("b", list(range(9)))) == 0 and bm.snapshot()["cached"] == []
    assert bm.prefix_cache_stats() == {"queries": 0, "hits": 0, "hit_rate": 0.0}


# ---- the engine: same tokens on and off ------------------------------------------------------------------
@pytest.fixture(scope="module")
def reference(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu", block_size=4)
    return [o.token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]


def cached_llm(llama_dir, **kw):
    return LLM(llama_dir, dtype="float32", device="cpu", block_size=4, enable_prefix_caching=True, **kw)


def assert_no_leak(llm):
    bm = llm.engine.block_manager
    snap = bm.snapshot()
    assert bm.num_free_blocks == bm.num_blocks and snap["owners"] == {} and not any(snap["ref_counts"])
    assert sorted(snap["free"] + snap["cached_free"]) == list(range(bm.num_blocks))
    assert not llm.engine.has_unfinished_requests()


@pytest.mark.parametrize("kw", [{}, {"max_num_batched_tokens": 8}, {"cuda_graphs": True}],
                         ids=["one-step-prefill", "chunked-prefill", "static-decode-buffers"])
def test_same_tokens_alone_and_mixed(llama_dir, reference, kw):
    llm = cached_llm(llama_dir, **kw)
    alone = [llm.generate(p, GREEDY, use_tqdm=False)[0] for p in PROMPTS]      # each after the earlier ones
    assert [o.token_ids for o in alone] == reference
    assert [o.num_cached_tokens for o in alone] == [0, 40, 20, 0, 36, 0, 40]
    mixed = llm.generate(PROMPTS, GREEDY, use_tqdm=False)                   # all in one batch, cache warm
    assert [o.token_ids for o in mixed] == reference
    assert all(o.num_cached_tokens > 0 for o in mixed[:3])
    stats = llm.engine.block_manager.prefix_cache_stats()
    assert stats["hits"] >= 96 and 0 < stats["hit_rate"] < 1 and stats["hits"] < stats["queries"]
    assert_no_leak(llm)


def test_same_tokens_cold_batch(llama_dir, reference):
    """All prompts in the first batch: later ones reuse blocks the earlier ones compute in the same step."""
    llm = cached_llm(llama_dir)
    outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.token_ids for o in outs] == reference
    assert [o.num_cached_tokens for o in outs][:3] == [0, 40, 20]
    assert_no_leak(llm)


def test_same_tokens_after_preemption(llama_dir, reference):
    llm = cached_llm(llama_dir, num_kv_blocks=16)
    outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.token_ids for o in outs] == reference
    assert sum(o.metrics.num_preemptions for o in outs) > 0, "the pool was meant to be too small"
    assert_no_leak(llm)


def test_abort_releases_shared_blocks(llama_dir):
    llm = cached_llm(llama_dir)
    llm.generate(BASE + [1], GREEDY, use_tqdm=False)
    stream = llm.stream(BASE + [2], SamplingParams(temperature=0, max_tokens=50, ignore_eos=True))
    first = next(stream)
    assert first.num_cached_tokens == 40
    stream.close()                                       # the caller leaves: the request is aborted
    assert_no_leak(llm)


def test_n_completions_share_the_prompt(llama_dir, reference):
    llm = cached_llm(llama_dir)
    out = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, n=3),
                       use_tqdm=False)
    assert len(out) == 1 and len(out[0].outputs) == 3
    assert [c.token_ids for c in out[0].outputs] == [reference[0]] * 3
    assert [c.num_cached_tokens for c in out[0].outputs] == [0, 40, 40]      # the 2nd and 3rd reuse the 1st's
    sampled = llm.generate(PROMPTS[3], SamplingParams(temperature=1.0, max_tokens=8, seed=7, n=3), use_tqdm=False)
    texts = [tuple(c.token_ids) for c in sampled[0].outputs]
    assert len(set(texts)) > 1, "seeds seed, seed+1, ... give different samples"
    one = llm.generate(PROMPTS[3], SamplingParams(temperature=1.0, max_tokens=8, seed=8), use_tqdm=False)[0]
    assert tuple(one.token_ids) == texts[1]
    assert_no_leak(llm)
    with pytest.raises(ValueError, match="n must be"):
        SamplingParams(n=0)


def test_server_reports_cached_tokens(llama_dir):
    """usage.prompt_tokens_details.cached_tokens over HTTP, with and without streaming."""
    import httpx
    import json

    from minimal_engine.serve.app import ServerThread, build_app
    llm = cached_llm(llama_dir)
    body = {"model": "tiny", "prompt": BASE + [1], "max_tokens": 3, "temperature": 0}
    with ServerThread(build_app(llm, max_queue=8, served_model_name="tiny")) as s:
        first = httpx.post(s.url + "/v1/completions", json=body, timeout=60).json()
        again = httpx.post(s.url + "/v1/completions", json=body, timeout=60).json()
        streamed = httpx.post(s.url + "/v1/completions", timeout=60, json={
            **body, "prompt": BASE + [2], "stream": True, "stream_options": {"include_usage": True}})
        usage = [json.loads(line[6:]) for line in streamed.text.splitlines()
                 if line.startswith("data: {")][-1]["usage"]
    assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert again["usage"]["prompt_tokens_details"] == {"cached_tokens": 40} and again["usage"]["prompt_tokens"] == 41
    assert usage["prompt_tokens_details"] == {"cached_tokens": 40}
    assert first["choices"][0]["text"] == again["choices"][0]["text"]


def test_bench_shared_prefix_runs_both_engines(llama_dir):
    """bench --shared-prefix-len: same prefix in every request, caching on hits it, off never does; the ratio
    is reported (its value is a timing: not asserted)."""
    from minimal_engine.bench.prefix import run_prefix_compare, shared_prefix_requests
    reqs = shared_prefix_requests(6, 24, 5, 3, vocab_size=200, seed=3)
    assert all(r.prompt_ids[:24] == reqs[0].prompt_ids[:24] for r in reqs) and reqs[0].prompt_ids != reqs[1].prompt_ids
    off = LLM(llama_dir, dtype="float32", device="cpu", block_size=4)
    on = cached_llm(llama_dir)
    res = run_prefix_compare(off, on, reqs, max_concurrency=2, repeats=2)
    assert [r["backend"] for r in res["runs"]] == ["prefix_caching_off", "prefix_caching_on"] * 2
    assert len(res["ttft_ratios"]) == 2 and res["median_ttft_ratio"] > 0
    assert all(r["prefix_cache_hit_rate"] > 0.5 for r in res["runs"][1::2])
    assert off.engine.block_manager.cache is None
    assert_no_leak(on)
    assert on.engine.block_manager.reset_prefix_cache() and on.engine.block_manager.snapshot()["cached"] == []
