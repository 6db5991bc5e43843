"""Speculative decoding (chapter 8): a cheap proposer guesses k tokens, the target model checks them all in ONE
forward pass, and every guess it agrees with is a token gained without a step of its own.

    LLM(speculative_config={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3})
    LLM(speculative_config={"method": "draft_model", "num_speculative_tokens": 4})   # the shipped draft model

One engine step with speculation (LLMEngine.step calls the hooks in this order):
  1. propose(): for every running request that is decoding, the proposer appends up to k draft tokens to its
     token list (and remembers them in seq.spec_token_ids). The scheduler then sees 1 + k uncomputed tokens and
     schedules them like a chunk of chunked prefill: KV blocks, token budget and preemption as usual.
  2. fit(): drafts the scheduler did not schedule (token budget, preemption) are taken back.
  3. one target forward over every scheduled token; the runner hands the logits of each request's last 1 + k rows
     to verify(): greedy requests keep drafts while they equal the target's argmax, sampled ones use the exact
     rejection sampler below. One more token (a correction, or the bonus) comes from the target: 1..k+1 tokens.
  4. accept(): drafts leave the token list, accepted ones come back as ordinary tokens (stop checks,
     detokenizer, metrics), and the KV blocks past the accepted tokens go back to the pool
     (block_manager.trim). Rejected tokens' K/V slots are simply overwritten later.

Proposers: "ngram" (prompt lookup; no model, q is one-hot) and "draft_model" (a small model with the same tokenizer
and its own KV pool; q is its distribution). Refused with a ValueError: penalties, min_tokens, logprobs,
prompt_logprobs, prefix caching, static batching, CUDA graphs.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from minimal_engine.calculators.roofline import spec_speedup as expected_speedup, spec_tokens_per_step as expected_tokens_per_step  # noqa
from minimal_engine.engine.sampler import apply_top_k, apply_top_p, sample

DRAFT_MODEL = Path(__file__).resolve().parents[2] / "draft_model"
MAX_SPECULATIVE_TOKENS = 16
KEYS = {"ngram": {"method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"},
        "draft_model": {"method", "num_speculative_tokens", "model"}}


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


def probs_of(logits: torch.Tensor, params) -> torch.Tensor:
    """logits: [n, V] -> the distribution the sampler would draw from (temperature, top-k, top-p): [n, V]."""
    return apply_top_p(apply_top_k(logits.float() / params.temperature, params.top_k), params.top_p).softmax(-1)


def ngram_propose(tokens: list[int], k: int, n_max: int, n_min: int = 1) -> list[int]:
    """Prompt lookup: the longest suffix n-gram (n_max..n_min) that occurred earlier; propose up to k tokens that
    followed its most recent earlier occurrence with k tokens after it (else the longest continuation)."""
    length = len(tokens)
    for n in range(min(n_max, length - 1), n_min - 1, -1):
        tail, best = tokens[length - n:], []
        for start in range(length - n - 1, -1, -1):
            if tokens[start:start + n] == tail:
                cont = tokens[start + n:start + n + k]
                best = cont if len(cont) > len(best) else best
                if len(best) == k:
                    break
        if best:
            return best
    return []


class DraftProposer:
    """A small model with its own KV pool. Each request has a shadow Sequence in the draft's pool; after a step
    only the K/V of tokens the target kept stay valid (the accepted drafts were computed by the draft already)."""

    def __init__(self, path, llm, k: int):
        from minimal_engine.engine.block_manager import BlockManager
        from minimal_engine.config import EngineConfig, ModelConfig
        from minimal_engine.engine.model_runner import ModelRunner
        from minimal_engine.model.loader import load_model, resolve_model_path
        from minimal_engine.model.tokenizer import Tokenizer
        path = resolve_model_path(path)
        mc = ModelConfig.from_folder(path)
        if mc.vocab_size != llm.model_config.vocab_size:
            raise ValueError(f"speculative_config: the draft model's vocab_size {mc.vocab_size} differs from the "
                             f"target's {llm.model_config.vocab_size}: the draft needs the target's tokenizer")
        if Tokenizer(path).hf.get_vocab() != llm.tokenizer.hf.get_vocab():
            raise ValueError("speculative_config: the draft model's tokenizer differs from the target's "
                             "(token ids must mean the same text)")
        if mc.max_position_embeddings < llm.config.max_model_len:
            raise ValueError(f"speculative_config: the draft model has {mc.max_position_embeddings} positions, "
                             f"fewer than max_model_len={llm.config.max_model_len}: lower max_model_len")
        cfg, bs = llm.config, llm.config.block_size
        blocks = llm.engine.block_manager.num_blocks + cfg.max_num_seqs * (k // bs + 2)
        ecfg = EngineConfig(block_size=bs, max_num_seqs=cfg.max_num_seqs, max_model_len=cfg.max_model_len,
                            cuda_graphs=False)
        self.runner = ModelRunner(load_model(path, mc, llm.dtype, llm.device), ecfg, blocks, llm.dtype, llm.device)
        self.bm = BlockManager(blocks, bs)
        self.shadows: dict = {}              # request id -> its Sequence in the draft's pool

    def _forward(self, scheduled: list) -> dict:
        """One draft forward over [(shadow, start, num_tokens)]; returns {shadow: logits [V]} of each last row."""
        from minimal_engine.engine.scheduler import ScheduledSeq, SchedulerOutput
        input_ids, batch, order = self.runner.prepare(SchedulerOutput([ScheduledSeq(*s) for s in scheduled]))
        logits = self.runner.model(input_ids, batch, self.runner.kv_caches)       # [S, V]
        return dict(zip([s.seq for s in order if s.samples], logits.float()))

    @torch.inference_mode()
    def propose(self, items: list) -> dict:
        """items: [(seq, k_eff)]; returns {seq: (draft ids, q [k_eff, V])}."""
        from minimal_engine.engine.sequence import Sequence
        live = {seq.request_id for seq, _ in items}
        for rid in [r for r in self.shadows if r not in live]:       # finished, aborted or preempted requests
            self.bm.free(self.shadows.pop(rid))
        active = []
        for seq, k in items:
            sh = self.shadows.get(seq.request_id)
            if sh is None:
                sh = self.shadows[seq.request_id] = Sequence(seq.request_id, None, seq.token_ids, seq.params)
                sh.safe = 0
            else:                            # K/V stay valid up to the first token that differs from the target's
                c, end = sh.safe, min(sh.num_computed_tokens, len(seq) - 1)   # >= 1 token left to run
                while c < end and sh.token_ids[c] == seq.token_ids[c]:
                    c += 1
                sh.num_computed_tokens, sh.token_ids, sh.safe = c, list(seq.token_ids), len(seq)
                self.bm.trim(sh, c)
            need = len(seq) + k - 1                                    # the last draft's K/V is never computed
            if self.bm.can_allocate(sh, need):                         # else: no drafts for it this step
                self.bm.allocate(sh, need)
                active.append((seq, sh, k, []))
        drafts = {}
        for i in range(max((k for _, _, k, _ in active), default=0)):
            step = [(sh, sh.num_computed_tokens, len(sh) - sh.num_computed_tokens) for _, sh, k, _ in active if k > i]
            logits = self._forward(step)
            for seq, sh, k, qs in active:
                if k <= i:
                    continue
                sh.num_computed_tokens = len(sh)
                if seq.params.greedy:
                    token, q = int(logits[sh].argmax()), None
                else:
                    q = probs_of(logits[sh][None], seq.params)[0]
                    token = int(torch.multinomial(q, 1, generator=seq.generator))
                sh.token_ids.append(token)
                qs.append(q)
                if len(qs) == k:
                    drafts[seq] = (sh.token_ids[len(seq):], None if q is None else torch.stack(qs))
        return drafts


class SpecDecoder:
    """The engine's speculative decoding: built by LLM from speculative_config; holds the proposer and totals."""

    def __init__(self, spec: dict, llm):
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
        self.n_max, self.n_min = spec.get("prompt_lookup_max", 3), spec.get("prompt_lookup_min", 1)
        for name, n, hi in (("prompt_lookup_max", self.n_max, 64), ("prompt_lookup_min", self.n_min, self.n_max)):
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= hi:
                raise ValueError(f"speculative_config: {name} must be an integer in [1, {hi}], got {n!r}")
        cfg = llm.config
        for bad, what in ((cfg.batching != "continuous", "batching='static'"),
                          (cfg.enable_prefix_caching, "enable_prefix_caching=True"),
                          (cfg.cuda_graphs is True, "cuda_graphs=True")):
            if bad:
                raise ValueError(f"speculative decoding does not support {what}: leave it at its default")
        llm.engine.runner.set_cuda_graphs(False)
        self.engine = llm.engine
        self.draft = DraftProposer(spec.get("model") or DRAFT_MODEL, llm, k) if method == "draft_model" else None
        self.q: dict = {}                    # request id -> the draft's q [k, V] (None: one-hot proposals)
        self.proposed = self.accepted = self.steps = 0

    def validate(self, params) -> None:
        """Refuse what the verifier does not compute (it would give other tokens or miss fields)."""
        for bad, what in ((params.penalized, "repetition/frequency/presence penalties"),
                          (params.min_tokens, "min_tokens"), (params.logprobs is not None, "logprobs"),
                          (params.prompt_logprobs is not None, "prompt_logprobs")):
            if bad:
                raise ValueError(f"{what} is not supported with speculative decoding (speculative_config)")

    def stats(self) -> dict:
        """Engine totals: proposed and accepted drafts, acceptance rate, mean accepted length (tokens per step)."""
        return {"proposed": self.proposed, "accepted": self.accepted, "steps": self.steps,
                "acceptance_rate": self.accepted / self.proposed if self.proposed else None,
                "mean_accepted_length": 1 + self.accepted / self.steps if self.steps else None}

    # ---- hooks called by LLMEngine.step ------------------------------------------------------------------
    def propose(self, running: list) -> None:
        items = []
        for seq in running:
            if seq.num_uncomputed_tokens != 1:                 # still prefilling: nothing to guess yet
                continue
            cap = min(seq.num_prompt_tokens + seq.params.max_tokens, self.engine.max_model_len) - 1  # KV tokens
            k = min(self.k, cap - len(seq))
            if k > 0:
                items.append((seq, k))
        if self.draft is not None:
            found = self.draft.propose(items)
        else:
            found = {seq: (ngram_propose(seq.token_ids, k, self.n_max, self.n_min), None) for seq, k in items}
        for seq, (ids, q) in found.items():
            if ids:
                seq.token_ids.extend(ids)
                seq.spec_token_ids = list(ids)
                self.q[seq.request_id] = q

    def _keep(self, seq, keep: int) -> None:
        """Take back all drafts of seq except the first `keep`."""
        n = len(seq.spec_token_ids)
        if keep < n:
            del seq.token_ids[len(seq) - n + keep:]
            seq.spec_token_ids = seq.spec_token_ids[:keep]
            q = self.q.get(seq.request_id)
            self.q[seq.request_id] = None if q is None else q[:keep]

    def fit(self, sched) -> None:
        scheduled = {id(s.seq): s for s in sched.scheduled}
        for seq in list(self.engine.scheduler.running) + list(self.engine.scheduler.waiting):
            if seq.spec_token_ids:
                s = scheduled.get(id(seq))
                self._keep(seq, 0 if s is None else s.start + s.num_tokens - (len(seq) - len(seq.spec_token_ids)))

    def verify(self, logits: torch.Tensor, samplers: list) -> dict:
        """logits: [sum(1 + k_i), V], the last 1 + k_i rows of each sampler in order. Returns {seq: token} for
        requests without drafts (the plain sampler) and {seq: [accepted drafts..., one more]} for the others."""
        out, i = {}, 0
        for seq in samplers:
            k, p = len(seq.spec_token_ids), seq.params
            rows = logits[i:i + k + 1].float()                                    # [k+1, V]
            i += k + 1
            if not k:
                out[seq] = sample(rows, [p], [seq.generator], [seq])[0]
                continue
            try:
                drafts = torch.tensor(seq.spec_token_ids, device=rows.device)     # [k]
                if p.greedy:
                    target = rows.argmax(-1)                                      # [k+1]
                    n = int((drafts == target[:k]).long().cumprod(0).sum())
                    tokens = seq.spec_token_ids[:n] + [int(target[n])]
                else:
                    q = self.q.get(seq.request_id)
                    t, n = rejection_sample(probs_of(rows, p)[None], None if q is None else q[None], drafts[None],
                                            seq.generator)
                    n = int(n[0])
                    tokens = t[0, :n + 1].tolist()
            except (RuntimeError, ValueError) as e:                               # this request alone fails
                out[seq] = e
                continue
            m = seq.metrics
            m.num_draft_tokens, m.num_accepted_tokens, m.num_spec_steps = (
                m.num_draft_tokens + k, m.num_accepted_tokens + n, m.num_spec_steps + 1)
            self.proposed, self.accepted, self.steps = self.proposed + k, self.accepted + n, self.steps + 1
            out[seq] = tokens
        return out

    def accept(self, seq, tokens: list[int], now: float):
        """Drafts out, accepted tokens in as ordinary tokens; free the blocks past the kept K/V."""
        engine = self.engine
        if seq.spec_token_ids:
            self._keep(seq, 0)
        self.q.pop(seq.request_id, None)
        seq.num_computed_tokens = len(seq) + len(tokens) - 1     # the accepted drafts' K/V are in the cache
        engine.block_manager.trim(seq, seq.num_computed_tokens)
        outs = []
        for t in tokens:
            outs.append(engine._append_token(seq, t, now))
            if outs[-1].finished:
                break
        return replace(outs[-1], new_text="".join(o.new_text for o in outs), new_token_ids=tuple(tokens[:len(outs)]))
