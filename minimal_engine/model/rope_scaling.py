"""RoPE scaling for long contexts (config.json's rope_scaling); read after the core path.

model/llama.py's rope_inv_freq computes the plain rotation speeds and hands them here when the
checkpoint asks for a scaling: "linear" slows every frequency by `factor`; Llama 3.x's "llama3"
slows only the low frequencies (long wavelengths) and blends smoothly in between.
"""
from __future__ import annotations

import math

import torch


def scaled_inv_freq(inv_freq: torch.Tensor, rs: dict) -> torch.Tensor:
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "linear":
        return inv_freq / rs["factor"]
    if kind == "llama3":
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old_len = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        return torch.where(medium, smoothed, scaled)
    raise ValueError(f"unsupported rope_scaling type {kind!r}: supported are default, linear, "
                     "llama3")
