"""LLM(..., batching="static"): groups of max_num_seqs run to completion before the next group starts.

The step composition is recorded by wrapping the scheduler: with static batching no step mixes two groups and
a finished member's slot stays empty; with continuous batching (the default) a waiting request takes it."""
import pytest

from minimal_engine import LLM, SamplingParams
from minimal_engine.config import EngineConfig

PROMPTS = [[5, 17, 33, 100, 7], [11, 12], list(range(40, 70)), [300, 2, 250] * 4, [8, 9, 10]]
MAX_TOKENS = [3, 12, 6, 9, 4]          # members finish at different steps


def params():
    return [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for m in MAX_TOKENS]


def run_recording(llm):
    """Generate PROMPTS; return the outputs and, per step, the ids of the requests it computed."""
    steps, schedule = [], llm.engine.scheduler.schedule

    def recording(drafts=None):
        out = schedule(drafts)
        steps.append({int(s.seq.request_id) for s in out.scheduled})
        return out
    llm.engine.scheduler.schedule = recording
    outs = llm.generate(PROMPTS, params(), use_tqdm=False)
    return outs, [s for s in steps if s]


@pytest.fixture(scope="module")
def continuous(llama_dir):
    return run_recording(LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=2))


def test_static_gives_the_same_tokens(llama_dir, continuous):
    outs, _ = run_recording(LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=2, batching="static"))
    assert [o.token_ids for o in outs] == [o.token_ids for o in continuous[0]]


def test_static_waits_for_the_whole_group(llama_dir, continuous):
    _, steps = run_recording(LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=2, batching="static"))
    groups = [{0, 1}, {2, 3}, {4}]
    which = [next(g for g, members in enumerate(groups) if ids <= members) for ids in steps]  # raises if mixed
    assert which == sorted(which), "groups run one after another"
    # group 0: request 0 stops after 3 tokens, request 1 after 12; its slot stays idle meanwhile
    assert steps[:12] == [{0, 1}] * 3 + [{1}] * 9 and steps[12] == {2, 3}
    # continuous batching fills the freed slot at once: some step mixes requests of different groups
    assert any(ids == {1, 2} for ids in continuous[1])


def test_static_respects_preemption_and_leaks_nothing(llama_dir, continuous):
    llm = LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=2, batching="static", block_size=4,
              num_kv_blocks=12)
    outs, _ = run_recording(llm)
    assert [o.token_ids for o in outs] == [o.token_ids for o in continuous[0]]
    assert sum(o.metrics.num_preemptions for o in outs) > 0, "the pool was meant to be too small"
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks and not llm.engine.has_unfinished_requests()


def test_batching_is_checked():
    with pytest.raises(ValueError, match="batching"):
        EngineConfig(batching="dynamic")
