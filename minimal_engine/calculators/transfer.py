"""Bytes that move between GPUs and engines, and how long they take (chapters 7 and 9), plain Python.

    kv_transfer_bytes("Llama 3.1 8B", 1000)         # a prompt's KV, whole blocks, prefill -> decode engine
    transfer_seconds(131_072_000, "PCIe 5.0 x16")   # bandwidth only, no latency
    chunked_prefill_steps(1000, 256, num_decodes=3) # steps a prompt takes under a token budget per step
    tp_allreduce_bytes(32, 4096)                     # what tensor parallelism all-reduces in one step

``minimal_engine.disagg.kv_connector`` moves the real blocks (torch); the arithmetic of the hand-off lives here.
"""
from __future__ import annotations

import math

from minimal_engine.calculators.kv import kv_bytes_per_token

__all__ = ["LINKS_GB_S", "kv_transfer_bytes", "transfer_seconds", "chunked_prefill_steps", "allreduce_bytes",
           "tp_allreduce_bytes"]

# Link bandwidths for "how long would this transfer take" (GB/s = 1e9 B/s, one direction, nominal).
LINKS_GB_S = {
    "NVLink (H100/H200)": 450.0,    # published_points.md §G: H100/H200 scale-up 450 GB/s per GPU, uni-directional
    "NVLink (B200)": 900.0,         # published_points.md §G: NVLink5 900 GB/s
    "PCIe 5.0 x16": 64.0,           # PCI-SIG PCIe 5.0: 32 GT/s x 16 lanes, 128b/130b: ~63 GB/s per direction
    "InfiniBand NDR (400 Gb/s)": 50.0,   # NDR: 400 Gb/s per port = 50 GB/s (NVIDIA ConnectX-7 product brief)
}


def kv_transfer_bytes(model, prompt_len: int, dtype="bf16", block_size: int = 16) -> int:
    """Bytes of KV a prompt of `prompt_len` tokens moves from prefill to decode: whole blocks, all layers,
    K and V (``kv.kv_bytes_per_token``: counts KV heads, or MLA's latent)."""
    if not isinstance(prompt_len, int) or prompt_len < 1:
        raise ValueError(f"prompt_len must be a positive integer (tokens), got {prompt_len!r}")
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer (tokens per block), got {block_size!r}")
    return math.ceil(prompt_len / block_size) * block_size * kv_bytes_per_token(model, dtype)


def transfer_seconds(num_bytes: float, link: str | float) -> float:
    """Time to move num_bytes over a link (a name of LINKS_GB_S, or GB/s), bandwidth only (no latency)."""
    gb_s = LINKS_GB_S.get(link) if isinstance(link, str) else link
    if gb_s is None:
        raise ValueError(f"unknown link {link!r}: give GB/s or one of {list(LINKS_GB_S)}")
    if isinstance(gb_s, bool) or not isinstance(gb_s, (int, float)) or gb_s <= 0:
        raise ValueError(f"link bandwidth must be a positive number of GB/s, got {gb_s!r}")
    return num_bytes / (gb_s * 1e9)


def chunked_prefill_steps(prompt_len: int, budget: int, num_decodes: int = 0) -> int:
    """Steps a prompt's prefill takes when every step holds at most `budget` tokens (max_num_batched_tokens) and
    `num_decodes` running requests take one token each first (as the scheduler): ceil(prompt / (budget - decodes))."""
    for name, v in (("prompt_len", prompt_len), ("budget", budget), ("num_decodes", num_decodes)):
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "num_decodes" else 1):
            raise ValueError(f"{name} must be a {'non-negative' if name == 'num_decodes' else 'positive'} integer, got {v!r}")
    if budget <= num_decodes:
        raise ValueError(f"budget ({budget}) must exceed num_decodes ({num_decodes}) to leave room for the prompt")
    return math.ceil(prompt_len / (budget - num_decodes))


def allreduce_bytes(hidden_size: int, tokens: float = 1, bytes_per_value: float = 2) -> float:
    """Bytes of one tensor-parallel all-reduce: the [tokens, hidden] activations (the simulator's ring)."""
    return hidden_size * tokens * bytes_per_value


def tp_allreduce_bytes(layers: int, hidden_size: int, tokens: int = 1, bytes_per_value: float = 2) -> int:
    """Bytes tensor parallelism all-reduces in one step (chapter 7): 2 per layer (after o_proj and down_proj)
    of [tokens, hidden] values, whatever the TP size (a ring moves 2 (N-1)/N of it per GPU)."""
    return int(2 * layers * allreduce_bytes(hidden_size, tokens, bytes_per_value))
