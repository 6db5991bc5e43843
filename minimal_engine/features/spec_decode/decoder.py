"""Speculative decoding (chapter 8): a cheap proposer guesses k tokens, the target model checks them all in ONE
forward pass, and every guess it agrees with is a token gained without a step of its own.

    LLM(speculative_config={"method": "ngram", "num_speculative_tokens": 4,
                            "prompt_lookup_max": 3, "prompt_lookup_min": 1})   # 3-grams, falling back to 1-grams
    LLM(speculative_config={"method": "draft_model", "num_speculative_tokens": 4})   # the shipped draft model

LLM builds a SpecDecoder and gives it to LLMEngine (`speculator=`), which gives it to its
ModelRunner. One step:
  1. engine -> propose(): for every running request that is decoding, the proposer guesses up to k
     draft tokens and returns them as data ({request id: drafts}); nothing is added to the request.
     The scheduler schedules the drafts each request can afford (token budget, free KV blocks)
     after its last token (ScheduledSeq.spec_token_ids), like a short chunk of chunked prefill.
  2. one target forward over every scheduled token; the runner hands the logits of each request's
     last 1 + k rows to verify(): greedy requests keep drafts while they equal the target's argmax,
     sampled ones use the exact rejection sampler (rejection.py). One more token (a correction, or
     the bonus) comes from the target.
  3. the step result is a list of tokens per request (1..k+1 here); Scheduler.update_from_output
     appends them as ordinary tokens (stop checks, detokenizer, metrics), keeps the accepted drafts'
     K/V and gives the KV blocks past them back to the pool (block_manager.trim). Rejected tokens'
     K/V slots are simply overwritten later.

Proposers (proposers.py): "ngram" (prompt lookup) and "draft_model" (a small model with its own KV pool). Refused with a ValueError: penalties, min_tokens, logprobs,
prompt_logprobs, prefix caching, static batching, CUDA graphs.
"""
from __future__ import annotations

from pathlib import Path

import torch

from minimal_engine.hooks import checked_rejection_sampler
from minimal_engine.calculators.roofline import spec_speedup as expected_speedup  # noqa: F401 (chapter 8's formula)
from minimal_engine.calculators.roofline import spec_tokens_per_step as expected_tokens_per_step  # noqa: F401
from minimal_engine.engine.sampler import sample
from minimal_engine.features.spec_decode.proposers import DraftProposer, TargetInfo, ngram_propose
from minimal_engine.features.spec_decode.rejection import probs_of, rejection_sample

DRAFT_MODEL = Path(__file__).resolve().parents[2] / "draft_model"
MAX_SPECULATIVE_TOKENS = 16
KEYS = {"ngram": {"method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"},
        "draft_model": {"method", "num_speculative_tokens", "model"}}


def ngram_window(n_min, n_max) -> tuple:
    """(prompt_lookup_min, prompt_lookup_max) as vLLM fills them in: neither given -> 5 and 5; only one given -> the
    other equals it (so {"prompt_lookup_max": 3} looks up 3-grams only; pass "prompt_lookup_min": 1 for the 3 -> 1
    fallback). Source: vLLM vllm/config/speculative.py, SpeculativeConfig.__post_init__, the ngram branch
    (github.com/vllm-project/vllm, commit f19b16d95e4395790661f4835e4436bc3dd5d9c7; read 2026-12-07)."""
    if n_min is None and n_max is None:
        return 5, 5
    return (n_max if n_min is None else n_min), (n_min if n_max is None else n_max)


class SpecDecoder:
    """The engine's speculative decoding: built by LLM from speculative_config; holds the proposer and totals."""

    def __init__(self, spec: dict, target: TargetInfo, rejection_sampler=None):
        """rejection_sampler: rejection_sample's signature; None is rejection_sample (chapter 8's exercise passes
        the learner's rule through rejection.per_token_rule)."""
        if not isinstance(spec, dict):
            raise ValueError(f"speculative_config must be a dict, got {type(spec).__name__}")
        method = spec.get("method")
        if method not in KEYS:
            raise ValueError(f"speculative_config: method must be one of {sorted(KEYS)}, got {method!r}")
        unknown = set(spec) - KEYS[method]
        if unknown:
            raise ValueError(f"speculative_config: unknown keys {sorted(unknown)} for method {method!r}; "
                             f"allowed: {sorted(KEYS[method])}")
        k = spec.get("num_speculative_tokens")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
            raise ValueError(f"speculative_config: num_speculative_tokens must be an integer in "
                             f"[1, {MAX_SPECULATIVE_TOKENS}], got {k!r}")
        self.method, self.k = method, k
        self.n_min, self.n_max = ngram_window(spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max"))
        for name, n, hi in (("prompt_lookup_max", self.n_max, 64), ("prompt_lookup_min", self.n_min, self.n_max)):
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= hi:
                raise ValueError(f"speculative_config: {name} must be an integer in [1, {hi}], got {n!r}")
        cfg = target.config
        for bad, what in ((cfg.batching != "continuous", "batching='static'"),
                          (cfg.enable_prefix_caching, "enable_prefix_caching=True"),
                          (cfg.cuda_graphs is True, "cuda_graphs=True")):
            if bad:
                raise ValueError(f"speculative decoding does not support {what}: leave it at its default")
        self.max_model_len = cfg.max_model_len
        self.draft = DraftProposer(spec.get("model") or DRAFT_MODEL, target, k) if method == "draft_model" else None
        self.rejection_sample = (checked_rejection_sampler(rejection_sampler) if rejection_sampler
                                 else rejection_sample)        # a learner's answers are checked
        self.q: dict = {}                    # request id -> the draft's q [k, V] (None: one-hot proposals)
        self.proposed = self.accepted = self.steps = 0
        self.accepted_at = [0] * k           # per draft position: verification steps that kept the draft there
        self.last_verified: list = []        # the latest verify call: (seq, drafts, tokens) per request with drafts

    def validate(self, params) -> None:
        """Refuse what the verifier does not compute (it would give other tokens or miss fields)."""
        for bad, what in ((params.penalized, "repetition/frequency/presence penalties"),
                          (params.min_tokens, "min_tokens"), (params.logit_bias is not None, "logit_bias"),
                          (params.min_p > 0, "min_p"), (params.structured_outputs is not None, "structured_outputs"),
                          (params.logprobs is not None, "logprobs"),
                          (params.prompt_logprobs is not None, "prompt_logprobs")):
            if bad:
                raise ValueError(f"{what} is not supported with speculative decoding (speculative_config)")

    def stats(self) -> dict:
        """Engine totals: proposed and accepted drafts, acceptance rate, mean accepted length (tokens per step), and
        per draft position i the share of verification steps that kept an i-th draft (vLLM's acceptance rate per
        position: it falls with i, since the i-th draft counts only when every one before it was kept; the shares
        add up to mean_accepted_length - 1)."""
        return {"proposed": self.proposed, "accepted": self.accepted, "steps": self.steps,
                "acceptance_rate": self.accepted / self.proposed if self.proposed else None,
                "mean_accepted_length": 1 + self.accepted / self.steps if self.steps else None,
                "acceptance_by_position": [a / self.steps if self.steps else None for a in self.accepted_at]}

    # ---- called by LLMEngine.step and ModelRunner.run ----------------------------------------------------
    def propose(self, seqs: list) -> dict[str, list[int]]:
        """{request id: up to k drafts} for the requests among seqs that decode. Reads them only."""
        self.q = {}                                            # q's live for one step: verify() takes them
        items = []
        for seq in seqs:
            if seq.num_uncomputed_tokens != 1:                 # still prefilling: nothing to guess yet
                continue
            cap = min(seq.num_prompt_tokens + seq.params.max_tokens, self.max_model_len) - 1  # KV tokens
            k = min(self.k, cap - len(seq))
            if k > 0:
                items.append((seq, k))
        if self.draft is not None:
            found = self.draft.propose(items)
        else:
            found = {seq: (ngram_propose(seq.token_ids, k, self.n_max, self.n_min), None) for seq, k in items}
        drafts = {}
        for seq, (ids, q) in found.items():
            if ids:
                drafts[seq.request_id], self.q[seq.request_id] = list(ids), q
        return drafts

    def verify(self, logits: torch.Tensor, steps: list) -> dict:
        """logits: [sum(1 + k_i), V], the last 1 + k_i rows of each ScheduledSeq in steps (k_i: its
        scheduled drafts). Returns {request id: [accepted drafts..., one more]} (just [token] without
        drafts), or {request id: the exception} where verification failed. `last_verified` keeps
        this call's decisions."""
        out, i = {}, 0
        self.last_verified = []
        for s in steps:
            seq, drafts, p = s.seq, s.spec_token_ids, s.seq.params
            k, rid = len(drafts), seq.request_id
            rows = logits[i:i + k + 1].float()                                    # [k+1, V]
            i += k + 1
            q = self.q.pop(rid, None)
            if not k:
                token = sample(rows, [p], [seq.generator], [seq])[0]
                out[rid] = token if isinstance(token, Exception) else [token]
                continue
            try:
                ids = torch.tensor(drafts, device=rows.device)                    # [k]
                if p.greedy:
                    target = rows.argmax(-1)                                      # [k+1]
                    n = int((ids == target[:k]).long().cumprod(0).sum())
                    tokens = drafts[:n] + [int(target[n])]
                else:
                    q = None if q is None else q[:k]                      # the drafts the step kept
                    t, n = self.rejection_sample(probs_of(rows, p)[None],
                                                 None if q is None else q[None], ids[None],
                                                 seq.generator)
                    n = int(n[0])
                    tokens = t[0, :n + 1].tolist()
            except (RuntimeError, ValueError) as e:                               # this request alone fails
                out[rid] = e
                continue
            self.proposed, self.accepted, self.steps = self.proposed + k, self.accepted + n, self.steps + 1
            for j in range(n):
                self.accepted_at[j] += 1
            out[rid] = tokens
            self.last_verified.append((seq, list(drafts), tokens))
        return out
