"""Paged attention: write this step's K and V into the block pool, then attend over each request's context.

The KV pool of one layer is a tensor [kv_heads, num_blocks * block_size, head_dim] (one for K, one for V).
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
    slots: torch.Tensor | None  # [context_len] pool slots of the request; needed only when tokens are cached

    @property
    def num_cached(self) -> int:
        return self.context_len - (self.end - self.start)


@dataclass
class ForwardBatch:
    """Everything one forward pass needs to know about the step's layout."""

    positions: torch.Tensor             # [T] position of each token in its request
    slot_mapping: torch.Tensor          # [T] pool slot for each token's K/V
    num_decodes: int                    # the first num_decodes tokens are decode tokens
    decode_slots: torch.Tensor | None   # [D * L] pool slots of each decode request's context, padded to L
    decode_mask: torch.Tensor | None    # [D, 1, L]: True = a real context token (may attend)
    prefills: list[PrefillChunk]
    logits_indices: torch.Tensor        # [S] rows whose next-token logits are needed
    block_size: int


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, batch: ForwardBatch,
                    scale: float) -> torch.Tensor:
    """q: [T, H, Dh]; k, v: [T, KVH, Dh]; caches: [KVH, slots, Dh] (head-major). Returns [T, H, Dh].

    The pool is head-major so that gathering a request's slots gives, for each KV head, its context as one
    [tokens, Dh] matrix: the matmuls below read the gathered K and V in place, with no further copies.
    """
    k_cache.index_copy_(1, batch.slot_mapping, k.transpose(0, 1))
    v_cache.index_copy_(1, batch.slot_mapping, v.transpose(0, 1))
    out = torch.empty_like(q)
    h, kvh, dh = q.shape[1], k.shape[1], k.shape[2]
    g = h // kvh                                                        # query heads per KV head (GQA)

    d = batch.num_decodes
    if d:
        slots = batch.decode_slots                                      # [D * L] pool slots, padded per request
        kd = k_cache.index_select(1, slots).view(kvh * d, -1, dh)       # [KVH*D, L, Dh]: one gather
        vd = v_cache.index_select(1, slots).view(kvh * d, -1, dh)
        # One query row per request: plain batched matmuls, batch = (KV head, request), G query heads per
        # KV head. (On the CPU, SDPA with a mask and one query row was ~10x slower at batch 32.)
        qd = q[:d].view(d, kvh, g, dh).transpose(0, 1).reshape(kvh * d, g, dh)   # [KVH*D, G, Dh]
        scores = torch.bmm(qd, kd.transpose(1, 2)).float() * scale      # [KVH*D, G, L], softmax in float32
        scores = scores.view(kvh, d, g, -1).masked_fill(~batch.decode_mask, float("-inf"))  # mask [D, 1, L]
        o = torch.bmm(scores.softmax(-1).to(q.dtype).view(kvh * d, g, -1), vd)  # [KVH*D, G, Dh]
        out[:d] = o.view(kvh, d, g, dh).transpose(0, 1).reshape(d, h, dh)

    for c in batch.prefills:
        qp = q[c.start:c.end].transpose(0, 1)                           # [H, n, Dh]
        if c.num_cached == 0:   # whole prompt in this step: plain causal attention
            kp = k[c.start:c.end].transpose(0, 1)                       # [KVH, n, Dh]
            vp = v[c.start:c.end].transpose(0, 1)
            o = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, scale=scale, enable_gqa=g > 1)
        else:                   # a later chunk: earlier tokens come from the pool
            kp = k_cache.index_select(1, c.slots)                       # [KVH, ctx, Dh]
            vp = v_cache.index_select(1, c.slots)
            q_pos = torch.arange(c.num_cached, c.context_len, device=q.device)
            mask = torch.arange(c.context_len, device=q.device)[None, :] <= q_pos[:, None]  # [n, ctx]
            o = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, scale=scale, enable_gqa=g > 1)
        out[c.start:c.end] = o.transpose(0, 1)
    return out
