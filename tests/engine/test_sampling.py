"""Sampling: masks, seeds, stop conditions."""

from dataclasses import replace

import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.engine.llm_engine import LLMEngine
from minimal_engine.engine.sampler import apply_top_k, apply_top_p, sample


def test_top_k_keeps_k_largest():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]])
    out = apply_top_k(logits, 2)
    assert torch.isfinite(out).tolist() == [[False, True, False, True, False]]
    assert torch.equal(apply_top_k(logits, -1), logits)


def test_top_p_keeps_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    assert torch.isfinite(apply_top_p(logits, 0.5)).tolist() == [[True, False, False, False]]
    assert torch.isfinite(apply_top_p(logits, 0.7)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(apply_top_p(logits, 0.81)).tolist() == [[True, True, True, False]]
    shuffled = logits[:, [2, 0, 3, 1]]        # order in the vocabulary must not matter
    assert torch.isfinite(apply_top_p(shuffled, 0.7)).tolist() == [[False, True, False, True]]


def test_sampled_tokens_stay_inside_the_masks():
    logits = torch.randn(1, 50)
    allowed = set(torch.topk(logits, 3).indices[0].tolist())
    p = SamplingParams(temperature=1.5, top_k=3)
    gen = torch.Generator().manual_seed(0)
    draws = {sample(logits, [p], [gen])[0] for _ in range(200)}
    assert draws <= allowed and len(draws) > 1


def test_temperature_spreads_the_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    gen = torch.Generator().manual_seed(0)
    cold = [sample(logits, [SamplingParams(temperature=0.1)], [gen])[0] for _ in range(300)]
    hot = [sample(logits, [SamplingParams(temperature=5.0)], [gen])[0] for _ in range(300)]
    assert cold.count(0) > 290 and hot.count(0) < 200


def test_seeded_requests_reproduce_regardless_of_batch(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu")
    p = SamplingParams(temperature=1.0, top_p=0.9, seed=123, max_tokens=12, ignore_eos=True)
    alone = llm.generate(["吾輩は"], p, use_tqdm=False)[0].token_ids
    batch = llm.generate(["東京の空は", "吾輩は", "推論とは"],
                         [SamplingParams(temperature=1.0, max_tokens=12), p, SamplingParams(temperature=0.7, max_tokens=5)],
                         use_tqdm=False)
    assert batch[1].token_ids == alone
    other = llm.generate(["吾輩は"], SamplingParams(temperature=1.0, top_p=0.9, seed=124, max_tokens=12,
                                                  ignore_eos=True), use_tqdm=False)[0].token_ids
    assert other != alone


def test_stop_token_ids_and_eos(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu")
    greedy = llm.generate(["吾輩は"], SamplingParams(temperature=0, max_tokens=10, ignore_eos=True), use_tqdm=False)[0]
    stop_at = greedy.token_ids[3]
    first = greedy.token_ids.index(stop_at)
    out = llm.generate(["吾輩は"], SamplingParams(temperature=0, max_tokens=10, stop_token_ids=[stop_at]),
                       use_tqdm=False)[0]
    assert out.token_ids == greedy.token_ids[:first + 1] and out.finish_reason == "stop"
    # an engine whose model config makes the first greedy token its EOS: it stops there
    # unless ignore_eos
    e = llm.engine
    mc = replace(e.model_config, eos_token_ids=[greedy.token_ids[0]])
    engine = LLMEngine(llm.model, mc, llm.tokenizer, e.config, e.block_manager.num_blocks,
                       llm.dtype, llm.device)

    def run(params):
        engine.add_request("吾輩は", params)
        return [o for _ in range(20) for o in engine.step() if o.finished][0]
    out = run(SamplingParams(temperature=0, max_tokens=10))
    assert out.token_ids == greedy.token_ids[:1] and out.finish_reason == "stop"
    assert out.stop_reason is None
    out = run(SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))
    assert len(out.token_ids) == 10 and out.finish_reason == "length"


def test_generation_stops_at_max_model_len(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu", max_model_len=20)
    out = llm.generate([list(range(5, 20))], SamplingParams(temperature=0, max_tokens=50, ignore_eos=True),
                       use_tqdm=False)[0]
    assert len(out.prompt_token_ids) + len(out.token_ids) == 20 and out.finish_reason == "length"
