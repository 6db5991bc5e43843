"""Scheduler: decides before every step which requests run and how many of their tokens, and
applies the step's results after it: the one owner of request state (vLLM's Scheduler).

Continuous batching: requests join and leave between steps, and one step mixes decode tokens (one
per running request) with prefill chunks (chunked prefill), within max_num_batched_tokens tokens and
max_num_seqs requests. Running requests go first, so decoding never stalls behind a long prompt;
then waiting ones, while budget and KV blocks last. When blocks run out the newest running request
is preempted: its blocks are freed and it waits again at the front, to be recomputed.
Prefix caching: a waiting request takes the cached blocks of its prefix as a computed chunk.
Speculative decoding: schedule() gets drafts as data and schedules those a request can afford.
Chapter 5's static batching and policies: static_batching.py, scheduling_policy.py. What it
hands on (SchedulerOutput) and gets back (ModelRunnerOutput) is data (outputs.py).
"""
from __future__ import annotations

import time
from collections import deque

from minimal_engine.config import EngineConfig
from minimal_engine.engine.block_manager import BlockManager
from minimal_engine.engine.outputs import (ModelRunnerOutput, RequestOutput, ScheduledSeq,
                                           SchedulerOutput, request_output)
from minimal_engine.engine.scheduling_policy import PolicyPlanner
from minimal_engine.engine.sequence import Sequence, SequenceStatus
from minimal_engine.engine.static_batching import StaticGroups
from minimal_engine.engine.stop_strings import check_stop, sendable_end, stop_token

__all__ = ["ScheduledSeq", "Scheduler", "SchedulerOutput"]


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager, policy=None,
                 eos_ids=frozenset()):
        """policy: None or schedule_step (scheduling_policy.py); eos_ids: end-of-text tokens."""
        self.config, self.block_manager, self.eos_ids = config, block_manager, frozenset(eos_ids)
        if policy is not None and config.batching == "static":
            raise ValueError("a scheduling policy replaces continuous batching; it does not take "
                             "batching='static'")
        self.planner = None if policy is None else PolicyPlanner(policy, config.max_num_seqs)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []     # oldest first: the last one is preempted first
        self.groups = StaticGroups(config.max_num_seqs) if config.batching == "static" else None
        self.finish_listeners: list = []      # add_finish_listener

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def add_finish_listener(self, listener) -> None:
        """listener(seq): see LLMEngine.add_finish_listener."""
        self.finish_listeners.append(listener)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, drafts: dict[str, list[int]] | None = None) -> SchedulerOutput:
        """drafts: request id -> proposed draft tokens (speculative decoding), or None."""
        out, budget, bm = SchedulerOutput(), self.config.max_num_batched_tokens, self.block_manager
        drafts, plan = drafts or {}, None
        if self.planner is not None:
            plan = self.planner.plan(self.running, self.waiting, budget, bm)
        # 1) running requests: one decode token each, or the next chunk of an unfinished prefill
        late = {s for s in self.running if s.grammar is not None and s.grammar.late()}
        late = late if len(late) < len(self.running) else set()  # their masks are not ready yet
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            left, done = seq.num_uncomputed_tokens, seq.num_computed_tokens
            n = min(left, budget) if plan is None else plan.get(seq.request_id, 0)
            n = 0 if seq in late else n
            if n == 0:                                  # the policy leaves it out
                i += 1
                continue
            while not bm.can_allocate(seq, done + n) and self.running[-1] is not seq:
                self._preempt(self.running.pop(), out)
            if not bm.can_allocate(seq, done + n):
                self._preempt(self.running.pop(), out)  # seq is the newest: it yields itself
                break
            spec = drafts.get(seq.request_id, [])[:budget - n] if n == left else []
            while spec and not bm.can_allocate(seq, done + n + len(spec)):
                spec = spec[:-1]                        # drafts only where blocks are free
            bm.allocate(seq, done + n + len(spec))
            out.scheduled.append(ScheduledSeq(seq, done, n + len(spec), spec))
            budget -= n + len(spec)
            i += 1

        # 2) waiting requests, oldest first, while budget, sequence slots and blocks last
        groups = self.groups
        if groups is not None:
            groups.open_if_idle(self.running, self.waiting)
        while (self.waiting and budget > 0 and not out.preempted
               and len(self.running) < self.config.max_num_seqs
               and (groups is None or groups.may_admit())):
            seq = self.waiting[0]
            cached = bm.num_cached_tokens(seq)           # prefix caching: an already computed chunk
            n = min(len(seq) - cached, budget) if plan is None else plan.get(seq.request_id, 0)
            if n == 0 or not bm.can_allocate(seq, cached + n):
                break
            self.waiting.popleft()
            if groups is not None:
                groups.admitted()
            self._admit(seq, bm.take_cached(seq), out)
            bm.allocate(seq, seq.num_computed_tokens + n)
            out.scheduled.append(ScheduledSeq(seq, seq.num_computed_tokens, n))
            budget -= n
        if plan is not None:
            self.planner.check_progress(bool(out.scheduled), plan, len(self.running),
                                        len(self.waiting), bm)
        return out

    def _admit(self, seq: Sequence, num_computed: int, out: SchedulerOutput | None) -> None:
        """seq starts running with the K/V of its first num_computed tokens in its blocks."""
        seq.num_computed_tokens = num_computed
        if seq.num_cached_tokens is None:           # as vLLM: counted when first scheduled
            seq.num_cached_tokens = num_computed if out is not None else 0
        if out is not None and seq.metrics.first_scheduled_time is None:
            seq.metrics.first_scheduled_time = time.perf_counter()
            out.new_requests.append(seq)
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    def admit_prefilled(self, seq: Sequence, num_computed: int) -> bool:
        """Disaggregation: seq (waiting) comes with the K/V of its first num_computed tokens from
        a prefill engine: give it blocks, run it as a decode. False (it waits) if no room."""
        if (len(self.running) >= self.config.max_num_seqs
                or not self.block_manager.can_allocate(seq, num_computed)):
            return False
        self.waiting.remove(seq)
        self.block_manager.allocate(seq, num_computed)
        self._admit(seq, num_computed, None)
        return True

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        """Free seq's blocks and send it back to wait; all its tokens are recomputed later."""
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        seq.metrics.num_preemptions += 1
        if self.groups is not None:
            self.groups.rejoined()                  # it rejoins its own group
        self.waiting.appendleft(seq)
        out.preempted.append(seq)

    # ---- after the forward pass: the one place where a step changes its requests --------------
    def update_from_output(self, out: SchedulerOutput, result: ModelRunnerOutput,
                           now: float) -> list[RequestOutput]:
        """Computed tokens advance; a request that sampled gets its tokens (or accepted drafts and
        one more) and may finish (stop_strings.py); one whose sampling failed finishes alone.
        Returns an output for every request that got tokens or finished."""
        outputs = []
        for s in out.scheduled:
            seq, rid = s.seq, s.seq.request_id
            tokens, drafts = result.sampled.get(rid, []), len(s.spec_token_ids)
            accepted = len(tokens) - 1 if drafts and tokens else 0
            seq.num_computed_tokens += s.num_tokens - drafts + accepted   # kept drafts keep K/V
            if drafts:                               # the rejected drafts' slots go back
                self.block_manager.trim(seq, seq.num_computed_tokens)
            if drafts and tokens:
                m = seq.metrics
                m.num_draft_tokens += drafts
                m.num_accepted_tokens += accepted
                m.num_spec_steps += 1
            if rid in result.prompt_logprobs:
                seq.prompt_logprobs += result.prompt_logprobs[rid]
            if rid in result.errors:
                outputs.append(self._fail(seq, result.errors[rid], now))
            elif tokens:
                outputs.append(self._append(seq, tokens, result.logprobs.get(rid), now))
        return outputs

    def _append(self, seq: Sequence, tokens: list[int], logprobs: list | None,
                now: float) -> RequestOutput:
        reason, cut, m = None, None, seq.metrics
        for n, token in enumerate(tokens):
            if seq.grammar is not None:
                try:
                    seq.grammar.accept(token)      # structured outputs: the matcher takes it
                except ValueError as e:
                    return self._fail(seq, str(e), now)
            seq.token_ids.append(token)
            if seq.logprobs is not None:
                seq.logprobs.append(logprobs[n])
            m.first_token_time = now if m.first_token_time is None else m.first_token_time
            m.token_times.append(now)
            reason, cut = self._check_stop(seq, token)
            if reason is not None:
                tokens = tokens[:n + 1]
                break
        end = sendable_end(seq, reason is not None) if cut is None else cut
        new_text, seq.sent_chars = seq.detokenizer.text[seq.sent_chars:end], end
        if reason is not None:
            self.finish(seq, reason, now)
        return request_output(seq, new_text, tuple(tokens))

    def _check_stop(self, seq: Sequence, token: int) -> tuple[str | None, int | None]:
        """(finish reason or None, where a stop string cuts the text or None) after seq got token.
        As vLLM, a stop token's (or EOS's) text stays out unless include_stop_str_in_output."""
        reason, seq.stop_reason = stop_token(seq, token, self.eos_ids, self.config.max_model_len)
        if reason != "stop" or seq.params.include_stop_str_in_output:
            delta = seq.detokenizer.add(token)
            hit = check_stop(seq, len(delta)) if reason != "stop" else None   # stop_strings.py
            if hit is not None:
                seq.stop_reason = hit[1]
                return "stop", hit[0]
        if reason is not None:
            seq.detokenizer.finish()               # drops an incomplete last character, as vLLM
        return reason, None

    def _fail(self, seq: Sequence, message: str, now: float) -> RequestOutput:
        seq.error = message
        seq.detokenizer.finish()
        seq.sent_chars = len(seq.detokenizer.text)
        self.finish(seq, "error", now)
        return request_output(seq)

    def finish(self, seq: Sequence, reason: str, now: float | None = None) -> None:
        """Mark seq finished, free its blocks (after the finish listeners saw a request that ended
        normally), drop it from the queues."""
        if reason in ("stop", "length"):
            for listener in self.finish_listeners:
                listener(seq)
        seq.status, seq.finish_reason = SequenceStatus.FINISHED, reason
        seq.metrics.finished_time = time.perf_counter() if now is None else now
        self.block_manager.free(seq)
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            if self.groups is not None:
                self.groups.left_queue(self.waiting.index(seq))
            self.waiting.remove(seq)
