"""A KV pool in one byte per value: `LLM(..., kv_cache_dtype="fp8" | "int8")` ("auto" = the model dtype).

Each layer's K and V pool is a `QuantizedKVPool` instead of a plain tensor [KVH, slots, Dh] (attention.py):
  * "fp8":  float8 e4m3 (4 exponent bits, 3 mantissa bits, largest value 448), stored as its raw bytes (uint8,
            because the CPU has no index_copy_ for float8 tensors);
  * "int8": integers in [-127, 127].
Scales: one float32 scale per KV head, for K and for V of each layer (static, "per head"). They are chosen once
when the engine starts (`calibrate_kv_scales`): one prefill over a fixed calibration sequence (256 token ids drawn
with a fixed seed, so the same on every run and every machine) records the largest |value| of each head, and

    scale = amax x KV_HEADROOM / qmax          (qmax = 448 for fp8, 127 for int8)

leaves room for larger values later; anything beyond qmax x scale is clipped (saturated). Writing divides by the
scale and rounds to the format; reading (`read_blocks`) multiplies back, so attention computes with dequantized values
in the model dtype. A value's error is at most scale / 2 for int8 (inside the range) and 2^-4 of its size for
fp8 (3 mantissa bits; tiny values: 2^-10 x scale). The scales take 2 x KVH x 4 bytes per layer: the pool is one byte
per value, so the same memory holds twice as many blocks as bf16 (four times float32).
"""
from __future__ import annotations

import torch

from minimal_engine.checks import KV_CACHE_DTYPES, check_kv_cache_dtype  # noqa: F401 (the vocabulary: checks.py)
from minimal_engine.model.attention import ForwardBatch, PrefillChunk

QMAX = {"fp8": 448.0, "int8": 127.0}
KV_HEADROOM = 1.5          # scale covers 1.5 x the calibration's largest |value|
CALIBRATION_TOKENS = 256
CALIBRATION_SEED = 1234


def kv_bytes_per_value(kv_cache_dtype: str, model_dtype: torch.dtype) -> int:
    return model_dtype.itemsize if kv_cache_dtype == "auto" else 1


def quantize_kv(x: torch.Tensor, scale: torch.Tensor, kind: str) -> torch.Tensor:
    """x [..., Dh] float, scale broadcastable -> one byte per value (uint8 bytes of fp8 e4m3, or int8)."""
    y = (x.float() / scale).clamp_(-QMAX[kind], QMAX[kind])
    if kind == "fp8":
        return y.to(torch.float8_e4m3fn).view(torch.uint8)
    return y.round_().to(torch.int8)


def dequantize_kv(q: torch.Tensor, scale: torch.Tensor, kind: str, dtype: torch.dtype) -> torch.Tensor:
    """The inverse of quantize_kv: bytes -> values x scale in `dtype`."""
    y = q.view(torch.float8_e4m3fn).float() if kind == "fp8" else q.float()
    return (y * scale).to(dtype)


class QuantizedKVPool:
    """One layer's K (or V) pool: bytes [KVH, slots, Dh] + a scale per KV head [KVH]. It offers what
    attention.py uses of a pool tensor: `shape`, `index_copy_` (quantizes on write) and `read_blocks` (dequantizes
    the listed block rows on read)."""

    def __init__(self, kv_heads: int, slots: int, head_dim: int, kind: str, dtype: torch.dtype, device):
        self.kind, self.dtype = kind, dtype
        storage = torch.uint8 if kind == "fp8" else torch.int8
        self.data = torch.zeros(kv_heads, slots, head_dim, dtype=storage, device=device)   # [KVH, slots, Dh]
        self.scale = torch.ones(kv_heads, dtype=torch.float32, device=device)              # [KVH]
        self.amax = None               # [KVH] while calibrating: the largest |value| written per head
        self.shape = self.data.shape

    def start_calibration(self) -> None:
        """From now on, record the largest |value| written per head (calibrate_kv_scales)."""
        self.amax = torch.zeros_like(self.scale)

    def finish_calibration(self) -> None:
        """Each head's scale from its recorded largest value (with KV_HEADROOM); stop recording."""
        self.scale = (self.amax * KV_HEADROOM / QMAX[self.kind]).clamp_min(1e-8)
        self.amax = None

    def numel(self) -> int:
        return self.data.numel()

    def element_size(self) -> int:
        return 1

    def index_copy_(self, dim: int, index: torch.Tensor, src: torch.Tensor) -> "QuantizedKVPool":
        """src [KVH, T, Dh] (model dtype) -> quantized into the slots `index` (dim must be 1, the slot axis)."""
        assert dim == 1
        if self.amax is not None:
            self.amax = torch.maximum(self.amax, src.detach().float().abs().amax(dim=(1, 2)))
        self.data.index_copy_(1, index, quantize_kv(src, self.scale[:, None, None], self.kind))
        return self

    def read_blocks(self, rows: torch.Tensor, block_size: int) -> torch.Tensor:
        """Rows of the [KVH * blocks, block_size * Dh] view (row = head * blocks + block), dequantized:
        -> [len(rows) * block_size, Dh] in the model dtype (the same result as attention.gather_blocks)."""
        kvh, slots, dh = self.data.shape
        q = self.data.view(-1, block_size * dh).index_select(0, rows)               # [R, bs * Dh] bytes
        head_scale = self.scale[rows // (slots // block_size)][:, None]            # [R, 1]
        return dequantize_kv(q, head_scale, self.kind, self.dtype).view(-1, dh)

    def dequantized(self) -> torch.Tensor:
        """The whole pool as values [KVH, slots, Dh] (tests and notebooks; attention reads through read_blocks)."""
        return dequantize_kv(self.data, self.scale[:, None, None], self.kind, self.dtype)


def make_kv_caches(cfg, slots: int, kind: str, dtype: torch.dtype, device) -> list:
    """Per layer (K pool, V pool), each a QuantizedKVPool of [KVH, slots, Dh]."""
    return [tuple(QuantizedKVPool(cfg.num_kv_heads, slots, cfg.head_dim, kind, dtype, device) for _ in range(2))
            for _ in range(cfg.num_layers)]


@torch.inference_mode()
def calibrate_kv_scales(model, kv_caches: list, block_size: int, num_tokens: int = CALIBRATION_TOKENS) -> None:
    """Choose every pool's per-head scale from one prefill of a fixed token sequence (see the module text).
    The prefill writes into the first slots of the pool; no request owns them yet, and later writes replace them."""
    cfg = model.config
    pools = [p for pair in kv_caches for p in pair]
    n = min(num_tokens, pools[0].shape[1] - block_size, cfg.max_position_embeddings)
    gen = torch.Generator().manual_seed(CALIBRATION_SEED)
    ids = torch.randint(0, cfg.vocab_size, (n,), generator=gen).to(pools[0].data.device)       # [n]
    for p in pools:
        p.start_calibration()
    pos = torch.arange(n, device=ids.device)
    batch = ForwardBatch(positions=pos, slot_mapping=pos, num_decodes=0, decode=None,
                         prefills=[PrefillChunk(0, n, n, None)], logits_indices=pos[-1:], block_size=block_size)
    model(ids, batch, kv_caches)
    for p in pools:
        p.finish_calibration()
