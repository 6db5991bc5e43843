"""Scheduler: decides, before every step, which requests run and how many of their tokens.

Continuous batching: requests join and leave between steps, and one step can mix
  * decode tokens of running requests (1 token each), and
  * prefill chunks of new or partly prefilled requests (chunked prefill),
under two limits: `max_num_batched_tokens` tokens and `max_num_seqs` requests per step.
Running requests go first (so decoding never stalls behind a long prompt), then waiting ones are admitted
while the token budget and KV blocks last. When blocks run out, the newest running request is preempted:
its blocks are freed and it goes back to the front of the waiting queue, to be recomputed later.

Prefix caching (block_manager.py, prefix_cache.py): a waiting request first asks how many tokens of its start
are already cached, takes those blocks, and is scheduled as if they were an already computed chunk.

batching="static" (for comparison, chapter 5): requests are taken in groups of max_num_seqs; no request
joins until every member of the running group has finished, so finished members' slots stay idle (StaticGroups).

A policy (chapter 5's exercise) may replace the token counts: Scheduler(config, bm, policy=schedule_step), where
schedule_step(running, waiting, token_budget, max_num_seqs) gets (request_id, tokens left) pairs and returns the
(request_id, num_tokens) of this step; blocks, preemption and prefix caching stay the scheduler's (check_plan).

Speculative decoding (features/spec_decode/): a proposer appends draft tokens to running requests before
schedule(); they are scheduled like a prefill chunk, and the drafts a step does not reach are taken back here.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from minimal_engine.engine.block_manager import BlockManager
from minimal_engine.config import EngineConfig
from minimal_engine.engine.sequence import Sequence, SequenceStatus

MAX_IDLE_POLICY_STEPS = 1000    # a policy's empty steps in a row before the engine gives up


@dataclass
class ScheduledSeq:
    seq: Sequence
    start: int          # tokens of seq already in the KV cache before this step
    num_tokens: int     # tokens of seq computed in this step

    @property
    def samples(self) -> bool:
        """Does this step reach the end of seq's tokens, so that a next token is sampled?"""
        return self.start + self.num_tokens == len(self.seq)


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class StaticGroups:
    """batching="static": admission in groups. A group is the first max_num_seqs waiting requests once nothing
    runs; only its members are admitted (a preempted member rejoins it; one that leaves the queue leaves it)."""

    def __init__(self, size: int):
        self.size = size
        self.left = 0                 # members of the current group not yet admitted

    def open_if_idle(self, running: list, waiting: deque) -> None:
        if not running and not self.left:
            self.left = min(len(waiting), self.size)

    def may_admit(self) -> bool:
        return self.left > 0

    def admitted(self) -> None:
        self.left -= 1

    def rejoined(self) -> None:
        self.left += 1

    def left_queue(self, index: int) -> None:
        """The request at `index` of the waiting queue finished (aborted) before it was admitted."""
        if index < self.left:
            self.left -= 1


def check_plan(plan, running: list[tuple[str, int]], waiting: list[tuple[str, int]], budget: int,
               max_num_seqs: int) -> dict[str, int]:
    """A policy's plan -> {request_id: num_tokens}, or a ValueError saying what the plan broke."""
    left = dict(running + waiting)
    try:
        pairs = [(rid, n) for rid, n in plan]
    except (TypeError, ValueError):
        raise ValueError(f"the policy must return a list of (request_id, num_tokens) pairs, got {plan!r:.80}") from None
    out = dict(pairs)
    if not out and (running or waiting):
        raise ValueError("the policy scheduled nothing although requests are running or waiting: they would wait forever")
    if len(out) != len(pairs):
        raise ValueError("the policy's plan names a request twice")
    for rid, n in pairs:
        if rid not in left:
            raise ValueError(f"the policy's plan names {rid!r}, which is neither running nor waiting")
        if not isinstance(n, int) or not 1 <= n <= left[rid]:
            raise ValueError(f"the policy gives {rid!r} {n!r} tokens; it has {left[rid]} left (1..{left[rid]})")
    if sum(out.values()) > budget:
        raise ValueError(f"the policy's plan has {sum(out.values())} tokens, more than the budget of {budget}")
    admitted = [rid for rid, _ in waiting if rid in out]
    if admitted != [rid for rid, _ in waiting[:len(admitted)]]:
        raise ValueError("the policy must admit waiting requests in arrival order (first come, first served)")
    if len(running) + len(admitted) > max_num_seqs:
        raise ValueError(f"the policy's plan admits {len(admitted)} requests beside {len(running)} running: more "
                         f"than max_num_seqs={max_num_seqs}")
    return out


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager, policy=None):
        self.config = config
        self.block_manager = block_manager
        if policy is not None and config.batching == "static":
            raise ValueError("a scheduling policy replaces continuous batching; it does not take batching='static'")
        self.policy = policy                  # None: the rule below; else schedule_step(...) (check_plan)
        self.idle_steps = 0                   # the policy's steps in a row that scheduled nothing
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []     # oldest first: the last one is preempted first
        self.groups = StaticGroups(config.max_num_seqs) if config.batching == "static" else None

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        bm = self.block_manager
        plan = None if self.policy is None else self._plan(budget)

        # 1) running requests: one decode token each, or the next chunk of an unfinished prefill
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_uncomputed_tokens, budget) if plan is None else plan.get(seq.request_id, 0)
            if n == 0:                                  # the policy leaves it out of this step
                i += 1
                continue
            while not bm.can_allocate(seq, seq.num_computed_tokens + n) and self.running[-1] is not seq:
                self._preempt(self.running.pop(), out)
            if not bm.can_allocate(seq, seq.num_computed_tokens + n):
                self._preempt(self.running.pop(), out)  # seq is the newest: it yields itself
                break
            bm.allocate(seq, seq.num_computed_tokens + n)
            out.scheduled.append(ScheduledSeq(seq, seq.num_computed_tokens, n))
            budget -= n
            i += 1

        # 2) waiting requests, oldest first, while budget, sequence slots and blocks last
        groups = self.groups
        if groups is not None:
            groups.open_if_idle(self.running, self.waiting)
        while (self.waiting and budget > 0 and not out.preempted
               and len(self.running) < self.config.max_num_seqs and (groups is None or groups.may_admit())):
            seq = self.waiting[0]
            cached = bm.num_cached_tokens(seq)           # prefix caching: a chunk that is already computed
            n = min(len(seq) - cached, budget) if plan is None else plan.get(seq.request_id, 0)
            if n == 0:
                break
            if not bm.can_allocate(seq, cached + n):
                break
            self.waiting.popleft()
            if groups is not None:
                groups.admitted()
            seq.num_computed_tokens = bm.take_cached(seq)
            if seq.num_cached_tokens is None:           # as vLLM: counted when the request is first scheduled
                seq.num_cached_tokens = seq.num_computed_tokens
            bm.allocate(seq, seq.num_computed_tokens + n)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            out.scheduled.append(ScheduledSeq(seq, seq.num_computed_tokens, n))
            budget -= n
        self._take_back_drafts(out)
        if plan is not None:
            self._check_progress(out, plan)
        return out

    def _check_progress(self, out: SchedulerOutput, plan: dict[str, int]) -> None:
        """A plan that schedules nothing changes nothing, so the next plan is likely the same: after
        MAX_IDLE_POLICY_STEPS such steps in a row, stop with an error instead of spinning on."""
        self.idle_steps = 0 if out.scheduled else self.idle_steps + 1
        if self.idle_steps < MAX_IDLE_POLICY_STEPS:
            return
        self.idle_steps = 0
        bm, name = self.block_manager, getattr(self.policy, "__name__", type(self.policy).__name__)
        raise ValueError(
            f"scheduler_policy {name!r} scheduled nothing in {MAX_IDLE_POLICY_STEPS} steps in a "
            f"row while {len(self.running)} requests ran and {len(self.waiting)} waited; its plan "
            f"was {list(plan.items())[:4]}, with {bm.num_free_blocks} of {bm.num_blocks} KV blocks "
            "free. "
            "A plan that gives the budget to waiting requests that cannot get KV blocks, while the "
            "running requests holding the blocks get none, never moves: schedule the running "
            "requests first, or leave budget for them")

    def _plan(self, budget: int) -> dict[str, int]:
        """Ask the policy; it sees what each running request has left and what each waiting one would compute."""
        running = [(s.request_id, s.num_uncomputed_tokens) for s in self.running]
        waiting = [(s.request_id, len(s) - self.block_manager.num_cached_tokens(s)) for s in self.waiting]
        return check_plan(self.policy(list(running), list(waiting), budget, self.config.max_num_seqs), running,
                          waiting, budget, self.config.max_num_seqs)

    def _take_back_drafts(self, out: SchedulerOutput) -> None:
        """Speculative decoding: drafts this step does not compute (token budget, preemption) leave the request."""
        scheduled = {id(s.seq): s for s in out.scheduled}
        for seq in [*self.running, *self.waiting]:
            if seq.spec_token_ids:
                s = scheduled.get(id(seq))
                first_draft = len(seq) - len(seq.spec_token_ids)
                seq.keep_drafts(0 if s is None else s.start + s.num_tokens - first_draft)

    def admit_prefilled(self, seq: Sequence, num_computed: int) -> bool:
        """Disaggregation (disagg/llm.py): seq (just added, waiting) arrives with the K/V of its first `num_computed`
        tokens from a prefill engine: give it blocks and run it as a decode. False (seq stays waiting) if no room."""
        if len(self.running) >= self.config.max_num_seqs or not self.block_manager.can_allocate(seq, num_computed):
            return False
        self.waiting.remove(seq)
        self.block_manager.allocate(seq, num_computed)
        seq.num_computed_tokens, seq.num_cached_tokens = num_computed, 0
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)
        return True

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        """Free seq's blocks and send it back to wait; its tokens (prompt and output) are recomputed."""
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        seq.metrics.num_preemptions += 1
        if self.groups is not None:
            self.groups.rejoined()                  # it rejoins its own group
        self.waiting.appendleft(seq)
        out.preempted.append(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        """Mark seq finished, free its blocks, drop it from the queues."""
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        self.block_manager.free(seq)
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            if self.groups is not None:
                self.groups.left_queue(self.waiting.index(seq))
            self.waiting.remove(seq)
