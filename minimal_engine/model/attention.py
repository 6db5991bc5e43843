"""Paged attention: write this step's K and V into the block pool, then attend over each request's context.

The KV pool of one layer is a tensor [kv_heads, num_blocks * block_size, head_dim] (one for K, one for V).
Viewed as [kv_heads * num_blocks, block_size * head_dim], each row is one block of one KV head: reading a
request's context is a gather of whole rows (2 KB each for 16 x 64 bf16), several times faster on the CPU than
gathering token by token. `ForwardBatch` says where things are, so the model needs no hidden global state:
  * tokens of the step are laid out decode tokens first (one per request), then prefill chunks;
  * `slot_mapping[t]` is the pool slot where token t's K and V go;
  * the decode rows attend over their cached contexts as `ForwardBatch.decode` says, one type per path:
    `PagedDecode` reads each request's blocks in place through its block table (attention_paged.py; CUDA and
    CUDA graphs), `GatheredDecode` copies the contexts out of the pool in groups of similar length (the CPU),
    `CustomDecode` hands each request to a given function (chapter 3's exercise);
  * each prefill chunk attends causally over its own context (earlier chunks come from the pool).
Layouts name blocks by number; the rows of a pool follow from its own KV heads (`block_rows`), so a tensor-
parallel rank with fewer heads reads the same batch.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Callable

import torch
import torch.nn.functional as F

from minimal_engine.model.attention_paged import paged_decode_attention

# How much longer a group's padded contexts may be than their sum (GatheredDecode): measured on the CPU
# (benchmarks/decode_attention_candidates.py), a padded call costs what its padded size costs, and one more
# call costs about as much as ~25% padding.
GROUP_PADDING_SLACK = 1.25
# A group of one request attends with one SDPA call over exactly its context (no mask) when the model has GQA
# and the context is at most this long: faster there on the CPU, slower on long contexts and without GQA
# (benchmarks/lone_decode_ab.py).
LONE_DECODE_SDPA_MAX_CONTEXT = 512


def block_rows(block_tables: torch.Tensor, kv_heads: int, pool_blocks: int) -> torch.Tensor:
    """Block numbers [N, W] -> rows of the pool's [KVH * pool_blocks, block_size * Dh] view, ordered
    (request, KV head, block): [N * KVH * W]."""
    heads = torch.arange(kv_heads, device=block_tables.device)[None, :, None] * pool_blocks   # [1, KVH, 1]
    return (heads + block_tables[:, None, :]).flatten()


def gather_blocks(cache, block_tables: torch.Tensor, block_size: int) -> torch.Tensor:
    """Copy the listed blocks of every KV head out of one pool [KVH, slots, Dh]: block tables [N, W] ->
    [N * KVH * W * block_size, Dh], ordered (request, KV head, token)."""
    kvh, slots, dh = cache.shape
    rows = block_rows(block_tables, kvh, slots // block_size)
    if hasattr(cache, "read_blocks"):   # a one-byte pool (engine/kv_cache.py) dequantizes what it reads
        return cache.read_blocks(rows, block_size)
    return cache.view(-1, block_size * dh).index_select(0, rows).view(-1, dh)


@dataclass
class PrefillChunk:
    start: int                  # first row of this chunk in the step's tokens
    end: int                    # one past the last row
    context_len: int            # tokens of the request in the cache after this step
    block_table: torch.Tensor | None   # [1, blocks] the request's blocks; only when tokens are cached

    @property
    def num_cached(self) -> int:
        return self.context_len - (self.end - self.start)


@dataclass
class PagedDecode:
    """Decode rows read their blocks in place (attention_paged.py): the CUDA path, and CUDA graphs'."""
    block_tables: torch.Tensor          # [D, W] int32, padded with any block (never read)
    context_lens: torch.Tensor          # [D] int32; 0 marks a padding row (its output is 0)


@dataclass
class DecodeGroup:
    """Decode requests of similar context length, gathered and attended together."""
    requests: torch.Tensor              # [n] their decode rows in the step
    block_tables: torch.Tensor          # [n, W] block numbers, padded to the group's longest with block 0
    padding: torch.Tensor | None        # [n, 1, 1, W * block_size] True = not context (masked); None: SDPA
    context_len: int                    # the longest context in the group (a lone request's own)


@dataclass
class GatheredDecode:
    """The CPU path: each group's contexts are copied out of the pool, padded only to the group's longest
    (groups are cut so that padding stays within GROUP_PADDING_SLACK of the contexts: a long request never
    pads the short ones), then two batched matmuls per group."""
    groups: list[DecodeGroup]
    order: torch.Tensor | None          # [D] where each decode row's output is in the groups' concatenation


@dataclass
class CustomDecode:
    """Chapter 3's exercise: fn(q [H, Dh], k [L, KVH, Dh], v [L, KVH, Dh]) -> [H, Dh], per request."""
    fn: Callable
    block_tables: torch.Tensor          # [D, W] block numbers, padded with block 0
    context_lens: list[int]


def group_by_length(context_lens: list[int], slack: float | None = None) -> list[list[int]]:
    """Indices of the requests in groups: longest first, a request joins the current group while the group's
    padded size (members x the longest) stays within `slack` (default GROUP_PADDING_SLACK) times the sum of
    its contexts."""
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
    """Whether a group of one request attends with one SDPA call over exactly its context (no mask)."""
    return gqa and context <= LONE_DECODE_SDPA_MAX_CONTEXT


def gathered_decode(tables: list[list[int]], context_lens: list[int], block_size: int, gqa: bool,
                    device) -> GatheredDecode:
    """The CPU layout of the decode rows: groups by length (group_by_length), each padded to its longest."""
    groups = []
    for members in group_by_length(context_lens):
        width = max(len(tables[i]) for i in members)
        padded = torch.tensor([tables[i] + [0] * (width - len(tables[i])) for i in members], device=device)
        longest = context_lens[members[0]]
        if len(members) == 1 and lone_decode_sdpa(gqa, longest):
            padding = None
        else:
            ctx = torch.tensor([context_lens[i] for i in members], device=device)
            slots = torch.arange(width * block_size, device=device)
            padding = (slots >= ctx[:, None]).view(len(members), 1, 1, -1)   # [n, 1, 1, W * bs]
        groups.append(DecodeGroup(torch.tensor(members, device=device), padded, padding, longest))
    if len(groups) == 1 and groups[0].requests.tolist() == sorted(groups[0].requests.tolist()):
        return GatheredDecode(groups, None)
    order = torch.argsort(torch.cat([g.requests for g in groups]))
    return GatheredDecode(groups, order)


@dataclass
class ForwardBatch:
    """Everything one forward pass needs to know about the step's layout."""

    positions: torch.Tensor             # [T] position of each token in its request
    slot_mapping: torch.Tensor          # [T] pool slot for each token's K/V
    num_decodes: int                    # the first num_decodes tokens are decode tokens
    decode: PagedDecode | GatheredDecode | CustomDecode | None   # how they attend; None: no decode rows
    prefills: list[PrefillChunk]
    logits_indices: torch.Tensor        # [S] rows whose next-token logits are needed
    block_size: int

    def __post_init__(self):
        if (self.decode is None) != (self.num_decodes == 0):
            raise ValueError(f"{self.num_decodes} decode rows with the decode layout "
                             f"{type(self.decode).__name__}")

    def to(self, device) -> ForwardBatch:
        """The same batch with every tensor on `device` (tensor parallelism sends it to other processes)."""
        return _to(self, device)


def _to(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, list):
        return [_to(y, device) for y in x]
    if is_dataclass(x) and not isinstance(x, type):
        return replace(x, **{f.name: _to(getattr(x, f.name), device) for f in fields(x) if f.init})
    return x


def gathered_group(q: torch.Tensor, k_cache, v_cache, group: DecodeGroup, scale: float,
                   bs: int) -> torch.Tensor:
    """One group of GatheredDecode: q [n, H, Dh] -> [n, H, Dh]."""
    n, h, dh = q.shape
    kvh = k_cache.shape[0]
    g = h // kvh                                                        # query heads per KV head (GQA)
    kd = gather_blocks(k_cache, group.block_tables, bs).view(n * kvh, -1, dh)   # [n*KVH, W*bs, Dh]
    vd = gather_blocks(v_cache, group.block_tables, bs).view(n * kvh, -1, dh)
    if group.padding is None:
        # A lone request with a short context: SDPA over exactly its context, no mask. The G query heads of
        # each KV head act as G query rows: [1, KVH, G, Dh] against [1, KVH, L, Dh], one call.
        kd = kd.view(1, kvh, -1, dh)[:, :, :group.context_len]
        vd = vd.view(1, kvh, -1, dh)[:, :, :group.context_len]
        return F.scaled_dot_product_attention(q.view(1, kvh, g, dh), kd, vd, scale=scale).view(1, h, dh)
    # One query row per request: plain batched matmuls with batch = (request, KV head) and the G query heads
    # of a KV head as the rows. (On the CPU, SDPA with a mask and one query row was ~10x slower at batch 32.)
    # q viewed as [n*KVH, G, Dh] matches the gathered [n*KVH, L, Dh], because the query heads of one KV head
    # are adjacent.
    scores = torch.bmm(q.reshape(n * kvh, g, dh), kd.transpose(1, 2)).float() * scale     # [n*KVH, G, L]
    scores = scores.view(n, kvh, g, -1).masked_fill_(group.padding, float("-inf"))        # softmax in fp32
    o = torch.bmm(scores.softmax(-1).to(q.dtype).view(n * kvh, g, -1), vd)                # [n*KVH, G, Dh]
    return o.view(n, h, dh)


def decode_attention(q: torch.Tensor, k_cache, v_cache, decode, scale: float, bs: int) -> torch.Tensor:
    """The decode rows q [D, H, Dh] -> [D, H, Dh], as the layout says."""
    if isinstance(decode, PagedDecode):              # in place, through the block tables (attention_paged.py)
        return paged_decode_attention(q, k_cache, v_cache, decode.block_tables, decode.context_lens,
                                      scale, bs)
    if isinstance(decode, CustomDecode):
        # The exercise's function, one request at a time over exactly its context, token-major [L, KVH, Dh]
        # (the gather gives [KVH, L, Dh] per request).
        d, h, dh = q.shape
        kd = gather_blocks(k_cache, decode.block_tables, bs).view(d, k_cache.shape[0], -1, dh)
        vd = gather_blocks(v_cache, decode.block_tables, bs).view(d, k_cache.shape[0], -1, dh)
        return torch.stack([decode.fn(q[i], kd[i, :, :n].transpose(0, 1), vd[i, :, :n].transpose(0, 1))
                            .to(q.dtype).reshape(h, dh) for i, n in enumerate(decode.context_lens)])
    if decode.order is None:                         # one group, in the step's order
        return gathered_group(q, k_cache, v_cache, decode.groups[0], scale, bs)
    outs = [gathered_group(q.index_select(0, g.requests), k_cache, v_cache, g, scale, bs)
            for g in decode.groups]
    return torch.cat(outs).index_select(0, decode.order)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, batch: ForwardBatch,
                    scale: float) -> torch.Tensor:
    """q: [T, H, Dh]; k, v: [T, KVH, Dh]; caches: [KVH, slots, Dh] (head-major). Returns [T, H, Dh].

    The pool is head-major so that gathering a request's blocks gives, for each KV head, its context as one
    [tokens, Dh] matrix: the matmuls read the gathered K and V in place, with no further copies.
    """
    bs = batch.block_size
    k_cache.index_copy_(1, batch.slot_mapping, k.transpose(0, 1))
    v_cache.index_copy_(1, batch.slot_mapping, v.transpose(0, 1))
    kvh, dh = k.shape[1], k.shape[2]
    g = q.shape[1] // kvh

    parts = []                                                          # outputs, in the order of the rows
    if batch.decode is not None:
        parts.append(decode_attention(q[:batch.num_decodes], k_cache, v_cache, batch.decode, scale, bs))

    # Prefill: SDPA on 4-D tensors [1, heads, tokens, Dh]. (On the CPU only 4-D inputs reach the fused flash
    # kernel; 3-D ones fall back to the unfused math path, ~3x slower for a 512-token prompt.)
    for c in batch.prefills:
        qp = q[c.start:c.end].transpose(0, 1)[None]                     # [1, H, n, Dh]
        if c.num_cached == 0:   # whole prompt in this step: plain causal attention
            kp = k[c.start:c.end].transpose(0, 1)[None]                 # [1, KVH, n, Dh]
            vp = v[c.start:c.end].transpose(0, 1)[None]
            o = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, scale=scale, enable_gqa=g > 1)
        else:                   # a later chunk: earlier tokens come from the pool
            kp = gather_blocks(k_cache, c.block_table, bs).view(1, kvh, -1, dh)[:, :, :c.context_len]
            vp = gather_blocks(v_cache, c.block_table, bs).view(1, kvh, -1, dh)[:, :, :c.context_len]
            q_pos = torch.arange(c.num_cached, c.context_len, device=q.device)
            mask = torch.arange(c.context_len, device=q.device)[None, :] <= q_pos[:, None]  # [n, ctx]
            o = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, scale=scale, enable_gqa=g > 1)
        parts.append(o[0].transpose(0, 1))
    return parts[0] if len(parts) == 1 else torch.cat(parts)
