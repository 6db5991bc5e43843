"""Block manager and scheduler rules, without a model."""
import re

import pytest

from minimal_engine.engine.block_manager import BlockManager
from minimal_engine.config import EngineConfig
from minimal_engine.engine.outputs import ModelRunnerOutput
from minimal_engine.sampling_params import SamplingParams
from minimal_engine.engine.scheduler import Scheduler
from minimal_engine.engine.scheduling_policy import check_plan
from minimal_engine.engine.sequence import Sequence, SequenceStatus


class Detokenizer:
    """Token i reads as "<i>" (the scheduler only feeds it and reads its text)."""

    def __init__(self):
        self.text = ""

    def add(self, token):
        self.text += f"<{token}>"
        return f"<{token}>"

    def finish(self):
        return ""


def seq(rid, n_prompt, max_tokens=8, **params):
    return Sequence(rid, None, list(range(1, n_prompt + 1)),
                    SamplingParams(max_tokens=max_tokens, **params), detokenizer=Detokenizer())


def complete_step(out, sched=None, token=7):
    """The runner's part of a step, as data (each request that samples gets `token`), applied."""
    sched = sched or Scheduler(EngineConfig(), BlockManager(1, 4))
    sampled = {s.seq.request_id: [token] for s in out.scheduled if s.samples}
    return sched.update_from_output(out, ModelRunnerOutput(sampled=sampled), 0.0)


def test_block_manager_allocates_and_frees():
    bm = BlockManager(num_blocks=4, block_size=4)
    a = seq("a", 5)
    assert bm.blocks_needed(5) == 2 and bm.blocks_needed(8) == 2 and bm.blocks_needed(9) == 3
    bm.allocate(a, 5)
    assert len(a.block_table) == 2 and bm.num_free_blocks == 2
    assert bm.slot(a, 4) == a.block_table[1] * 4 + 0
    bm.allocate(a, 8)                         # still fits in two blocks
    assert len(a.block_table) == 2
    assert not bm.can_allocate(a, 17) and bm.can_allocate(a, 16)
    with pytest.raises(RuntimeError, match="out of KV blocks"):
        bm.allocate(a, 17)
    bm.free(a)
    assert bm.num_free_blocks == 4 and a.block_table == []


def test_token_budget_mixes_decode_and_chunked_prefill():
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=10, max_num_seqs=8)
    sched = Scheduler(cfg, BlockManager(100, 4))
    a, b = seq("a", 6), seq("b", 25)
    sched.add(a)
    out = sched.schedule()
    assert [(s.seq.request_id, s.num_tokens) for s in out.scheduled] == [("a", 6)]
    complete_step(out)
    sched.add(b)
    out = sched.schedule()                    # a decodes 1 token, b gets the remaining 9 as a prefill chunk
    assert [(s.seq.request_id, s.start, s.num_tokens) for s in out.scheduled] == [("a", 6, 1), ("b", 0, 9)]
    assert out.num_tokens <= cfg.max_num_batched_tokens
    assert [s.samples for s in out.scheduled] == [True, False]
    complete_step(out)
    out = sched.schedule()
    assert [(s.seq.request_id, s.start, s.num_tokens) for s in out.scheduled] == [("a", 7, 1), ("b", 9, 9)]


def test_max_num_seqs_caps_running_requests():
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=1000, max_num_seqs=2)
    sched = Scheduler(cfg, BlockManager(100, 4))
    for i in range(4):
        sched.add(seq(str(i), 3))
    out = sched.schedule()
    assert len(out.scheduled) == 2 and len(sched.waiting) == 2


def test_preemption_frees_newest_and_requeues_it_first():
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=100, max_num_seqs=8)
    bm = BlockManager(4, 4)
    sched = Scheduler(cfg, bm)
    a, b = seq("a", 8), seq("b", 8)           # 2 blocks each: the pool is full after both prefill
    sched.add(a), sched.add(b)
    complete_step(sched.schedule())
    assert bm.num_free_blocks == 0
    out = sched.schedule()                    # a's 9th token needs a third block: b must go
    assert out.preempted == [b] and b.status == SequenceStatus.WAITING
    assert b.num_computed_tokens == 0 and b.block_table == [] and b.metrics.num_preemptions == 1
    assert sched.waiting[0] is b
    assert [s.seq for s in out.scheduled] == [a]


def test_newest_request_preempts_itself_when_alone_at_the_end():
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=100, max_num_seqs=8)
    bm = BlockManager(2, 4)
    sched = Scheduler(cfg, bm)
    a = seq("a", 8)
    sched.add(a)
    complete_step(sched.schedule())
    out = sched.schedule()
    assert out.preempted == [a] and out.scheduled == [] and bm.num_free_blocks == 2


def test_finish_frees_blocks():
    cfg = EngineConfig(block_size=4)
    bm = BlockManager(10, 4)
    sched = Scheduler(cfg, bm)
    a = seq("a", 9)
    sched.add(a)
    sched.schedule()
    sched.finish(a, "abort")
    assert bm.num_free_blocks == 10 and not sched.has_unfinished() and a.finish_reason == "abort"


def _rule(running, waiting, budget, max_num_seqs):
    """The scheduler's own rule written as a policy (exercise 05's model solution)."""
    plan = []
    for rid, left in running:
        if budget == 0:
            break
        plan.append((rid, min(left, budget)))
        budget -= plan[-1][1]
    for rid, left in waiting[:max(0, max_num_seqs - len(running))]:
        if budget == 0:
            break
        plan.append((rid, min(left, budget)))
        budget -= plan[-1][1]
    return plan


def test_a_scheduling_policy_with_the_engines_rule_gives_the_same_tokens_and_steps():
    from minimal_engine import LLM, SamplingParams
    prompts = ["吾輩は猫である。名前はまだ無い。", "どこで生れたか", "とんと見当がつかぬ。何でも薄暗い"] * 2
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    steps = []

    def counted(*args):
        steps.append(args)
        return _rule(*args)
    base = LLM(max_num_batched_tokens=8, max_num_seqs=3).generate(prompts, params, use_tqdm=False)
    mine = LLM(max_num_batched_tokens=8, max_num_seqs=3, scheduler_policy=counted).generate(prompts, params,
                                                                                            use_tqdm=False)
    assert [o.token_ids for o in mine] == [o.token_ids for o in base]
    assert len(steps) > len(prompts) and all(a[2] == 8 and a[3] == 3 for a in steps)


@pytest.mark.parametrize("plan, says", [
    ([("nobody", 1)], "neither running nor waiting"),
    ("not a plan", "list of (request_id, num_tokens) pairs"),
    ([], "scheduled nothing"),
    ([("0", 10 ** 6)], "tokens; it has"),
])
def test_a_policys_bad_plan_is_a_clear_error_and_the_engine_stays_usable(plan, says):
    from minimal_engine import LLM, SamplingParams
    llm = LLM(max_num_batched_tokens=8, max_num_seqs=3, scheduler_policy=lambda *a: plan)
    with pytest.raises(ValueError, match=re.escape(says)):
        llm.engine.add_request("吾輩は", SamplingParams(max_tokens=2), request_id="0")
        llm.engine.step()
    assert llm.engine.block_manager.num_free_blocks == llm.engine.block_manager.num_blocks


def test_check_plan_refuses_over_budget_out_of_order_and_too_many_sequences():
    with pytest.raises(ValueError, match="more than the budget"):
        check_plan([("a", 1), ("b", 8)], [("a", 1)], [("b", 20)], 8, 4)
    with pytest.raises(ValueError, match="arrival order"):
        check_plan([("c", 1)], [], [("b", 2), ("c", 2)], 8, 4)
    with pytest.raises(ValueError, match="max_num_seqs"):
        check_plan([("a", 1), ("b", 1)], [("a", 1)], [("b", 2)], 8, 1)


def test_a_scheduling_policy_does_not_take_static_batching():
    from minimal_engine import LLM
    with pytest.raises(ValueError, match="static"):
        LLM(batching="static", scheduler_policy=_rule)


def test_update_from_output_advances_appends_and_finishes_on_eos_and_length():
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=100, max_num_seqs=8)
    bm = BlockManager(10, 4)
    sched = Scheduler(cfg, bm, eos_ids={2})
    a, b, c = seq("a", 5), seq("b", 3, max_tokens=1), seq("c", 3)
    for s in (a, b, c):
        sched.add(s)
    out = sched.schedule()
    result = ModelRunnerOutput(sampled={"a": [9], "b": [9], "c": [2]})
    outs = sched.update_from_output(out, result, 1.5)
    assert [(o.request_id, o.finished, o.finish_reason, o.new_token_ids) for o in outs] == [
        ("a", False, None, (9,)), ("b", True, "length", (9,)), ("c", True, "stop", (2,))]
    assert a.num_computed_tokens == 5 and a.token_ids[-1] == 9 and a.metrics.first_token_time == 1.5
    assert sched.running == [a] and b.block_table == [] and c.block_table == []
    assert bm.num_free_blocks == 10 - 2 and outs[0].text == "<9>"
    assert outs[2].text == ""                  # EOS's text stays out


def test_update_from_output_fails_one_request_alone():
    sched = Scheduler(EngineConfig(block_size=4), BlockManager(10, 4))
    a, b = seq("a", 3), seq("b", 3)
    sched.add(a), sched.add(b)
    out = sched.schedule()
    result = ModelRunnerOutput(sampled={"b": [5]}, errors={"a": "bad row"})
    outs = sched.update_from_output(out, result, 0.0)
    assert [(o.request_id, o.finish_reason, o.error) for o in outs] == [
        ("a", "error", "bad row"), ("b", None, None)]
    assert sched.running == [b] and a.is_finished and a.token_ids == [1, 2, 3]


def test_a_stop_string_ends_the_text_where_it_starts():
    sched = Scheduler(EngineConfig(block_size=4), BlockManager(10, 4))
    a = seq("a", 3, stop=["<5><6"])
    sched.add(a)
    sent = []
    for token in (4, 5, 6):
        outs = complete_step(sched.schedule(), sched, token)
        sent.append(outs[0].new_text)
    assert outs[0].finished and outs[0].stop_reason == "<5><6" and outs[0].text == "<4>"
    assert sent == ["", "<4", ">"]      # the last 4 characters are held back: "<5>" never went out


def test_drafts_are_data_scheduled_as_far_as_the_budget_allows():
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=8, max_num_seqs=8)
    bm = BlockManager(5, 4)
    sched = Scheduler(cfg, bm)
    a, b = seq("a", 3), seq("b", 3)
    sched.add(a), sched.add(b)
    complete_step(sched.schedule(), sched)     # both prefilled, sampled 7: 4 tokens, 3 computed
    out = sched.schedule({"a": [11, 12, 13, 14, 15, 16], "b": [21, 22]})
    sa, sb = out.scheduled
    assert (sa.start, sa.num_tokens, sa.spec_token_ids) == (3, 7, [11, 12, 13, 14, 15, 16])
    assert sa.token_ids == [7, 11, 12, 13, 14, 15, 16] and sa.samples
    assert (sb.num_tokens, sb.spec_token_ids) == (1, [])                # the budget of 8 is spent
    assert a.token_ids == [1, 2, 3, 7] and len(a.block_table) == 3      # nothing joined token_ids
    # a's target kept 2 of its 6 drafts and sampled one more: the blocks past the kept K/V go back
    result = ModelRunnerOutput(sampled={"a": [11, 12, 30], "b": [40]})
    outs = sched.update_from_output(out, result, 0.0)
    assert a.token_ids == [1, 2, 3, 7, 11, 12, 30] and a.num_computed_tokens == 6
    assert len(a.block_table) == 2
    assert b.num_computed_tokens == 4 and outs[0].new_token_ids == (11, 12, 30)
    m = a.metrics
    assert (m.num_draft_tokens, m.num_accepted_tokens, m.num_spec_steps) == (6, 2, 1)
    assert bm.num_free_blocks == 5 - 2 - 1


def test_drafts_take_only_free_blocks_and_never_preempt():
    sched = Scheduler(EngineConfig(block_size=4, max_num_batched_tokens=100), BlockManager(2, 4))
    a = seq("a", 3)
    sched.add(a)
    complete_step(sched.schedule(), sched)           # 4 tokens, 3 computed, one block
    out = sched.schedule({"a": [1] * 9})             # 8 slots in all: the real token and 4 drafts
    assert not out.preempted and out.scheduled[0].spec_token_ids == [1] * 4
    assert sched.block_manager.num_free_blocks == 0
