"""Sampler: turn next-token logits into tokens (greedy, temperature, top-k, top-p, per-request seeds).

Greedy rows take the argmax. Other rows are divided by their temperature, masked by top-k and top-p
(masked logits become -inf) and drawn from the softmax, each with its own torch.Generator when the
request has a seed, so the same seed gives the same tokens whatever else is in the batch.
Each row is sampled on its own: when one row fails (e.g. its logits are not finite), that row's entry is
the exception instead of a token and the engine fails that request alone; the other rows are unaffected.
"""
from __future__ import annotations

import torch

from .sampling_params import SamplingParams


def apply_top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the top_k largest logits of each row (ties at the k-th value are kept); -1 keeps all."""
    if top_k == -1 or top_k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def apply_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose probabilities sum to at least top_p."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs          # mass of the tokens ranked above each one
    drop_sorted = before >= top_p                  # the first token is never dropped
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def sample_row(row: torch.Tensor, p: SamplingParams, gen: torch.Generator | None) -> int:
    """row: [1, vocab] logits of one request that samples (not greedy)."""
    row = apply_top_p(apply_top_k(row / p.temperature, p.top_k), p.top_p)
    probs = row.softmax(dim=-1)
    if gen is not None and gen.device != probs.device:
        probs = probs.to(gen.device)
    return torch.multinomial(probs, 1, generator=gen).item()


def sample(logits: torch.Tensor, params: list[SamplingParams],
           generators: list[torch.Generator | None]) -> list:
    """logits: [S, vocab] float32, one row per request that samples this step.
    Returns one token id per row, or the exception that row raised (the engine fails that request)."""
    tokens: list = logits.argmax(dim=-1).tolist()
    for i, p in enumerate(params):
        if p.greedy:
            continue
        try:
            tokens[i] = sample_row(logits[i:i + 1], p, generators[i])
        except (RuntimeError, ValueError) as e:     # this request alone fails
            tokens[i] = e
    return tokens
