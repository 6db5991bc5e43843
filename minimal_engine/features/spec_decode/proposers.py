"""Proposers: who guesses the draft tokens. "ngram" (prompt lookup: no model, its q is one-hot) and "draft_model"
(a small model with the same tokenizer and its own KV pool; its q is the distribution it sampled from)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from minimal_engine.config import EngineConfig, ModelConfig
from minimal_engine.engine.block_manager import BlockManager
from minimal_engine.engine.model_runner import ModelRunner
from minimal_engine.engine.scheduler import ScheduledSeq, SchedulerOutput
from minimal_engine.features.spec_decode.rejection import probs_of
from minimal_engine.model.cpu_linears import use_cpu_linears
from minimal_engine.model.loader import load_model, resolve_model_path
from minimal_engine.model.tokenizer import Tokenizer


@dataclass(frozen=True)
class TargetInfo:
    """What a proposer needs to know about the target engine (passed explicitly by LLM)."""

    model_config: ModelConfig
    tokenizer: Tokenizer
    config: EngineConfig
    num_blocks: int
    dtype: torch.dtype
    device: torch.device


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


class DraftState:
    """One request as the draft model's pool sees it: its tokens, its blocks there (the draft's
    BlockManager keeps block_table) and how many have K/V. Only its own methods change the rest."""

    def __init__(self, request_id: str, token_ids: list[int], params):
        self.request_id, self.params = request_id, params
        self.token_ids = list(token_ids)
        self.block_table: list[int] = []
        self.num_computed_tokens = 0
        self.prompt_logprobs = None           # the runner scores no prompt for it
        self.synced = 0                       # tokens known to equal the target's

    def __len__(self) -> int:
        return len(self.token_ids)

    def sync(self, target_ids: list[int]) -> int:
        """Take the target's tokens; K/V stay valid up to the first token that differs (at least
        one token is left to run). Returns how many stay valid."""
        c, end = self.synced, min(self.num_computed_tokens, len(target_ids) - 1)
        while c < end and self.token_ids[c] == target_ids[c]:
            c += 1
        self.num_computed_tokens, self.token_ids, self.synced = c, list(target_ids), len(target_ids)
        return c

    def computed(self, token: int) -> None:
        """A draft forward computed every token's K/V and guessed `token` next."""
        self.num_computed_tokens = len(self.token_ids)
        self.token_ids.append(token)


class DraftProposer:
    """A small model with its own KV pool. Each request has a DraftState in the draft's pool; after a
    step only the K/V of tokens the target kept stay valid (the draft computed the accepted drafts)."""

    def __init__(self, path, target: TargetInfo, k: int):
        path = resolve_model_path(path)
        mc = ModelConfig.from_folder(path)
        if mc.vocab_size != target.model_config.vocab_size:
            raise ValueError(f"speculative_config: the draft model's vocab_size {mc.vocab_size} differs from the "
                             f"target's {target.model_config.vocab_size}: the draft needs the target's tokenizer")
        if Tokenizer(path).hf.get_vocab() != target.tokenizer.hf.get_vocab():
            raise ValueError("speculative_config: the draft model's tokenizer differs from the target's "
                             "(token ids must mean the same text)")
        cfg, bs = target.config, target.config.block_size
        if mc.max_position_embeddings < cfg.max_model_len:
            raise ValueError(f"speculative_config: the draft model has {mc.max_position_embeddings} positions, "
                             f"fewer than max_model_len={cfg.max_model_len}: lower max_model_len")
        blocks = target.num_blocks + cfg.max_num_seqs * (k // bs + 2)
        ecfg = EngineConfig(block_size=bs, max_num_seqs=cfg.max_num_seqs, max_model_len=cfg.max_model_len,
                            cuda_graphs=False)
        net = load_model(path, mc, target.dtype, target.device)
        use_cpu_linears(net)                 # CPU: the draft's Linear kernels (cpu_linears.py)
        self.runner = ModelRunner(net, ecfg, blocks, target.dtype, target.device)
        self.bm = BlockManager(blocks, bs)
        self.shadows: dict = {}              # request id -> its DraftState in the draft's pool

    def forward(self, scheduled: list) -> dict:
        """One draft forward over [(shadow, start, num_tokens)]; returns {shadow: logits [V]} of each last row."""
        step = self.runner.prepare(SchedulerOutput([ScheduledSeq(*s) for s in scheduled]))
        logits = self.runner.model(step.input_ids, step.batch, self.runner.kv_caches)       # [S, V]
        return dict(zip([s.seq for s in step.order if s.samples], logits.float()))

    @torch.inference_mode()
    def propose(self, items: list) -> dict:
        """items: [(seq, k_eff)]; returns {seq: (draft ids, q [k_eff, V])}."""
        live = {seq.request_id for seq, _ in items}
        for rid in [r for r in self.shadows if r not in live]:       # finished, aborted or preempted requests
            self.bm.free(self.shadows.pop(rid))
        active = []
        for seq, k in items:
            sh = self.shadows.get(seq.request_id)
            if sh is None:
                sh = DraftState(seq.request_id, seq.token_ids, seq.params)
                self.shadows[seq.request_id] = sh
            else:
                self.bm.trim(sh, sh.sync(seq.token_ids))
            need = len(seq) + k - 1                                    # the last draft's K/V is never computed
            if self.bm.can_allocate(sh, need):                         # else: no drafts for it this step
                self.bm.allocate(sh, need)
                active.append((seq, sh, k, []))
        drafts = {}
        for i in range(max((k for _, _, k, _ in active), default=0)):
            step = [(sh, sh.num_computed_tokens, len(sh) - sh.num_computed_tokens) for _, sh, k, _ in active if k > i]
            logits = self.forward(step)
            for seq, sh, k, qs in active:
                if k <= i:
                    continue
                if seq.params.greedy:
                    token, q = int(logits[sh].argmax()), None
                else:
                    q = probs_of(logits[sh][None], seq.params)[0]
                    token = int(torch.multinomial(q, 1, generator=seq.generator))
                sh.computed(token)
                qs.append(q)
                if len(qs) == k:
                    drafts[seq] = (sh.token_ids[len(seq):], None if q is None else torch.stack(qs))
        return drafts
