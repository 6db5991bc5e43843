"""Paged attention: write this step's K and V into the block pool, then attend over each request's
context.

One layer's KV pool is a tensor [kv_heads, num_blocks * block_size, head_dim] (one for K, one
for V). Viewed as [kv_heads * num_blocks, block_size * head_dim], each row is one block of one KV
head, so reading a request's context is a gather of whole rows (2 KB each for 16 x 64 bf16):
several times faster on the CPU than token by token. `ForwardBatch` says where things are (no
hidden globals):
  * the step's tokens are the decode tokens first (one per request), then the prefill chunks;
  * `slot_mapping[t]` is the pool slot where token t's K and V go;
  * the decode rows attend as `ForwardBatch.decode` says, one type per path: `GatheredDecode`
    copies the contexts out in groups of similar length (the CPU, decode_groups.py), `PagedDecode`
    reads the blocks in place (CUDA; attention_paged.py), `CustomDecode` calls chapter 3's exercise;
  * each prefill chunk attends causally over its own context (earlier chunks come from the pool).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minimal_engine.model.attention_paged import paged_decode_attention
from minimal_engine.model.custom_decode import CustomDecode
from minimal_engine.model.decode_groups import DecodeGroup, GatheredDecode, lone_decode


def block_rows(block_tables: torch.Tensor, kv_heads: int, pool_blocks: int) -> torch.Tensor:
    """Block numbers [N, W] -> rows of the pool's [KVH * pool_blocks, block_size * Dh] view, ordered
    (request, KV head, block): [N * KVH * W]."""
    heads = torch.arange(kv_heads, device=block_tables.device)[None, :, None] * pool_blocks
    return (heads + block_tables[:, None, :]).flatten()


def gather_blocks(cache, block_tables: torch.Tensor, block_size: int) -> torch.Tensor:
    """Copy the listed blocks of every KV head out of one pool [KVH, slots, Dh]: block tables [N, W]
    -> [N * KVH * W * block_size, Dh], ordered (request, KV head, token)."""
    kvh, slots, dh = cache.shape
    rows = block_rows(block_tables, kvh, slots // block_size)
    if hasattr(cache, "read_blocks"):   # a one-byte pool (engine/kv_cache.py) dequantizes it
        return cache.read_blocks(rows, block_size)
    return cache.view(-1, block_size * dh).index_select(0, rows).view(-1, dh)


@dataclass
class PrefillChunk:
    start: int                  # first row of this chunk in the step's tokens
    end: int                    # one past the last row
    context_len: int            # tokens of the request in the cache after this step
    block_table: torch.Tensor | None   # [1, blocks] its blocks; only when tokens are cached

    @property
    def num_cached(self) -> int:
        return self.context_len - (self.end - self.start)


@dataclass
class PagedDecode:
    """Decode rows read their blocks in place (attention_paged.py): CUDA, and CUDA graphs."""
    block_tables: torch.Tensor          # [D, W] int32, padded with any block (never read)
    context_lens: torch.Tensor          # [D] int32; 0 marks a padding row (its output is 0)


@dataclass
class ForwardBatch:
    """Everything one forward pass needs to know about the step's layout."""

    positions: torch.Tensor             # [T] position of each token in its request
    slot_mapping: torch.Tensor          # [T] pool slot for each token's K/V
    num_decodes: int                    # the first num_decodes tokens are decode tokens
    decode: PagedDecode | GatheredDecode | CustomDecode | None   # None: no decode rows
    prefills: list[PrefillChunk]
    logits_indices: torch.Tensor        # [S] rows whose next-token logits are needed
    block_size: int

    def __post_init__(self):
        if (self.decode is None) != (self.num_decodes == 0):
            raise ValueError(f"{self.num_decodes} decode rows with the decode layout "
                             f"{type(self.decode).__name__}")


def gathered_group(q: torch.Tensor, k_cache, v_cache, group: DecodeGroup, scale: float,
                   bs: int) -> torch.Tensor:
    """One group of GatheredDecode: q [n, H, Dh] -> [n, H, Dh], as batched matmuls over (request,
    KV head). (On the CPU, SDPA with a mask and one query row was ~10x slower at batch 32.)"""
    n, h, dh = q.shape
    kvh = k_cache.shape[0]
    g = h // kvh                                    # query heads per KV head (GQA)
    kd = gather_blocks(k_cache, group.block_tables, bs).view(n * kvh, -1, dh)   # [n*KVH, W*bs, Dh]
    vd = gather_blocks(v_cache, group.block_tables, bs).view(n * kvh, -1, dh)
    if group.padding is None:                   # one short request, no mask (decode_groups.py)
        return lone_decode(q, kd, vd, group.context_len, scale)
    # q as [n*KVH, G, Dh] matches the gathered [n*KVH, L, Dh]: a KV head's query heads are adjacent
    scores = torch.bmm(q.reshape(n * kvh, g, dh), kd.transpose(1, 2)).float() * scale  # [n*KVH,G,L]
    scores = scores.view(n, kvh, g, -1).masked_fill_(group.padding, float("-inf"))  # fp32 softmax
    o = torch.bmm(scores.softmax(-1).to(q.dtype).view(n * kvh, g, -1), vd)  # [n*KVH, G, Dh]
    return o.view(n, h, dh)


def decode_attention(q: torch.Tensor, k_cache, v_cache, decode, scale: float,
                     bs: int) -> torch.Tensor:
    """The decode rows q [D, H, Dh] -> [D, H, Dh], as the layout says."""
    if isinstance(decode, PagedDecode):
        return paged_decode_attention(q, k_cache, v_cache, decode.block_tables, decode.context_lens,
                                      scale, bs)
    if isinstance(decode, CustomDecode):             # chapter 3's exercise (custom_decode.py)
        shape = (q.shape[0], k_cache.shape[0], -1, q.shape[2])      # [D, KVH, W * bs, Dh]
        return decode.attend(q, gather_blocks(k_cache, decode.block_tables, bs).view(shape),
                             gather_blocks(v_cache, decode.block_tables, bs).view(shape))
    if decode.order is None:                         # one group, in the step's order
        return gathered_group(q, k_cache, v_cache, decode.groups[0], scale, bs)
    outs = [gathered_group(q.index_select(0, g.requests), k_cache, v_cache, g, scale, bs)
            for g in decode.groups]
    return torch.cat(outs).index_select(0, decode.order)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, batch: ForwardBatch,
                    scale: float) -> torch.Tensor:
    """q: [T, H, Dh]; k, v: [T, KVH, Dh]; caches: [KVH, slots, Dh] (head-major: a KV head's
    gathered context is one [tokens, Dh] matrix for the matmuls). Returns [T, H, Dh]."""
    bs = batch.block_size
    k_cache.index_copy_(1, batch.slot_mapping, k.transpose(0, 1))
    v_cache.index_copy_(1, batch.slot_mapping, v.transpose(0, 1))
    kvh, dh = k.shape[1], k.shape[2]
    g = q.shape[1] // kvh

    parts = []                                                          # outputs, in row order
    if batch.decode is not None:
        d = batch.num_decodes
        parts.append(decode_attention(q[:d], k_cache, v_cache, batch.decode, scale, bs))

    # Prefill: SDPA on 4-D tensors [1, heads, tokens, Dh]. (On the CPU only 4-D inputs reach the
    # fused flash kernel; 3-D ones fall back to the unfused math path, ~3x slower for 512 tokens.)
    for c in batch.prefills:
        qp = q[c.start:c.end].transpose(0, 1)[None]                     # [1, H, n, Dh]
        if c.num_cached == 0:   # whole prompt in this step: plain causal attention
            kp = k[c.start:c.end].transpose(0, 1)[None]                 # [1, KVH, n, Dh]
            vp = v[c.start:c.end].transpose(0, 1)[None]
            o = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, scale=scale,
                                               enable_gqa=g > 1)
        else:                   # a later chunk: earlier tokens come from the pool
            ctx = c.context_len
            kp = gather_blocks(k_cache, c.block_table, bs).view(1, kvh, -1, dh)[:, :, :ctx]
            vp = gather_blocks(v_cache, c.block_table, bs).view(1, kvh, -1, dh)[:, :, :ctx]
            q_pos = torch.arange(c.num_cached, ctx, device=q.device)
            mask = torch.arange(ctx, device=q.device)[None, :] <= q_pos[:, None]    # [n, ctx]
            o = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, scale=scale,
                                               enable_gqa=g > 1)
        parts.append(o[0].transpose(0, 1))
    return parts[0] if len(parts) == 1 else torch.cat(parts)
