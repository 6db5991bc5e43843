"""Paged attention: write this step's K and V into the block pool, then attend over each request's context.

The KV pool of one layer is a tensor [num_blocks * block_size, kv_heads, head_dim] (one for K, one for V).
`ForwardBatch` says where things are, so the model needs no hidden global state:
  * tokens of the step are laid out decode tokens first (one per request), then prefill chunks;
  * `slot_mapping[t]` is the pool slot where token t's K and V go;
  * decode requests attend over their whole cached context at once (padded to the longest, masked);
  * each prefill chunk attends causally over its own context (earlier chunks come from the pool).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class PrefillChunk:
    start: int                  # first row of this chunk in the step's tokens
    end: int                    # one past the last row
    context_len: int            # tokens of the request in the cache after this step
    block_table: torch.Tensor | None  # [blocks] needed only when earlier tokens are cached

    @property
    def num_cached(self) -> int:
        return self.context_len - (self.end - self.start)


@dataclass
class ForwardBatch:
    """Everything one forward pass needs to know about the step's layout."""

    positions: torch.Tensor             # [T] position of each token in its request
    slot_mapping: torch.Tensor          # [T] pool slot for each token's K/V
    num_decodes: int                    # the first num_decodes tokens are decode tokens
    decode_block_tables: torch.Tensor | None  # [D, max_blocks]
    decode_mask: torch.Tensor | None    # [D, 1, 1, max_blocks * block_size]: True = may attend
    prefills: list[PrefillChunk]
    logits_indices: torch.Tensor        # [S] rows whose next-token logits are needed
    block_size: int


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, batch: ForwardBatch,
                    scale: float) -> torch.Tensor:
    """q: [T, H, Dh]; k, v: [T, KVH, Dh]; caches: [slots, KVH, Dh]. Returns [T, H, Dh]."""
    k_cache.index_copy_(0, batch.slot_mapping, k)
    v_cache.index_copy_(0, batch.slot_mapping, v)
    out = torch.empty_like(q)
    kvh, dh = k.shape[1], k.shape[2]
    bs = batch.block_size
    gqa = q.shape[1] != kvh

    d = batch.num_decodes
    if d:
        tables = batch.decode_block_tables                              # [D, nb]
        slots = (tables[:, :, None] * bs + torch.arange(bs, device=q.device)).view(-1)   # [D * L] pool slots
        kd = k_cache.index_select(0, slots).view(d, -1, kvh, dh)        # [D, L, KVH, Dh]: one gather, no transpose
        vd = v_cache.index_select(0, slots).view(d, -1, kvh, dh)
        # One query per request: plain matmuls, each KV head serving its group of G query heads (GQA).
        # (On the CPU, SDPA with a mask and one query row was ~10x slower at batch 32: see benchmarks/README.md.)
        qd = q[:d].view(d, kvh, q.shape[1] // kvh, dh)                 # [D, KVH, G, Dh]
        scores = torch.einsum("dkgh,dlkh->dkgl", qd, kd).float() * scale  # [D, KVH, G, L], softmax in float32
        scores = scores.masked_fill(~batch.decode_mask, float("-inf"))  # mask [D, 1, 1, L] broadcasts
        o = torch.einsum("dkgl,dlkh->dkgh", scores.softmax(-1).to(q.dtype), vd)  # [D, KVH, G, Dh]
        out[:d] = o.reshape(d, -1, dh)                                  # [D, H, Dh]

    for c in batch.prefills:
        qp = q[c.start:c.end].transpose(0, 1)                           # [H, n, Dh]
        if c.num_cached == 0:   # whole prompt in this step: plain causal attention
            kp = k[c.start:c.end].transpose(0, 1)                       # [KVH, n, Dh]
            vp = v[c.start:c.end].transpose(0, 1)
            o = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, scale=scale, enable_gqa=gqa)
        else:                   # a later chunk: earlier tokens come from the pool
            kp = k_cache.view(-1, bs, kvh, dh)[c.block_table].view(-1, kvh, dh)[:c.context_len].transpose(0, 1)
            vp = v_cache.view(-1, bs, kvh, dh)[c.block_table].view(-1, kvh, dh)[:c.context_len].transpose(0, 1)
            q_pos = torch.arange(c.num_cached, c.context_len, device=q.device)
            mask = torch.arange(c.context_len, device=q.device)[None, :] <= q_pos[:, None]  # [n, ctx]
            o = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, scale=scale, enable_gqa=gqa)
        out[c.start:c.end] = o.transpose(0, 1)
    return out
