"""A scheduling policy whose plans never move (attack round 3, H4) stops the engine with an error
that names the policy, instead of stepping empty steps forever at 100% CPU."""
from __future__ import annotations

import signal

import pytest

from minimal_engine import LLM, SamplingParams
from minimal_engine.config import EngineConfig
from minimal_engine.engine.block_manager import BlockManager
from minimal_engine.engine.scheduler import Scheduler
from minimal_engine.engine.scheduling_policy import MAX_IDLE_POLICY_STEPS
from minimal_engine.engine.sequence import Sequence


def waiting_first(running, waiting, budget, max_num_seqs):
    """'Prefill first': the whole budget to the waiting requests, the running ones after them."""
    plan, slots = [], max_num_seqs - len(running)
    for rid, left in waiting:
        if budget == 0 or slots == 0:
            break
        plan.append((rid, min(left, budget)))
        budget -= plan[-1][1]
        slots -= 1
    for rid, left in running:
        if budget == 0:
            break
        plan.append((rid, min(left, budget)))
        budget -= plan[-1][1]
    return plan


def test_the_scheduler_gives_up_after_max_idle_policy_steps():
    """Two running requests hold every block; the policy gives the budget to a waiting one."""
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=8, max_num_seqs=4)
    sched = Scheduler(cfg, BlockManager(4, 4), waiting_first)
    a, b, c = (Sequence(r, None, list(range(1, 9)), SamplingParams(max_tokens=8)) for r in "abc")
    for s in (a, b):
        sched.add(s)
    for _ in range(2):                                   # a and b are prefilled: all 4 blocks taken
        for s in sched.schedule().scheduled:
            s.seq.num_computed_tokens += s.num_tokens
    sched.add(c)
    for _ in range(MAX_IDLE_POLICY_STEPS - 1):
        assert sched.schedule().is_empty
    with pytest.raises(ValueError) as e:
        sched.schedule()
    message = str(e.value)
    assert message.startswith(f"scheduler_policy 'waiting_first' scheduled nothing in "
                              f"{MAX_IDLE_POLICY_STEPS} steps in a row while 2 requests ran and "
                              "1 waited; its plan was [('c', 8)], with 0 of 4 KV blocks free"), \
        message
    assert "schedule the running requests first" in message


class Hang(Exception):
    pass


def test_llm_generate_with_a_stuck_policy_raises_instead_of_spinning():
    """The reviewer's repro. Before: generate never returned (3 million empty steps in 30 s).
    After: ValueError naming the policy, and the same LLM serves the next call."""
    def alarm(*_):
        raise Hang("generate did not return within 120 s")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(120)
    try:
        llm = LLM(max_num_seqs=4, max_model_len=256, num_kv_blocks=8, block_size=16,
                  max_num_batched_tokens=16, scheduler_policy=waiting_first)
        prompt = "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"
        params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
        with pytest.raises(ValueError, match="scheduler_policy 'waiting_first' scheduled nothing"):
            llm.generate([prompt] * 4, params, use_tqdm=False)
        engine = llm.engine
        assert not engine.has_unfinished_requests()
        assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
        out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
        assert len(out[0].token_ids) == 4
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
