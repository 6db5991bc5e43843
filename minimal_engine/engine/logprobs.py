"""Log-probabilities as vLLM returns them: for each generated (or prompt) token a dict
{token id: Logprob(logprob, rank, decoded_token)} holding the chosen token and the top k.

As vLLM's default (logprobs_mode "raw_logprobs"), they are the log-softmax of the raw model output:
before penalties, temperature, top-k and top-p. So they describe the model, not the sampling settings,
and a greedy and a sampled request see the same numbers for the same context.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

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


def score_prompt(logits: torch.Tensor, rows: list) -> dict[str, list]:
    """prompt_logprobs: the logprobs of the prompt tokens that rows predict, by request id. rows:
    (seq, first position, row offset, last position) as ModelRunner.prepare lays them out; logits:
    those rows' logits, in that order."""
    out, i = {}, 0
    for seq, first, _, last in rows:
        lps = logits[i:i + last - first].float().log_softmax(-1)
        k = seq.params.prompt_logprobs
        out[seq.request_id] = [token_logprobs(lps[j], seq.token_ids[pos + 1], k)
                               for j, pos in enumerate(range(first, last))]
        i += last - first
    return out


def with_text(entries: list, tokenizer) -> list:
    """The same entries with decoded_token filled in (the text of that one token); new objects, so
    an entry a request already holds never changes. The first prompt token has no entry (None)."""
    def text(t: int) -> str:
        return tokenizer.decode([t], skip_special_tokens=False)
    return [None if e is None else {t: replace(lp, decoded_token=text(t)) for t, lp in e.items()}
            for e in entries]
