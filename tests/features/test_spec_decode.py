"""Speculative decoding (features/spec_decode/): greedy tokens identical to decoding without it (n-gram and draft model,
several requests at once, the default model and random models), rejected tokens' KV blocks given back, preemption,
the rejection sampler keeping the target's distribution (a statistical test on a small vocabulary), metrics,
bad configurations refused, and the bench option."""
import json

import pytest
import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.features.spec_decode.decoder import (DRAFT_MODEL, expected_tokens_per_step, ngram_propose, rejection_sample)
from tests.conftest import save_tiny_model

PROMPTS = ["吾輩は猫である。名前はまだ無い。吾輩は猫である。名前は", "山路を登りながら、こう考えた。",
           "むかしむかし、あるところに", "春はあけぼの。やうやう白くなりゆく山ぎは、"]
GREEDY = SamplingParams(temperature=0, max_tokens=24)


@pytest.fixture(scope="module")
def reference():
    llm = LLM(device="cpu", max_num_seqs=8)
    return [o.token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]


@pytest.mark.parametrize("spec", [{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3,
                                   "prompt_lookup_min": 1},
                                  {"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 2,
                                   "prompt_lookup_min": 1},
                                  {"method": "draft_model", "num_speculative_tokens": 4}])
def test_greedy_tokens_identical_on_the_default_model(reference, spec):
    llm = LLM(device="cpu", max_num_seqs=8, speculative_config=spec)
    outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.token_ids for o in outs] == reference
    st = llm.engine.speculator.stats()
    assert st["proposed"] > 0 and 0 < st["accepted"] <= st["proposed"]
    assert sum(o.metrics.num_draft_tokens for o in outs) == st["proposed"]
    # per draft position: the i-th draft is kept only if every one before it was, so the shares never rise with i,
    # and their sum over positions is the accepted drafts per step (mean accepted length - 1)
    by_pos = [x for x in st["acceptance_by_position"] if x is not None]
    assert len(st["acceptance_by_position"]) == spec["num_speculative_tokens"] and by_pos[0] > 0
    assert all(a >= b for a, b in zip(by_pos, by_pos[1:]))
    assert sum(by_pos) == pytest.approx(st["mean_accepted_length"] - 1)
    m = outs[0].metrics                          # the repetitive prompt: drafts are accepted, steps gain tokens
    if spec["method"] == "ngram":                # (the shipped draft model is weak: its rate is lower)
        assert m.acceptance_rate > 0.3 and m.mean_accepted_length > 1.5
    # fewer target steps than tokens: each verification step gave 1 + accepted tokens
    assert sum(o.metrics.num_spec_steps for o in outs) < sum(len(o.token_ids) for o in outs)


@pytest.fixture(scope="module")
def random_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec")
    return save_tiny_model(root / "target", "llama", seed=0), save_tiny_model(root / "draft", "llama", seed=1)


@pytest.mark.parametrize("method", ["ngram", "draft_model"])
def test_greedy_tokens_identical_on_a_random_model(random_models, method):
    target, draft = random_models
    prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [100, 3, 9], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [42]]
    sp = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    ref = LLM(str(target), device="cpu").generate(prompts, sp, use_tqdm=False)
    spec = {"method": method, "num_speculative_tokens": 3}
    if method == "draft_model":
        spec["model"] = str(draft)
    llm = LLM(str(target), device="cpu", speculative_config=spec)
    outs = llm.generate(prompts, sp, use_tqdm=False)
    assert [o.token_ids for o in outs] == [o.token_ids for o in ref]
    assert llm.engine.speculator.stats()["proposed"] > llm.engine.speculator.stats()["accepted"]   # rejections happened
    if method == "draft_model":   # the target as its own draft: every draft is accepted
        same = LLM(str(target), device="cpu", speculative_config=dict(spec, model=str(target)))
        outs = same.generate(prompts, sp, use_tqdm=False)
        assert [o.token_ids for o in outs] == [o.token_ids for o in ref]
        st = same.engine.speculator.stats()
        assert st["accepted"] == st["proposed"] > 0


def test_greedy_tokens_identical_on_a_synthetic_model():
    """A random model of a real shape (synthetic.py, llama-125m) with n-gram drafts, several requests at once.
    float32: in bf16 the rows of a step are rounded differently with the step's row count where the CPU has no
    pre-packed bf16 kernel (AVX2-only x86: plain bf16 GEMM; measured with ONEDNN_MAX_CPU_ISA=AVX2), and the
    verify steps have k+1 rows per request, so near-ties of a random model could flip: numerics, not speculation."""
    kw = dict(device="cpu", dtype="float32", max_model_len=64, num_kv_blocks=32)
    prompts = [[11, 12, 13, 11, 12, 13, 11, 12], [7, 8, 9, 10], [500, 600, 500, 600, 500]]
    sp = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    ref = LLM("synthetic:llama-125m", **kw).generate(prompts, sp, use_tqdm=False)
    llm = LLM("synthetic:llama-125m", **kw, speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert [o.token_ids for o in llm.generate(prompts, sp, use_tqdm=False)] == [o.token_ids for o in ref]
    assert llm.engine.speculator.stats()["proposed"] > 0


def test_rejected_slots_are_released_and_preemption_keeps_tokens():
    """A small KV pool (preemptions) and k=8 drafts over blocks of 4: after every step no request holds more blocks
    than its tokens need (the rejected drafts' blocks went back), and the tokens equal those without speculation."""
    kw = dict(device="cpu", block_size=4, num_kv_blocks=24, max_num_seqs=4)
    prompts = PROMPTS * 2
    sp = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    ref = LLM(**kw).generate(prompts, sp, use_tqdm=False)
    llm = LLM(**kw, speculative_config={"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 2,
                                        "prompt_lookup_min": 1})
    engine, bm = llm.engine, llm.engine.block_manager
    ids = [engine.add_request(p, sp) for p in prompts]
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
        for seq in engine.scheduler.running:
            assert len(seq.block_table) <= bm.blocks_needed(len(seq)), seq
        held = sum(len(s.block_table) for s in engine.scheduler.running)
        assert bm.num_free_blocks == bm.num_blocks - held
    assert [done[i].token_ids for i in ids] == [o.token_ids for o in ref]
    assert sum(done[i].metrics.num_preemptions for i in ids) > 0
    assert engine.speculator.stats()["proposed"] > engine.speculator.stats()["accepted"] > 0
    assert bm.num_free_blocks == bm.num_blocks


def tv(samples: torch.Tensor, p: torch.Tensor) -> float:
    """Total-variation distance between the empirical distribution of samples and p."""
    emp = torch.bincount(samples, minlength=p.numel()).double() / samples.numel()
    return 0.5 * (emp - p.double()).abs().sum().item()


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("one_hot", [False, True])
def test_rejection_sampler_keeps_the_target_distribution(k, one_hot):
    """Vocabulary of 6, 20,000 independent rows, fixed seed: the first output token (and the second, where the
    first draft was accepted) follows the target p within total variation 0.02, although the drafts follow q.
    (The sampling error of 20k draws over 6 values is ~0.01 in TV.) A rule that always accepted would give q."""
    g = torch.Generator().manual_seed(0)
    n, v = 20_000, 6
    p = torch.tensor([[0.40, 0.25, 0.15, 0.10, 0.07, 0.03], [0.05, 0.05, 0.10, 0.20, 0.25, 0.35],
                      [1 / 6] * 6, [0.3, 0.3, 0.1, 0.1, 0.1, 0.1]])[:k + 1]                   # [k+1, V]
    q = torch.tensor([[0.05, 0.10, 0.15, 0.20, 0.20, 0.30], [0.30, 0.30, 0.10, 0.10, 0.10, 0.10],
                      [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]])[:k]                                     # [k, V]
    if one_hot:           # n-gram: a deterministic proposal (always token 1 here), q one-hot on it
        drafts = torch.ones(n, k, dtype=torch.long)
    else:
        drafts = torch.multinomial(q, n, replacement=True, generator=g).T                      # [n, k] from q
    tokens, accepted = rejection_sample(p.expand(n, -1, -1), None if one_hot else q.expand(n, -1, -1), drafts, g)
    assert tv(tokens[:, 0], p[0]) < 0.02
    second = accepted >= 1
    assert second.sum() > 2000 and tv(tokens[second, 1], p[1]) < 0.02
    if not one_hot:
        assert tv(drafts[:, 0], p[0]) > 0.3            # the control: the drafts alone are far from p
    rate = (accepted >= 1).double().mean().item()      # acceptance rate of the first draft = sum min(p, q)
    expected = (torch.minimum(p[0], q[0]).sum() if not one_hot else p[0, 1]).item()
    assert abs(rate - expected) < 0.02


def test_expected_tokens_per_step_formula():
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert abs(expected_tokens_per_step(0.8, 4) - (1 + 0.8 + 0.64 + 0.512 + 0.4096)) < 1e-12


def test_ngram_propose():
    toks = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert ngram_propose(toks, 2, 3) == [7, 8]            # the most recent earlier 1 2 3 with k tokens after it
    assert ngram_propose(toks, 4, 3) == [7, 8, 1, 2]
    assert ngram_propose([4, 5, 6], 3, 3) == []
    assert ngram_propose([5, 1, 5], 3, 3, n_min=2) == []
    assert ngram_propose([5, 1, 5], 3, 3) == [1, 5]


def test_sampling_with_speculation_is_seeded_and_counted():
    llm = LLM(device="cpu", speculative_config={"method": "draft_model", "num_speculative_tokens": 3})
    sp = SamplingParams(temperature=0.8, top_k=50, max_tokens=20, seed=7, ignore_eos=True)
    a = llm.generate(PROMPTS[:2], sp, use_tqdm=False)
    b = llm.generate(PROMPTS[:2], sp, use_tqdm=False)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert all(len(o.token_ids) == 20 for o in a)
    assert all(o.metrics.num_draft_tokens > 0 for o in a)


def test_shipped_draft_model_matches_the_default_tokenizer():
    cfg = json.loads((DRAFT_MODEL / "config.json").read_text())
    target = json.loads((DRAFT_MODEL.parent / "default_model" / "config.json").read_text())
    assert cfg["vocab_size"] == target["vocab_size"] and cfg["num_hidden_layers"] < target["num_hidden_layers"]
    assert (DRAFT_MODEL / "tokenizer.json").read_bytes() == (DRAFT_MODEL.parent / "default_model" /
                                                             "tokenizer.json").read_bytes()
    assert (DRAFT_MODEL / "model.safetensors").stat().st_size < 16 << 20
    assert (DRAFT_MODEL / "README.md").is_file()


@pytest.mark.parametrize("given, window", [({}, (5, 5)), ({"prompt_lookup_max": 3}, (3, 3)),
                                           ({"prompt_lookup_min": 2}, (2, 2)),
                                           ({"prompt_lookup_min": 1, "prompt_lookup_max": 3}, (1, 3))])
def test_ngram_window_defaults_follow_vllm(given, window):
    """vLLM's SpeculativeConfig (vllm/config/speculative.py, ngram branch): neither given -> 5 and 5, only one given ->
    the other equals it. So {"prompt_lookup_max": 3} means 3-grams only, not a 3 -> 1 fallback."""
    llm = LLM(device="cpu", num_kv_blocks=8,
              speculative_config={"method": "ngram", "num_speculative_tokens": 2, **given})
    sp = llm.engine.speculator
    assert (sp.n_min, sp.n_max) == window


@pytest.mark.parametrize("spec, message", [
    ({"method": "medusa", "num_speculative_tokens": 2}, "method must be one of"),
    ({"method": "ngram", "num_speculative_tokens": 2, "model": "x"}, "unknown keys"),
    ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 17}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 0}, "prompt_lookup_max"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 3, "prompt_lookup_max": 2}, "prompt_lookup_min"),
    ("ngram", "must be a dict"),
])
def test_bad_configs_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        LLM(device="cpu", num_kv_blocks=8, speculative_config=spec)


def test_unsupported_combinations_are_refused(random_models):
    ngram = {"method": "ngram", "num_speculative_tokens": 2}
    with pytest.raises(ValueError, match="vocab_size"):
        LLM(device="cpu", num_kv_blocks=8,
            speculative_config={"method": "draft_model", "num_speculative_tokens": 2, "model": str(random_models[1])})
    for kw in (dict(batching="static"), dict(enable_prefix_caching=True), dict(cuda_graphs=True)):
        with pytest.raises(ValueError, match="does not support"):
            LLM(device="cpu", num_kv_blocks=8, speculative_config=ngram, **kw)
    llm = LLM(device="cpu", num_kv_blocks=8, speculative_config=ngram)
    for sp in (SamplingParams(repetition_penalty=1.2), SamplingParams(min_tokens=2), SamplingParams(logprobs=2),
               SamplingParams(prompt_logprobs=1)):
        with pytest.raises(ValueError, match="not supported with speculative decoding"):
            llm.generate("吾輩は", sp, use_tqdm=False)


def test_bench_reports_speculation_against_no_speculation(tmp_path, capsys):
    from minimal_engine.bench.__main__ import main as bench_main
    rc = bench_main(["--device", "cpu", "--input-len", "16", "--output-len", "8", "--num-prompts", "2",
                     "--no-roofline", "--no-tqdm", "--out", str(tmp_path),
                     "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}'])
    assert rc == 0
    text = capsys.readouterr().out
    assert "no_speculation" in text and "speculative decoding (ngram, k=2)" in text and "acceptance rate" in text
    rows = json.loads((tmp_path / "bench.json").read_text())["results"]
    ours = next(r for r in rows if r["backend"] == "minimal_engine")
    assert ours["spec_proposed"] >= ours["spec_accepted"] >= 0 and ours["num_speculative_tokens"] == 2
    assert bench_main(["--device", "cpu", "--speculative-config", "{bad"]) == 2


def test_speculation_on_int8_weights_and_int8_kv_keeps_their_greedy_tokens():
    """Chapter 8 on top of chapter 6: speculation changes no token of the quantized model it runs on. Float32
    activations: in bf16 a verification step of 20 rows takes the dequantize+matmul kernel where 4-row decode
    steps take int8pack (quantization.py), and bf16 rounding then differs with the batch shape (no engine is
    batch-invariant in bf16), which would test the kernels' rounding rather than speculation."""
    kw = dict(device="cpu", dtype="float32", quantization="int8", kv_cache_dtype="int8", max_num_seqs=8)
    expected = [o.token_ids for o in LLM(**kw).generate(PROMPTS, GREEDY, use_tqdm=False)]
    llm = LLM(**kw, speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert [o.token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)] == expected
    assert llm.engine.speculator.stats()["accepted"] > 0
