"""Log-probabilities as vLLM returns them: for each generated (or prompt) token a dict
{token id: Logprob(logprob, rank, decoded_token)} holding the chosen token and the top k.

As vLLM's default (logprobs_mode "raw_logprobs"), they are the log-softmax of the raw model output:
before penalties, temperature, top-k and top-p. So they describe the model, not the sampling settings,
and a greedy and a sampled request see the same numbers for the same context.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Logprob:
    logprob: float
    rank: int                       # 1 = the most likely token
    decoded_token: str | None = None


def token_logprobs(logprobs: torch.Tensor, token: int, k: int) -> dict[int, Logprob]:
    """logprobs: [vocab] log-softmax of one row. The chosen token (with its rank) plus the top k."""
    chosen = logprobs[token]
    out = {token: Logprob(chosen.item(), int((logprobs > chosen).sum().item()) + 1)}
    if k > 0:
        top = torch.topk(logprobs, k)
        for rank, (v, i) in enumerate(zip(top.values.tolist(), top.indices.tolist()), start=1):
            if i not in out:
                out[i] = Logprob(v, rank)
    return out


def decode_logprobs(entries: list[dict[int, Logprob]], tokenizer) -> None:
    """Fill decoded_token of every entry (the text of that one token)."""
    for entry in entries:
        for tid, lp in (entry or {}).items():       # the first prompt token has no entry (None)
            if lp is not None and lp.decoded_token is None:
                lp.decoded_token = tokenizer.decode([tid], skip_special_tokens=False)
