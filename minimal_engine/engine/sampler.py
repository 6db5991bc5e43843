"""Sampler: next-token logits -> tokens (greedy, temperature, min-p, top-k, top-p, seeds).

Greedy rows take the argmax; others are divided by their temperature, masked (-inf) by min-p,
top-k and top-p and drawn from the softmax, with the request's own torch.Generator when it has a
seed (the same tokens whatever else is in the batch). First, in vLLM's order: the grammar's mask,
logit_bias, min_tokens (masks EOS and stop tokens) and the penalties (greedy rows too). A row that
fails gives its exception instead of a token: that request alone fails.
"""
from __future__ import annotations

import torch

from minimal_engine.sampling_params import SamplingParams


def apply_penalties(row: torch.Tensor, seq, p: SamplingParams) -> torch.Tensor:
    """row: [vocab] float32. vLLM's formulas: repetition (prompt and output tokens: positive logits
    divided, negative multiplied), then frequency (times the count in the output) and presence."""
    vocab = row.shape[-1]
    out_ids = torch.tensor(seq.output_token_ids, dtype=torch.long, device=row.device)
    counts = torch.bincount(out_ids[out_ids < vocab], minlength=vocab).to(row.dtype)
    if p.repetition_penalty != 1:
        seen = counts > 0
        prompt = torch.tensor(seq.token_ids[:seq.num_prompt_tokens], device=row.device)
        seen[prompt[prompt < vocab]] = True
        r = p.repetition_penalty
        row = torch.where(seen, torch.where(row > 0, row / r, row * r), row)
    return row - p.frequency_penalty * counts - p.presence_penalty * (counts > 0).to(row.dtype)


def adjust(row: torch.Tensor, seq) -> torch.Tensor:
    """The grammar's mask, logit_bias, the min_tokens mask and the penalties of one sequence (a copy
    when anything changes). The grammar comes first: vLLM applies its bitmask to the raw logits."""
    p = seq.params
    if seq.grammar is not None:
        row = seq.grammar.mask(row)
    if p.logit_bias:
        vocab = row.shape[-1]
        ids = [t for t in p.logit_bias if t < vocab]
        row = row.clone()
        row[ids] += torch.tensor([p.logit_bias[t] for t in ids], dtype=row.dtype, device=row.device)
    if p.penalized:
        row = apply_penalties(row, seq, p)
    if seq.num_output_tokens < p.min_tokens and seq.min_tokens_ids:
        row = row.clone()
        row[[t for t in seq.min_tokens_ids if t < row.shape[-1]]] = float("-inf")
    return row


def apply_top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the top_k largest logits of each row (ties at the k-th value are kept); -1 keeps all."""
    if top_k == -1 or top_k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def apply_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Drop the tokens less likely than min_p times the most likely one (vLLM's min-p)."""
    if min_p <= 0:
        return logits
    probs = logits.softmax(dim=-1)
    return logits.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), float("-inf"))


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
    row = apply_top_p(apply_top_k(apply_min_p(row / p.temperature, p.min_p), p.top_k), p.top_p)
    probs = row.softmax(dim=-1)
    if gen is not None and gen.device != probs.device:
        probs = probs.to(gen.device)
    return torch.multinomial(probs, 1, generator=gen).item()


def sample(logits: torch.Tensor, params: list[SamplingParams],
           generators: list[torch.Generator | None], seqs: list | None = None) -> list:
    """logits: [S, vocab] float32, one row per request that samples this step; seqs: their Sequences
    (the grammar, penalties and min_tokens need them). Returns one token id per row, or the
    exception that row raised (that request fails)."""
    tokens: list = logits.argmax(dim=-1).tolist()
    for i, p in enumerate(params):
        seq = seqs[i] if seqs is not None else None
        row = logits[i].float()
        try:
            if seq is not None and p.adjusts_logits:
                row = adjust(row, seq)
                tokens[i] = int(row.argmax().item())
            if not p.greedy:
                tokens[i] = sample_row(row[None], p, generators[i])
        except (RuntimeError, ValueError) as e:     # this request alone fails
            tokens[i] = e
    return tokens
