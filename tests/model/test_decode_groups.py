"""The CPU decode path (decode_groups.GatheredDecode): requests are gathered in groups of similar context length, so
a long request in the batch never pads the short ones; outputs equal in-place paged attention's."""
from __future__ import annotations

import pytest
import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.model import decode_groups
from minimal_engine.model.attention import ForwardBatch, PagedDecode, paged_attention
from minimal_engine.model.decode_groups import GROUP_PADDING_SLACK, gathered_decode, group_by_length


@pytest.mark.parametrize("lens", [[24, 30, 36, 40, 448], [300] * 8, [5], list(range(10, 330, 20)),
                                  [1, 1000, 2, 999, 3]])
def test_groups_stay_within_the_padding_slack(lens):
    groups = group_by_length(lens)
    assert sorted(i for g in groups for i in g) == list(range(len(lens)))
    for g in groups:
        assert len(g) * max(lens[i] for i in g) <= GROUP_PADDING_SLACK * sum(lens[i] for i in g)


def test_a_long_request_is_gathered_apart_from_the_short_ones():
    """Chapter 1's lab case: four short requests and one of 448 tokens. The short requests' group is padded
    only to the longest short one; before, every row was padded to 448 (5 x 448 = 2,240 tokens gathered)."""
    lens, bs = [24, 30, 36, 40, 448], 16
    tables = [list(range(100 * i, 100 * i + -(-n // bs))) for i, n in enumerate(lens)]
    layout = gathered_decode(tables, lens, bs, gqa=False, device="cpu")
    gathered = {tuple(g.requests.tolist()): g.block_tables.numel() * bs for g in layout.groups}
    assert gathered == {(4,): 448, (3, 2, 1, 0): 4 * 48}          # 640 tokens instead of 2,240
    short_own = sum(-(-n // bs) * bs for n in lens[:4])
    assert gathered[(3, 2, 1, 0)] <= GROUP_PADDING_SLACK * short_own


@pytest.mark.parametrize("gqa", [False, True])
def test_grouped_outputs_equal_paged_attention_in_the_steps_order(gqa):
    torch.manual_seed(0)
    kvh, g, dh, bs, pool_blocks = 2, (3 if gqa else 1), 16, 4, 64
    lens = [3, 40, 9, 10, 41, 1, 22]
    perm = torch.randperm(pool_blocks - 1).tolist()
    tables, used = [], 0
    for n in lens:
        tables.append(perm[used:used + -(-n // bs)])
        used += len(tables[-1])
    kc, vc = torch.randn(kvh, pool_blocks * bs, dh), torch.randn(kvh, pool_blocks * bs, dh)
    d = len(lens)
    q, k, v = torch.randn(d, kvh * g, dh), torch.randn(d, kvh, dh), torch.randn(d, kvh, dh)
    slots = torch.tensor([t[(n - 1) // bs] * bs + (n - 1) % bs for t, n in zip(tables, lens)])
    width = max(len(t) for t in tables)
    common = dict(positions=torch.tensor(lens) - 1, slot_mapping=slots, num_decodes=d, prefills=[],
                  logits_indices=torch.arange(d), block_size=bs)
    paged = PagedDecode(torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32),
                        torch.tensor(lens, dtype=torch.int32))
    layout = gathered_decode(tables, lens, bs, gqa, "cpu")
    assert len(layout.groups) > 1 and layout.order is not None
    want = paged_attention(q, k, v, kc.clone(), vc.clone(), ForwardBatch(decode=paged, **common), 0.25)
    got = paged_attention(q, k, v, kc.clone(), vc.clone(), ForwardBatch(decode=layout, **common), 0.25)
    torch.testing.assert_close(got, want)


def test_engine_tokens_with_a_long_request_among_short_ones(llama_dir):
    """Greedy tokens of a mixed batch (one long prompt, three short) equal each request run alone, and the
    decode steps really were split into groups."""
    llm = LLM(llama_dir, dtype="float32", device="cpu")
    assert llm.engine.runner.attention_backend == "gathered"
    prompts = [[5, 6, 7], list(range(20, 220)), [9, 10, 11, 12], [40, 41]]
    p = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    alone = [llm.generate([x], p, use_tqdm=False)[0].token_ids for x in prompts]
    layouts = []
    forward = llm.engine.runner.model.forward
    llm.engine.runner.model.forward = lambda ids, batch, kv: (layouts.append(batch.decode), forward(ids, batch, kv))[1]
    together = [o.token_ids for o in llm.generate(prompts, p, use_tqdm=False)]
    assert together == alone
    assert any(isinstance(x, decode_groups.GatheredDecode) and len(x.groups) == 2 for x in layouts)
