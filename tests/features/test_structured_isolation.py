"""Structured outputs as a bounded, isolated resource, offline (issue 42, attack round 3 H2, M1, L3,
L9): each constraint compiles first in a child process, so a compiler crash costs the child only; a
compile has a time budget and can be cancelled; compiled constraints are cached; the llguidance
tokenizer is built once, when the LLM is made; a constraint llguidance cannot parse, or that admits
no output, is refused before the request is queued."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from minimal_engine import LLM, SamplingParams
from minimal_engine.features.structured_compile import CompileCancelled, CompileWorker
from minimal_engine.features.structured_limits import check_limits
from minimal_engine.features.structured_output import GrammarBackend
from minimal_engine.sampling_params import StructuredOutputsParams as Constraint

FAULTY = [sys.executable, str(Path(__file__).with_name("grammar_worker_faults.py"))]


@pytest.fixture(scope="module")
def llm():
    return LLM(max_num_seqs=4, num_kv_blocks=64)


def faulty_backend(llm, budget_s: float = 30.0) -> GrammarBackend:
    return GrammarBackend(llm.tokenizer, llm.model_config.vocab_size,
                          CompileWorker(budget_s=budget_s, argv=FAULTY))


@pytest.mark.parametrize("marker, signal_text", [("abort_here", "signal SIGABRT"),
                                                 ("exit_here", "exit code 3")])
def test_a_compiler_crash_refuses_that_constraint_and_the_next_one_compiles(llm, marker,
                                                                           signal_text):
    """Before: llguidance compiled in the process that serves, and a crash (H1's SIGSEGV) ended
    it. After: the child dies, the constraint is a ValueError naming how, the process lives on, a
    new child compiles the next constraint, and the crashing constraint is refused from the cache
    without killing another child."""
    backend = faulty_backend(llm)
    with pytest.raises(ValueError, match=f"compiler crashed on this constraint "
                                         f"\\({signal_text}\\)"):
        backend.matcher(Constraint(regex=marker))
    assert backend.compiler.starts == 1
    m = backend.matcher(Constraint(regex="[0-9]{3}"))
    assert m.allowed().any() and backend.compiler.starts == 2
    with pytest.raises(ValueError, match="crashed"):
        backend.matcher(Constraint(regex=marker))
    assert backend.compiler.starts == 2


def test_a_compile_past_its_budget_is_refused_naming_the_budget(llm):
    backend = faulty_backend(llm, budget_s=1.0)
    start = time.monotonic()
    with pytest.raises(ValueError, match="within the compile budget of 1 s"):
        backend.matcher(Constraint(regex="slow_here"))
    assert time.monotonic() - start < 30            # the child sleeps 60 s: it was killed
    assert backend.matcher(Constraint(regex="ab+")).allowed().any()


def test_a_cancelled_compile_stops_the_child_and_caches_nothing(llm):
    backend = faulty_backend(llm)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    start = time.monotonic()
    with pytest.raises(CompileCancelled):
        backend.compile(Constraint(regex="slow_here"), cancel)
    assert time.monotonic() - start < 30 and backend.compiles == 0
    assert not backend.compiler.running             # killed, not left sleeping


def test_the_same_constraint_twice_compiles_once(llm):
    """Before: every request compiled its constraint again (64 equal schemas: 64 compiles)."""
    backend = GrammarBackend(llm.tokenizer, llm.model_config.vocab_size)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    backend.matcher(Constraint(json=schema))
    backend.matcher(Constraint(json=dict(schema)))
    assert backend.compiles == 1
    threads = [threading.Thread(target=backend.matcher, args=(Constraint(regex="x{2,9}"),))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert backend.compiles == 2 and backend.compiler.starts == 1


def test_the_llguidance_tokenizer_is_built_once_when_the_llm_is_made(llm):
    """Before: built by the first constrained request (twice when two came at once, ~1 s in the
    pool every request needs)."""
    backend = llm.engine.grammars
    tokenizer = backend.ll_tokenizer
    assert tokenizer is not None and tokenizer.vocab_size == llm.model_config.vocab_size
    backend.matcher(Constraint(regex="[a-c]+"))
    backend.matcher(Constraint(choice=["はい", "いいえ"]))
    assert backend.ll_tokenizer is tokenizer


@pytest.mark.parametrize("constraint", [
    Constraint(regex=r"[^\s\S]"), Constraint(json={"$ref": "#"}),
    Constraint(json={"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"},
                                                    "b": {"$ref": "#/$defs/a"}}})])
def test_a_constraint_that_admits_no_output_is_refused(llm, constraint):
    """Before (L3): 200 with an empty text and finish_reason "stop"."""
    with pytest.raises(ValueError, match="admits no output"):
        llm.engine.check("吾輩は", SamplingParams(structured_outputs=constraint))


def test_many_optional_properties_are_refused_naming_the_limit(llm):
    """Before (M1): 1,000 optional properties compiled, then the first `{` failed with a 500
    ("Current row has 4007 items; max is 2000") and a parser dump. After: refused up front."""
    big = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(1000)}}
    with pytest.raises(ValueError, match="1000 optional properties .* at most 400 are allowed"):
        llm.engine.check("吾輩は", SamplingParams(structured_outputs=Constraint(json=big)))
    half_required = dict(big, required=[f"p{i}" for i in range(600)])
    check_limits(Constraint(json=half_required))      # 400 optional: allowed
    at_limit = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(400)}}
    m = llm.engine.grammars.matcher(Constraint(json=at_limit))
    for t in llm.tokenizer.encode('{"p399":7}'):
        m.accept(t)
    m.allowed()
    assert m.matcher.is_accepting()


def test_masks_of_a_step_are_filled_together_and_outputs_keep_their_grammar(llm):
    backend = llm.engine.grammars
    before = (backend.masks.batches, backend.masks.filled)
    params = SamplingParams(temperature=0, max_tokens=12,
                            structured_outputs=Constraint(regex="[0-9]{4}-[a-z]{4}"))
    outs = llm.generate(["吾輩は", "猫", "東京", "推論"], params, use_tqdm=False)
    assert all(len(o.text) == 9 and o.text[4] == "-" and o.text[:4].isdigit() for o in outs)
    batches, filled = backend.masks.batches - before[0], backend.masks.filled - before[1]
    assert filled > batches                          # at least one fill held several requests
