"""The engine's numbers against transformers on the same weights (float32, CPU).

The models here have random biases and norm weights (transformers initialises them to 0 and 1, so a bias or
a q/k norm the loader dropped or misplaced would still match); the Llama one also has attention biases."""
import shutil

import pytest
import torch

from conftest import hf_greedy
from minimal_engine import LLM, SamplingParams

PROMPTS = [[5, 17, 33, 100, 7, 9, 200, 45, 3, 80, 81, 82, 90], [11, 12], list(range(40, 90)), [300, 2, 250] * 7]
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def randomise_biases_and_norms(src, dst, arch: str):
    """A copy of the tiny model whose biases and norm weights are random (Llama: with attention biases too)."""
    import transformers
    cfg = transformers.AutoConfig.from_pretrained(src)
    torch.manual_seed(1)
    if arch.startswith("llama"):
        cfg.attention_bias = True                 # q/k/v and o_proj biases
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    changed = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(torch.randn_like(p) * 0.5)
                changed += 1
            elif "norm" in name:
                p.copy_(1 + torch.randn_like(p) * 0.3)
                changed += 1
    assert changed > 0
    model.save_pretrained(dst)
    for f in src.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, dst / f.name)
    return dst


@pytest.fixture(scope="module")
def random_model(tiny_model, tmp_path_factory):
    arch, folder = tiny_model
    return arch, randomise_biases_and_norms(folder, tmp_path_factory.mktemp(f"random_{arch}"), arch)


@pytest.fixture(scope="module")
def reference(random_model):
    arch, folder = random_model
    return folder, [hf_greedy(folder, p, GREEDY.max_tokens) for p in PROMPTS]


def assert_all_free(llm):
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks, "KV blocks leaked"
    assert not llm.engine.has_unfinished_requests()


def test_prefill_logits_match_transformers(random_model):
    import transformers
    from minimal_engine.engine.scheduler import ScheduledSeq, SchedulerOutput
    from minimal_engine.engine.sequence import Sequence
    arch, folder = random_model
    llm = LLM(folder, dtype="float32", device="cpu")
    ids = PROMPTS[2]
    seq = Sequence("x", None, ids, GREEDY)
    llm.engine.block_manager.allocate(seq, len(ids))
    step = llm.engine.runner.prepare(SchedulerOutput([ScheduledSeq(seq, 0, len(ids))]))
    input_ids, batch = step.input_ids, step.batch
    batch.logits_indices = torch.arange(len(ids))             # ask for every position's logits
    with torch.inference_mode():
        ours = llm.engine.runner.model(input_ids, batch, llm.engine.runner.kv_caches)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_greedy_batch_and_alone_equal_transformers(reference):
    folder, expected = reference
    llm = LLM(folder, dtype="float32", device="cpu")
    together = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.token_ids for o in together] == expected
    for p, exp in zip(PROMPTS, expected):
        assert llm.generate([p], GREEDY, use_tqdm=False)[0].token_ids == exp
    assert_all_free(llm)


def test_greedy_with_preemption(reference):
    folder, expected = reference
    # 20 blocks of 4 tokens (80 slots): not enough for all four requests at once, so some are preempted and recomputed
    llm = LLM(folder, dtype="float32", device="cpu", block_size=4, num_kv_blocks=20)
    outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.token_ids for o in outs] == expected
    assert sum(o.metrics.num_preemptions for o in outs) > 0, "this pool size should force preemption"
    assert_all_free(llm)


def test_greedy_with_chunked_prefill(reference):
    folder, expected = reference
    llm = LLM(folder, dtype="float32", device="cpu", max_num_batched_tokens=7)
    outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.token_ids for o in outs] == expected
    assert_all_free(llm)


def test_different_max_tokens_share_a_batch(reference):
    folder, expected = reference
    llm = LLM(folder, dtype="float32", device="cpu")
    lengths = [3, 24, 1, 10]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in lengths]
    outs = llm.generate(PROMPTS, params, use_tqdm=False)
    for o, exp, n in zip(outs, expected, lengths):
        assert o.token_ids == exp[:n]
        assert o.finish_reason == "length"
    assert_all_free(llm)


def test_text_prompts_and_metrics(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu")
    outs = llm.generate(["吾輩は猫である。", [5, 6, 7]], SamplingParams(temperature=0, max_tokens=5, ignore_eos=True),
                        use_tqdm=False)
    a, b = outs
    assert a.prompt == "吾輩は猫である。" and a.prompt_token_ids == llm.tokenizer.encode("吾輩は猫である。")
    assert b.prompt is None and b.prompt_token_ids == [5, 6, 7]
    assert a.text == llm.tokenizer.decode(a.token_ids).rstrip("\ufffd")   # a character cut at the end is dropped
    assert a.outputs[0].text == a.text
    m = a.metrics
    assert len(m.token_times) == 5 and len(m.itl) == 4
    assert 0 < m.ttft <= m.e2e_latency
    assert m.tpot == pytest.approx((m.e2e_latency - m.ttft) / 4)
    assert m.itl == pytest.approx([m.token_times[i + 1] - m.token_times[i] for i in range(4)])


def test_lone_decode_attention_equals_the_masked_batch_path():
    """A group of one decode request may attend with one SDPA call over exactly its context (no mask); it must
    give what the batched path (padded to whole blocks, masked) gives for the same request."""
    from minimal_engine.model.attention import ForwardBatch, paged_attention
    from minimal_engine.model.decode_groups import DecodeGroup, GatheredDecode
    torch.manual_seed(0)
    kvh, g, dh, bs, blocks = 2, 3, 16, 4, 8
    kc, vc = torch.randn(kvh, (blocks + 1) * bs, dh), torch.randn(kvh, (blocks + 1) * bs, dh)
    table, context = [5, 2, 7], 10                                      # 10 tokens in 3 blocks of 4
    q, k, v = torch.randn(1, kvh * g, dh), torch.randn(1, kvh, dh), torch.randn(1, kvh, dh)
    slot = torch.tensor([table[(context - 1) // bs] * bs + (context - 1) % bs])
    common = dict(positions=torch.tensor([context - 1]), slot_mapping=slot, num_decodes=1,
                  prefills=[], logits_indices=torch.tensor([0]), block_size=bs)
    padding = (torch.arange(len(table) * bs) >= context).view(1, 1, 1, -1)
    out = {}
    for name, pad in (("lone", None), ("masked", padding)):
        group = DecodeGroup(torch.tensor([0]), torch.tensor([table]), pad, context)
        batch = ForwardBatch(decode=GatheredDecode([group], None), **common)
        out[name] = paged_attention(q, k, v, kc.clone(), vc.clone(), batch, 0.25)
    torch.testing.assert_close(out["lone"], out["masked"])


def test_a_lone_decode_takes_sdpa_only_with_gqa_and_a_short_context(llama_dir, monkeypatch):
    """decode_groups.lone_decode_sdpa: GQA and at most LONE_DECODE_SDPA_MAX_CONTEXT tokens (measured: faster there,
    slower on long contexts and without GQA); prepare() then leaves out the padding mask."""
    from minimal_engine.model import decode_groups
    assert decode_groups.lone_decode_sdpa(True, 10)
    assert not decode_groups.lone_decode_sdpa(False, 10)
    assert not decode_groups.lone_decode_sdpa(True, decode_groups.LONE_DECODE_SDPA_MAX_CONTEXT + 1)
    llm = LLM(llama_dir, dtype="float32", device="cpu")
    runner = llm.engine.runner
    batches = []
    forward = runner.model.forward
    runner.model.forward = lambda ids, batch, kv: (batches.append(batch), forward(ids, batch, kv))[1]
    greedy = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    expected = llm.generate([PROMPTS[0]], greedy, use_tqdm=False)[0].token_ids
    for sdpa in (True, False):
        monkeypatch.setattr(decode_groups, "lone_decode_sdpa", lambda gqa, context, sdpa=sdpa: sdpa)
        batches.clear()
        assert llm.generate([PROMPTS[0]], greedy, use_tqdm=False)[0].token_ids == expected
        decode = batches[-1]                      # the last step: the 2nd decode, context = prompt + 2 tokens
        assert decode.num_decodes == 1 and len(decode.decode.groups) == 1
        group = decode.decode.groups[0]
        assert group.context_len == len(PROMPTS[0]) + 2 and (group.padding is None) == sdpa
