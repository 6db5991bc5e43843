"""The CPU decode layout (GatheredDecode, built by gathered_decode for the runner; attention.py
attends over it), read after the core path.

Requests are grouped by context length so that a long request never pads the short ones, and a
request alone in its group may skip the padding mask. Both rules were measured on the CPU:
  * a padded call costs what its padded size costs, and one more call costs about as much as ~25 %
    padding (benchmarks/decode_attention_candidates.py): GROUP_PADDING_SLACK;
  * one SDPA call over exactly a lone request's context (no mask) is faster with GQA and contexts up
    to LONE_DECODE_SDPA_MAX_CONTEXT tokens, slower on long contexts and without GQA
    (benchmarks/lone_decode_ab.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

GROUP_PADDING_SLACK = 1.25
LONE_DECODE_SDPA_MAX_CONTEXT = 512


@dataclass
class DecodeGroup:
    """Decode requests of similar context length, gathered and attended together."""
    requests: torch.Tensor              # [n] their decode rows in the step
    block_tables: torch.Tensor          # [n, W] block numbers, padded to the longest with block 0
    padding: torch.Tensor | None        # [n, 1, 1, W * block_size] True = masked; None: no mask
    context_len: int                    # the longest context in the group


@dataclass
class GatheredDecode:
    """The CPU path: each group's contexts are copied out of the pool, padded only to the group's
    longest (a long request never pads the short ones), then two batched matmuls per group."""
    groups: list[DecodeGroup]
    order: torch.Tensor | None          # [D] each decode row's place in the groups' outputs


def group_by_length(context_lens: list[int], slack: float | None = None) -> list[list[int]]:
    """Indices of the requests in groups: longest first, a request joins the current group while the
    group's padded size (members x the longest) stays within `slack` (default GROUP_PADDING_SLACK)
    times the sum of its contexts."""
    slack = GROUP_PADDING_SLACK if slack is None else slack
    order = sorted(range(len(context_lens)), key=lambda i: -context_lens[i])
    groups: list[list[int]] = []
    for i in order:
        g = groups[-1] if groups else None
        if g and (len(g) + 1) * context_lens[g[0]] <= slack * (sum(context_lens[j] for j in g)
                                                               + context_lens[i]):
            g.append(i)
        else:
            groups.append([i])
    return groups


def lone_decode_sdpa(gqa: bool, context: int) -> bool:
    """Whether a group of one request attends with one SDPA call over exactly its context."""
    return gqa and context <= LONE_DECODE_SDPA_MAX_CONTEXT


def gathered_decode(tables: list[list[int]], context_lens: list[int], block_size: int, gqa: bool,
                    device) -> GatheredDecode:
    """The CPU layout of the decode rows: groups by length, each padded to its longest."""
    groups = []
    for members in group_by_length(context_lens):
        width = max(len(tables[i]) for i in members)
        padded = torch.tensor([tables[i] + [0] * (width - len(tables[i])) for i in members],
                              device=device)
        longest = context_lens[members[0]]
        padding = None
        if len(members) > 1 or not lone_decode_sdpa(gqa, longest):
            ctx = torch.tensor([context_lens[i] for i in members], device=device)
            slots = torch.arange(width * block_size, device=device)
            padding = (slots >= ctx[:, None]).view(len(members), 1, 1, -1)   # [n, 1, 1, W * bs]
        groups.append(DecodeGroup(torch.tensor(members, device=device), padded, padding, longest))
    if len(groups) == 1 and groups[0].requests.tolist() == sorted(groups[0].requests.tolist()):
        return GatheredDecode(groups, None)
    order = torch.argsort(torch.cat([g.requests for g in groups]))
    return GatheredDecode(groups, order)


def lone_decode(q: torch.Tensor, kd: torch.Tensor, vd: torch.Tensor, context_len: int,
                scale: float) -> torch.Tensor:
    """One request: q [1, H, Dh], its gathered kd, vd [KVH, W * block_size, Dh] -> [1, H, Dh].
    The G query heads of each KV head act as G query rows: [1, KVH, G, Dh] against [1, KVH, L,
    Dh], one call, no mask."""
    _, h, dh = q.shape
    kvh = kd.shape[0]
    kd = kd.view(1, kvh, -1, dh)[:, :, :context_len]
    vd = vd.view(1, kvh, -1, dh)[:, :, :context_len]
    o = F.scaled_dot_product_attention(q.view(1, kvh, h // kvh, dh), kd, vd, scale=scale)
    return o.view(1, h, dh)
