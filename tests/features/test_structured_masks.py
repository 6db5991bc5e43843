"""One heavy grammar beside a plain stream (issue 42, attack round 3 H3): its masks are computed on
the MaskPool's thread while the model runs the next step. What that does to the plain stream's TPOT
is a timing, measured by benchmarks/grammar_masks_tpot.py (a benchmark, not a timed unit test); this
test checks where the masks are filled, which no load on the machine changes. Before, each mask
was computed on the engine's thread inside the step (four 200 KB `const` schemas took another
client's TPOT from 7.5 to 142 ms). The heavy fill sleeps with the GIL released, as llguidance does
while it computes a mask; MaskPool(overlap=False), which computes each mask on the engine's thread as
before, is the control."""
from __future__ import annotations

import threading
import time

import llguidance.torch
import pytest

from minimal_engine import LLM, SamplingParams
from minimal_engine.config import DEFAULT_MODEL, ModelConfig
from minimal_engine.features.structured_masks import MaskPool
from minimal_engine.sampling_params import StructuredOutputsParams as Constraint

TOKENS = 12
PLAIN = SamplingParams(temperature=0, max_tokens=TOKENS, ignore_eos=True)
HEAVY = SamplingParams(temperature=0, max_tokens=TOKENS,
                       structured_outputs=Constraint(json={"const": "吾輩は猫である。" * 400}))


@pytest.fixture(scope="module")
def engines():
    delay = {"s": 0.0, True: set(), False: set()}   # and the threads that filled, by overlap

    def heavy_fill(overlap: bool):
        def fill(executor, pairs, masks):            # a mask that costs delay["s"], GIL released
            delay[overlap].add(threading.current_thread().name)
            time.sleep(delay["s"])
            llguidance.torch.fill_next_token_bitmask_par(executor, pairs, masks)
        return fill

    vocab = ModelConfig.from_folder(DEFAULT_MODEL).vocab_size
    make = lambda overlap: LLM(max_num_seqs=2, num_kv_blocks=32,  # noqa: E731
                               grammar_masks=MaskPool(vocab, overlap=overlap,
                                                      fill=heavy_fill(overlap)))
    return make(True), make(False), delay


def gaps(llm, beside_heavy: bool) -> list[float]:
    """The plain stream's gaps between tokens (its TPOT, token by token), alone or beside HEAVY."""
    if beside_heavy:
        out = llm.generate(["吾輩は", "猫"], [PLAIN, HEAVY], use_tqdm=False)[0]
    else:
        out = llm.generate(["吾輩は"], PLAIN, use_tqdm=False)[0]
    t = out.metrics.token_times
    return [b - a for a, b in zip(t, t[1:])]


def test_the_masks_are_filled_off_the_engines_thread(engines):
    """Where the work happens, which no load on the machine changes: the overlapped pool fills the
    masks on its own thread, the control on the thread that runs the steps."""
    overlapped, serial, delay = engines
    gaps(overlapped, True)
    gaps(serial, True)
    assert delay[True] and all(name.startswith("grammar-masks") for name in delay[True])
    assert delay[False] == {threading.current_thread().name}


def test_a_late_mask_leaves_its_request_out_not_the_others(engines):
    """A mask that takes longer than a step: once the pool has taken longer than a step for it,
    the scheduler leaves that request out until its mask is ready (GrammarMatcher.late), so the
    plain stream gets its tokens while the heavy request waits for its own masks. Counted in
    steps, not timed: with the heavy mask at 0.4 s and the plain request's 12 tokens, the heavy
    request gets a few tokens by the time the plain one is done, where without the skip it gets
    one per step, as many as the plain one ."""
    overlapped, _, delay = engines
    delay["s"] = 0.4
    try:
        engine = overlapped.engine
        engine.add_request("吾輩は", PLAIN, request_id="plain")
        engine.add_request("猫", HEAVY, request_id="heavy")
        heavy = engine.seqs["heavy"]
        while "plain" in engine.seqs:
            engine.step()
        heavy_tokens = heavy.num_output_tokens
        while engine.scheduler.has_unfinished():
            engine.step()
    finally:
        delay["s"] = 0.0
    assert heavy_tokens < TOKENS // 2, f"the heavy request kept pace: {heavy_tokens} tokens"
    assert heavy.num_output_tokens == TOKENS          # and it still finishes
