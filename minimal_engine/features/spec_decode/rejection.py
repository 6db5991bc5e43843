"""Verification's sampling rule: the exact rejection sampler of speculative decoding, and the distribution the
sampler would draw from (so draft and target are compared on the same temperature / top-k / top-p)."""
from __future__ import annotations

import torch

from minimal_engine.hooks import per_token_rule as checked_rule
from minimal_engine.engine.sampler import apply_top_k, apply_top_p


def rejection_sample(target_probs: torch.Tensor, draft_probs: torch.Tensor | None, draft_ids: torch.Tensor,
                     generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact rule of Leviathan et al. (2023) / Chen et al. (2023), for B independent rows at once.

    target_probs: [B, k+1, V] the target's p at each draft position (+ one past the last draft);
    draft_probs: [B, k, V] the proposer's q (None: a deterministic proposer, q is one-hot on the draft);
    draft_ids: [B, k]. Draft i is accepted with probability min(1, p_i(x) / q_i(x)); at the first rejection the
    token is drawn from norm(max(0, p_i - q_i)); when all k are accepted a bonus token is drawn from p_k.
    Returns (tokens [B, k+1], num_accepted [B]): row b's output is tokens[b, :num_accepted[b] + 1].
    """
    b, k1, v = target_probs.shape
    k = k1 - 1
    if draft_probs is None:
        draft_probs = torch.nn.functional.one_hot(draft_ids, v).to(target_probs.dtype)          # [B, k, V]
    p_x = target_probs[:, :k].gather(-1, draft_ids[..., None])[..., 0]                         # [B, k]
    q_x = draft_probs.gather(-1, draft_ids[..., None])[..., 0]                                 # [B, k]
    u = torch.rand(b, k, generator=generator, device=target_probs.device)
    accepted = u * q_x < p_x                                 # u < p/q without dividing by a zero q
    num_accepted = accepted.long().cumprod(-1).sum(-1)       # [B] drafts accepted before the first rejection
    residual = (target_probs[:, :k] - draft_probs).clamp_min(0)                                # [B, k, V]
    residual = torch.cat([residual, target_probs[:, k:]], 1)                                   # [B, k+1, V]
    rows = residual[torch.arange(b, device=residual.device), num_accepted]                     # [B, V]
    mass = rows.sum(-1, keepdim=True)
    rows = torch.where(mass > 0, rows, target_probs[torch.arange(b, device=rows.device), num_accepted])
    last = torch.multinomial(rows / rows.sum(-1, keepdim=True), 1, generator=generator)[:, 0]  # [B]
    tokens = torch.cat([draft_ids, last[:, None]], 1).clone()                                  # [B, k+1]
    tokens[torch.arange(b, device=tokens.device), num_accepted] = last
    return tokens, num_accepted


def per_token_rule(rule):
    """A one-draft rule rule(p [V], q [V], draft_token, generator) -> (accepted, token) (chapter 8's exercise) as a
    sampler with rejection_sample's signature: drafts are decided left to right until the first rejection, and a
    bonus token is drawn from p_k when all are accepted. Same distribution, another use of the random stream."""
    def sampler(target_probs, draft_probs, draft_ids, generator=None):
        b, k1, v = target_probs.shape
        if draft_probs is None:
            draft_probs = torch.nn.functional.one_hot(draft_ids, v).to(target_probs.dtype)
        tokens, counts = draft_ids.new_zeros(b, k1), draft_ids.new_zeros(b)
        for r in range(b):
            n = 0
            for i in range(k1 - 1):
                answer = rule(target_probs[r, i].clone(), draft_probs[r, i].clone(),
                              int(draft_ids[r, i]), generator)            # on copies
                accepted, token = checked_rule(rule, answer, v)
                tokens[r, i] = int(token)
                if not accepted:
                    break
                n += 1
            else:
                tokens[r, k1 - 1] = int(torch.multinomial(target_probs[r, k1 - 1], 1, generator=generator))
            counts[r] = n
        return tokens, counts
    return sampler


def probs_of(logits: torch.Tensor, params) -> torch.Tensor:
    """logits: [n, V] -> the distribution the sampler would draw from (temperature, top-k, top-p): [n, V]."""
    return apply_top_p(apply_top_k(logits.float() / params.temperature, params.top_k), params.top_p).softmax(-1)
