"""Decode attention that reads each request's K/V blocks where they lie in the pool (no gather
copy); read after the core path: the CPU path (attention.py) teaches the request path without it.

    paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale, block_size)
        -> [D, H, Dh]

  q             [D, H, Dh]        one query row per decoding request
  k/v_cache     [KVH, slots, Dh]  one layer's pool (attention.py); slot = block * bs + offset
  block_tables  [D, W] int32      each request's blocks, padded to W with any block id (never read)
  context_lens  [D] int32         tokens of context per request; 0 marks a padding row (output 0)

attention.py's CPU path first copies ("gathers") each group's contexts into dense tensors and then
multiplies; that copy costs as much memory traffic as the attention itself. Here, on CUDA, a short
Triton kernel walks each request's block table and reads the blocks in place: one program per
(request, KV head) keeps a running softmax (the "online softmax" of FlashAttention) over the blocks
of its context. Shapes do not depend on the contexts (W is fixed by the caller), so a step using it
can be captured in a CUDA graph (cuda_graphs.py).

Elsewhere (the CPU, or a GPU without Triton) `paged_decode_reference` computes the same thing in
plain PyTorch with a gather; it is also the reference the tests compare against.

Triton's interpreter (TRITON_INTERPRET=1 set before this module is imported, Triton installed) runs
the same kernel on CPU tensors in NumPy, slowly: then the CPU takes this path too
(`use_paged_decode`), which is how the tests prove the kernel and the engine's dispatch to it
without a GPU (tests/model/test_triton_interpreter.py).
"""
from __future__ import annotations

import os

import torch

# Triton ships with PyTorch's CUDA builds; the CPU build has none
try:
    import triton
    import triton.language as tl
except ImportError:                    # pragma: no cover - depends on the installation
    triton = None

# read when the kernel below is decorated, as triton.jit itself does: later changes do not apply
INTERPRETED = triton is not None and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def paged_decode_reference(q, k_cache, v_cache, block_tables, context_lens, scale: float,
                           block_size: int):
    """Plain PyTorch: gather each request's W blocks, mask positions >= its context, softmax in
    float32."""
    d, h, dh = q.shape
    kvh = k_cache.shape[0]
    g = h // kvh
    offsets = torch.arange(block_size, device=q.device)
    slots = (block_tables.long()[:, :, None] * block_size + offsets).flatten(1)      # [D, W * bs]
    k = k_cache[:, slots].permute(1, 0, 2, 3)                                      # [D, KVH, L, Dh]
    v = v_cache[:, slots].permute(1, 0, 2, 3)
    scores = torch.einsum("dkgc,dklc->dkgl", q.view(d, kvh, g, dh).float(), k.float()) * scale
    padding = torch.arange(slots.shape[1], device=q.device)[None, :] >= context_lens[:, None]
    scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
    probs = scores.softmax(-1).nan_to_num(0.0)     # a padding row (context 0) is all -inf: output 0
    out = torch.einsum("dkgl,dklc->dkgc", probs, v.float())
    return out.reshape(d, h, dh).to(q.dtype)


if triton is not None:
    @triton.jit
    def _paged_decode_kernel(q_ptr, k_ptr, v_ptr, out_ptr, tables_ptr, lens_ptr, scale,
                             q_stride_seq, q_stride_head, cache_stride_head, table_stride,
                             G: tl.constexpr, DH: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                             BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr):
        # one program: one request, one KV head, its G query heads
        seq = tl.program_id(0)
        kv_head = tl.program_id(1)
        ctx = tl.load(lens_ptr + seq)
        g = tl.arange(0, BLOCK_G)                    # this KV head's query heads (to a power of 2)
        d = tl.arange(0, BLOCK_D)                    # head dimension
        t = tl.arange(0, BLOCK_T)                    # token offsets inside one block
        head_ok = (g < G)[:, None] & (d < DH)[None, :]
        q_off = seq * q_stride_seq + (kv_head * G + g)[:, None] * q_stride_head + d[None, :]
        q = tl.load(q_ptr + q_off, mask=head_ok, other=0.0).to(tl.float32)  # [BLOCK_G, BLOCK_D]
        m = tl.full([BLOCK_G], float("-inf"), tl.float32)    # running max of the scores
        l = tl.zeros([BLOCK_G], tl.float32)                  # running sum of exp(score - m)
        acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)       # running sum of exp(score - m) * v
        for b in range(0, tl.cdiv(ctx, BLOCK_SIZE)):
            block = tl.load(tables_ptr + seq * table_stride + b).to(tl.int64)
            valid = (t < BLOCK_SIZE) & (b * BLOCK_SIZE + t < ctx)                 # [BLOCK_T]
            slot = block * BLOCK_SIZE + t
            kv_off = kv_head * cache_stride_head + slot[:, None] * DH + d[None, :]
            kv_ok = valid[:, None] & (d < DH)[None, :]
            k = tl.load(k_ptr + kv_off, mask=kv_ok, other=0.0).to(tl.float32)  # [BLOCK_T, BLOCK_D]
            v = tl.load(v_ptr + kv_off, mask=kv_ok, other=0.0).to(tl.float32)
            s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale        # [BLOCK_G, BLOCK_T]
            s = tl.where(valid[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))
            alpha = tl.exp(m - m_new)                  # rescale what was summed under the old max
            p = tl.exp(s - m_new[:, None])
            l = l * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
            m = m_new
        out = acc / tl.where(l > 0, l, 1.0)[:, None]         # context 0 (a padding row): 0
        tl.store(out_ptr + q_off, out.to(out_ptr.dtype.element_ty), mask=head_ok)


def triton_available(device: torch.device) -> bool:
    """The Triton kernel runs for tensors on this device: CUDA with Triton, or the CPU under the
    interpreter."""
    kind = torch.device(device).type
    return triton is not None and (kind == "cuda" or (kind == "cpu" and INTERPRETED))


def use_paged_decode(device: torch.device, kv_quantized: bool) -> bool:
    """Whether decode steps read K/V in place through block tables (else attention.py gathers
    them): on CUDA (the kernel; the reference if Triton is missing) and on the CPU under Triton's
    interpreter; never for a one-byte KV pool (engine/kv_cache.py), which attention.py dequantizes
    while gathering."""
    kind = torch.device(device).type
    return not kv_quantized and (kind == "cuda" or (kind == "cpu" and triton_available(device)))


def paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale: float,
                           block_size: int):
    """In-place paged decode attention: the Triton kernel on CUDA, the PyTorch reference
    elsewhere."""
    args = (q, k_cache, v_cache, block_tables, context_lens, scale, block_size)
    if not triton_available(q.device):
        return paged_decode_reference(*args)
    return paged_decode_triton(*args)


def paged_decode_triton(q, k_cache, v_cache, block_tables, context_lens, scale: float,
                        block_size: int):
    """Launch the kernel: a grid of (requests, KV heads). The pool must be contiguous (slot stride
    = Dh). (Tests run it on the CPU through Triton's interpreter, TRITON_INTERPRET=1, where Triton
    is installed.)"""
    assert k_cache.is_contiguous() and v_cache.is_contiguous()
    d, h, dh = q.shape
    kvh = k_cache.shape[0]
    q = q.contiguous()
    out = torch.empty_like(q)                    # same layout as q: the kernel reuses q's offsets
    g = h // kvh
    _paged_decode_kernel[(d, kvh)](
        q, k_cache, v_cache, out, block_tables, context_lens, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), block_tables.stride(0),
        G=g, DH=dh, BLOCK_SIZE=block_size, BLOCK_G=triton.next_power_of_2(g),
        BLOCK_D=triton.next_power_of_2(dh), BLOCK_T=triton.next_power_of_2(block_size))
    return out
