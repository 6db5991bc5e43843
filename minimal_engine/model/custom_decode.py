"""Chapter 3's exercise hook: LLM(decode_attention=fn) sends every decode row through the learner's
function (course/exercises/ex03_attention_decode.py); read after the core path.

attention.py gathers each request's blocks as for the CPU path and hands them here; the function
sees one request at a time over exactly its context, token-major as a textbook writes it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from minimal_engine.hooks import decode_attention as run_hook


@dataclass
class CustomDecode:
    """fn(q [H, Dh], k [L, KVH, Dh], v [L, KVH, Dh]) -> [H, Dh], per request."""
    fn: Callable
    block_tables: torch.Tensor          # [D, W] block numbers, padded with block 0
    context_lens: list[int]

    def attend(self, q: torch.Tensor, kd: torch.Tensor, vd: torch.Tensor) -> torch.Tensor:
        """q [D, H, Dh]; kd, vd: each request's gathered blocks [D, KVH, W * block_size, Dh]
        -> [D, H, Dh]."""
        kd, vd = kd.transpose(1, 2), vd.transpose(1, 2)            # [D, W * bs, KVH, Dh]
        return torch.stack([run_hook(self.fn, q[i], kd[i, :n], vd[i, :n])
                            for i, n in enumerate(self.context_lens)])   # checked, on copies
