"""Paged attention: write this step's K and V into the block pool, then attend over each request's context.

The KV pool of one layer is a tensor [kv_heads, num_blocks * block_size, head_dim] (one for K, one for V).
Viewed as [kv_heads * num_blocks, block_size * head_dim], each row is one block of one KV head: reading a
request's context is a gather of whole rows (2 KB each for 16 x 64 bf16), several times faster on the CPU than
gathering token by token. `ForwardBatch` says where things are, so the model needs no hidden global state:
  * tokens of the step are laid out decode tokens first (one per request), then prefill chunks;
  * `slot_mapping[t]` is the pool slot where token t's K and V go;
  * decode requests attend over their whole cached context at once: either gathered here (padded to the
    longest, masked; the CPU default; a lone decode request without padding) or read in place through their
    block tables (attention_paged.py; the CUDA default and what CUDA graphs use): ForwardBatch.decode_mode says
    which, and the runner fills the fields that mode reads;
  * each prefill chunk attends causally over its own context (earlier chunks come from the pool).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from minimal_engine.model.attention_paged import paged_decode_attention

# How the decode rows of a step attend (ForwardBatch.decode_mode) and the fields each mode reads:
DECODE_MODES = {
    "none": (),                                             # no decode rows in this step
    "paged": ("decode_block_tables", "decode_context_lens"),  # in place, through block tables
    "lone": ("decode_rows", "decode_len"),                  # one request: SDPA over exactly its context
    "gathered": ("decode_rows", "decode_padding"),          # padded to the longest context, masked
    "custom": ("decode_rows", "decode_padding", "decode_attention"),   # a given function, one request at a time
}


@dataclass
class PrefillChunk:
    start: int                  # first row of this chunk in the step's tokens
    end: int                    # one past the last row
    context_len: int            # tokens of the request in the cache after this step
    rows: torch.Tensor | None   # [KVH * blocks] block rows of the request's context; only when tokens are cached

    @property
    def num_cached(self) -> int:
        return self.context_len - (self.end - self.start)


@dataclass
class ForwardBatch:
    """Everything one forward pass needs to know about the step's layout."""

    positions: torch.Tensor             # [T] position of each token in its request
    slot_mapping: torch.Tensor          # [T] pool slot for each token's K/V
    num_decodes: int                    # the first num_decodes tokens are decode tokens
    decode_rows: torch.Tensor | None    # [D * KVH * W] block rows of the decodes' contexts, each padded to W blocks
    decode_padding: torch.Tensor | None  # [D, 1, 1, W * block_size]: True = padding, not context (masked out)
    prefills: list[PrefillChunk]
    logits_indices: torch.Tensor        # [S] rows whose next-token logits are needed
    block_size: int
    decode_block_tables: torch.Tensor | None = None  # [D, W] int32: set = decode attention reads blocks in place
    decode_context_lens: torch.Tensor | None = None  # [D] int32 context length (0 = a padding row)
    decode_len: int = 0                 # context length of a lone decode request (gathered, no padding mask)
    decode_mode: str = "none"           # a key of DECODE_MODES: how the decode rows attend
    decode_attention: Callable | None = None   # "custom": fn(q [H, Dh], k [L, KVH, Dh], v [L, KVH, Dh]) -> [H, Dh]

    def __post_init__(self):
        if self.decode_mode not in DECODE_MODES:
            raise ValueError(f"decode_mode must be one of {sorted(DECODE_MODES)}, got {self.decode_mode!r}")
        if (self.decode_mode == "none") != (self.num_decodes == 0):
            raise ValueError(f"decode_mode {self.decode_mode!r} with {self.num_decodes} decode rows")


def gather_blocks(cache: torch.Tensor, rows: torch.Tensor, block_size: int) -> torch.Tensor:
    """Copy the listed block rows out of one pool: [KVH, slots, Dh] -> [len(rows) * block_size, Dh]."""
    if hasattr(cache, "read_blocks"):                # a quantized pool (engine/kv_cache.py): dequantizes what it reads
        return cache.read_blocks(rows, block_size)
    dh = cache.shape[-1]
    return cache.view(-1, block_size * dh).index_select(0, rows).view(-1, dh)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, batch: ForwardBatch,
                    scale: float) -> torch.Tensor:
    """q: [T, H, Dh]; k, v: [T, KVH, Dh]; caches: [KVH, slots, Dh] (head-major). Returns [T, H, Dh].

    The pool is head-major so that gathering a request's blocks gives, for each KV head, its context as one
    [tokens, Dh] matrix: the matmuls below read the gathered K and V in place, with no further copies.
    """
    bs = batch.block_size
    k_cache.index_copy_(1, batch.slot_mapping, k.transpose(0, 1))
    v_cache.index_copy_(1, batch.slot_mapping, v.transpose(0, 1))
    h, kvh, dh = q.shape[1], k.shape[1], k.shape[2]
    g = h // kvh                                                        # query heads per KV head (GQA)

    parts = []                                                          # outputs, in the order of the rows
    d = batch.num_decodes
    mode = batch.decode_mode
    if mode == "paged":                               # in place, through the block tables (attention_paged.py)
        parts.append(paged_decode_attention(q[:d], k_cache, v_cache, batch.decode_block_tables,
                                            batch.decode_context_lens, scale, bs))
    elif mode == "lone":
        # A lone decode request (batch-1 decode): SDPA over exactly its context, so no mask. The G query heads
        # of each KV head act as G query rows: [1, KVH, G, Dh] against [1, KVH, L, Dh], one call.
        kd = gather_blocks(k_cache, batch.decode_rows, bs).view(1, kvh, -1, dh)[:, :, :batch.decode_len]
        vd = gather_blocks(v_cache, batch.decode_rows, bs).view(1, kvh, -1, dh)[:, :, :batch.decode_len]
        parts.append(F.scaled_dot_product_attention(q[:1].view(1, kvh, g, dh), kd, vd, scale=scale).view(1, h, dh))
    elif mode == "custom":
        # Chapter 3's exercise: the given function attends for one request at a time, over exactly its context,
        # laid out token-major as [L, KVH, Dh] (the gather gives [KVH, L, Dh] per request).
        kd = gather_blocks(k_cache, batch.decode_rows, bs).view(d, kvh, -1, dh)
        vd = gather_blocks(v_cache, batch.decode_rows, bs).view(d, kvh, -1, dh)
        lens = (~batch.decode_padding.view(d, -1)).sum(-1).tolist()
        parts.append(torch.stack([batch.decode_attention(q[i], kd[i, :, :n].transpose(0, 1), vd[i, :, :n].transpose(0, 1))
                                  .to(q.dtype).reshape(h, dh) for i, n in enumerate(lens)]))
    elif mode == "gathered":
        # One query row per request: plain batched matmuls with batch = (request, KV head) and the G query
        # heads of a KV head as the rows. (On the CPU, SDPA with a mask and one query row was ~10x slower
        # at batch 32.) The gather lays the context out as [D*KVH, L, Dh], and q[:d] viewed as [D*KVH, G, Dh]
        # matches it without a copy, because the query heads of one KV head are adjacent.
        kd = gather_blocks(k_cache, batch.decode_rows, bs).view(d * kvh, -1, dh)  # [D*KVH, L, Dh]: one gather
        vd = gather_blocks(v_cache, batch.decode_rows, bs).view(d * kvh, -1, dh)
        scores = torch.bmm(q[:d].reshape(d * kvh, g, dh), kd.transpose(1, 2)).float() * scale  # [D*KVH, G, L]
        scores = scores.view(d, kvh, g, -1).masked_fill_(batch.decode_padding, float("-inf"))  # softmax in fp32
        o = torch.bmm(scores.softmax(-1).to(q.dtype).view(d * kvh, g, -1), vd)  # [D*KVH, G, Dh]
        parts.append(o.view(d, h, dh))

    # Prefill: SDPA on 4-D tensors [1, heads, tokens, Dh]. (On the CPU only 4-D inputs reach the fused flash
    # kernel; 3-D ones fall back to the unfused math path, ~3x slower for a 512-token prompt.)
    for c in batch.prefills:
        qp = q[c.start:c.end].transpose(0, 1)[None]                     # [1, H, n, Dh]
        if c.num_cached == 0:   # whole prompt in this step: plain causal attention
            kp = k[c.start:c.end].transpose(0, 1)[None]                 # [1, KVH, n, Dh]
            vp = v[c.start:c.end].transpose(0, 1)[None]
            o = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, scale=scale, enable_gqa=g > 1)
        else:                   # a later chunk: earlier tokens come from the pool
            kp = gather_blocks(k_cache, c.rows, bs).view(1, kvh, -1, dh)[:, :, :c.context_len]  # [1, KVH, ctx, Dh]
            vp = gather_blocks(v_cache, c.rows, bs).view(1, kvh, -1, dh)[:, :, :c.context_len]
            q_pos = torch.arange(c.num_cached, c.context_len, device=q.device)
            mask = torch.arange(c.context_len, device=q.device)[None, :] <= q_pos[:, None]  # [n, ctx]
            o = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, scale=scale, enable_gqa=g > 1)
        parts.append(o[0].transpose(0, 1))
    return parts[0] if len(parts) == 1 else torch.cat(parts)
