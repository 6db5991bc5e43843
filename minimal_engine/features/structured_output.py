"""Structured outputs: a grammar (JSON schema, regex, choice, Lark/GBNF) decides which tokens may
come next.

    LLM().generate(prompt, SamplingParams(structured_outputs=StructuredOutputsParams(json=schema)))

As in vLLM (its "guidance" backend), llguidance compiles the constraint and, before every sampled
token, fills a bitmask over the vocabulary: the sampler sets every token the grammar forbids to -inf
on this request's row only (other requests in the batch are untouched), then samples as usual; the
sampled token advances the matcher. When the grammar is complete only EOS is allowed, so the request
stops there. LLM gives a GrammarBackend to LLMEngine, which gives each constrained request its own
GrammarMatcher (seq.grammar).

Structured outputs are a bounded, isolated resource, as vLLM treats them: size limits before
compiling (structured_limits.py); each constraint compiled first in a child process within a time
budget, so a compiler crash costs that process only (structured_compile.py, structured_worker.py);
compiled constraints cached (the same schema twice compiles once); the next masks of all constrained
requests computed together on a thread of their own while the model runs (structured_masks.py).

JSON schemas: an object schema that lists `properties` but says nothing about `additionalProperties`
is closed (no keys but its own), as vLLM's default backend (xgrammar) reads it and as vLLM's
guidance backend does with `disable_additional_properties`; otherwise a small model invents keys
until max_tokens. An explicit `additionalProperties` (true or a schema) is kept. Before compiling,
every constraint passes the size limits of structured_limits.py (llguidance would crash the process
on some huge grammars)."""
from __future__ import annotations

import copy
import json
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future

import torch

from minimal_engine.features.structured_compile import CompileBudgetExceeded, CompileWorker
from minimal_engine.features.structured_limits import PARSER_LIMITS, check_json_schema, check_limits
from minimal_engine.features.structured_masks import MaskPool
from minimal_engine.features.structured_worker import compile_error, first_mask_error
from minimal_engine.sampling_params import StructuredOutputsParams

BITS = torch.arange(32, dtype=torch.int32)


# JSON without optional whitespace: vLLM's `disable_any_whitespace`, here the default. With whitespace allowed
# anywhere, a small model can spend every token on spaces before it closes the object (seen with the default model).
JSON_OPTIONS = {"whitespace_flexible": False}


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_SCHEMA_ONE = ("items", "additionalItems", "contains", "not", "if", "then", "else", "propertyNames",
               "additionalProperties", "unevaluatedProperties", "unevaluatedItems")


def closed_objects(schema, close: bool = True):
    """A copy of the schema in which every object schema with `properties` or `patternProperties`
    and no `additionalProperties` (nor `unevaluatedProperties`) has `additionalProperties: false`.
    allOf's members are not closed themselves (allOf joins them: closing each would refuse the
    others' keys); what they contain is."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: closed_objects(s) for name, s in out[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [closed_objects(s, key != "allOf") for s in out[key]]
    for key in _SCHEMA_ONE:
        if isinstance(out.get(key), dict):
            out[key] = closed_objects(out[key])
    if close and ("properties" in out or "patternProperties" in out) and not (
            "additionalProperties" in out or "unevaluatedProperties" in out):
        out["additionalProperties"] = False
    return out


def grammar_text(so: StructuredOutputsParams) -> str:
    """The constraint as llguidance's grammar definition; a bad schema or pattern raises
    ValueError."""
    import llguidance
    if so.json_object or so.json is not None:
        schema = ({"type": "object"} if so.json_object
                  else closed_objects(check_json_schema(so.json)))
        return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
    if so.regex is not None:
        return llguidance.grammar_from("regex", so.regex)
    if so.choice is not None:
        return llguidance.grammar_from("choice", json.dumps(so.choice))
    return llguidance.grammar_from("grammar", so.grammar)


class GrammarMatcher:
    """One request's grammar state: the mask for its next token, and the tokens it has taken.

    accept() hands the token to the MaskPool and returns; mask() waits for the next mask (usually
    computed during the forward pass) and applies it. The first mask comes with the compiled
    grammar."""

    def __init__(self, matcher, vocab_size: int, masks: MaskPool, first_mask: torch.Tensor):
        self.matcher, self.vocab_size, self.masks = matcher, vocab_size, masks
        self.bitmask = first_mask.clone()          # [1, vocab / 32] int32, one bit per token
        self._next: Future | None = None                  # the pool's work for the next mask
        self.fill_s = 0.0                # how long the pool took for the last mask
        self.step_s = float("inf")       # the shortest time from accept() to the next mask's use
        self._accepted_at: float | None = None

    def allowed(self) -> torch.Tensor:
        """[vocab] bool: the tokens the grammar allows next (waits for the pool if it is busy)."""
        if self._next is not None:
            if self._accepted_at is not None:
                self.step_s = min(self.step_s, time.perf_counter() - self._accepted_at)
                self._accepted_at = None
            self.fill_s = self._next.result()     # seconds; a refused token raises ValueError here
        bits = (self.bitmask[0, :, None] >> BITS) & 1                     # [vocab / 32, 32]
        return bits.flatten()[:self.vocab_size].bool()

    def mask(self, row: torch.Tensor) -> torch.Tensor:
        """row: [vocab] logits -> a copy with the forbidden tokens at -inf."""
        allowed = self.allowed().to(row.device)
        return row.masked_fill(~allowed[:row.shape[-1]], float("-inf"))

    def copy(self) -> "GrammarMatcher":
        """A matcher in the same state (each request of n > 1 gets its own)."""
        self.allowed()
        return GrammarMatcher(self.matcher.deep_copy(), self.vocab_size, self.masks, self.bitmask)

    def accept(self, token: int) -> None:
        """Take the sampled token; the pool advances the matcher and fills the next mask."""
        self._accepted_at = time.perf_counter()
        self._next = self.masks.advance(self, [token])

    def ready(self) -> bool:
        """Is the next mask computed (mask() would not wait)?"""
        return self._next is None or self._next.done()

    def late(self) -> bool:
        """Would the next step wait for this mask? It is not ready, and the last one took the pool
        more than half a step (the shortest accept-to-use time seen: the pool's thread shares the
        GIL with the step, so a mask near a step's length is often still running when it is used).
        The scheduler then leaves the request out of the step: a heavy grammar slows its own
        request, not the others' (benchmarks/grammar_masks_tpot.py)."""
        return not self.ready() and self.fill_s > self.step_s / 2


class GrammarBackend:
    """Compiles constraints (each one once: a cache) and gives each request its own matcher.

    The llguidance tokenizer is built here, once, when the LLM is made. A constraint compiles first
    in the CompileWorker's child process (a crash or a time-out costs that process, and the
    constraint is refused with a ValueError), then here; its first mask is computed with it, which
    also refuses a constraint that admits no output or that llguidance cannot parse. A server calls
    compile() on a thread of its own, with `cancel` set when the client leaves; matcher() then
    finds it compiled."""

    def __init__(self, tokenizer, vocab_size: int, compiler: CompileWorker | None = None,
                 masks: MaskPool | None = None, cache_size: int = 64):
        self.tokenizer, self.vocab_size, self.cache_size = tokenizer, vocab_size, cache_size
        self.compiler = compiler if compiler is not None else CompileWorker()
        self.masks = masks if masks is not None else MaskPool(vocab_size)
        self._cache: OrderedDict = OrderedDict()   # grammar text -> (matcher, first mask) or error
        self._inflight: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.compiles = 0                          # grammars compiled in this process (misses)
        self.ll_tokenizer, self._no_llguidance = None, None
        try:
            import llguidance
        except ImportError:
            self._no_llguidance = ("structured outputs need the llguidance package (pinned in "
                                   "requirements.txt): run make setup")
            return
        hf = copy.copy(tokenizer.hf.backend_tokenizer)
        hf.no_padding()
        hf.no_truncation()
        text = hf.to_str()
        self.ll_tokenizer = llguidance.LLTokenizer(text, n_vocab=vocab_size,
                                                   eos_token=tokenizer.eos_token_id)
        self.compiler.configure({"tokenizer": text, "n_vocab": vocab_size,
                                 "eos_token": tokenizer.eos_token_id, "limits": PARSER_LIMITS})

    def compile(self, so: StructuredOutputsParams, cancel: threading.Event | None = None) -> None:
        """Make sure the constraint is compiled (a ValueError says why it cannot be); raises
        CompileCancelled when `cancel` is set before the child answers."""
        self._compiled(so, cancel)

    def matcher(self, so: StructuredOutputsParams) -> GrammarMatcher:
        """The constraint's matcher, compiled or from the cache (a bad one raises ValueError)."""
        matcher, first_mask = self._compiled(so, None)
        return GrammarMatcher(matcher.deep_copy(), self.vocab_size, self.masks, first_mask)

    def _compiled(self, so, cancel):
        if self._no_llguidance:
            raise ValueError(self._no_llguidance)
        try:
            check_limits(so)
            text = grammar_text(so)
        except UnicodeEncodeError as e:          # one line, not the codec's message (L8)
            raise ValueError(f"structured_outputs: the constraint contains a lone surrogate "
                             f"(U+{ord(e.object[e.start]):04X}); it must be valid "
                             "Unicode") from None
        except (ValueError, RuntimeError, TypeError) as e:
            raise ValueError(f"structured_outputs: {e}") from None
        while True:
            with self._lock:
                entry = self._cache.get(text)
                if entry is not None:
                    self._cache.move_to_end(text)
                    break
                busy = self._inflight.get(text)
                if busy is None:
                    self._inflight[text] = threading.Event()
            if busy is None:
                entry = self._compile_once(text, cancel)
                break
            busy.wait()                  # the same constraint is compiling for another request
        if isinstance(entry, str):
            raise ValueError(f"structured_outputs: {entry}")
        return entry

    def _compile_once(self, text: str, cancel):
        """Compile, cache what came out (not a failed or cancelled compile), wake the waiters."""
        entry = None
        try:
            entry = self._compile(text, cancel)
            return entry
        finally:
            with self._lock:
                if entry is not None:
                    self._cache[text] = entry
                    while len(self._cache) > self.cache_size:
                        self._cache.popitem(last=False)
                self._inflight.pop(text).set()

    def _compile(self, text: str, cancel):
        """(matcher, first mask), or why the constraint cannot be used (a str, cached as well)."""
        import llguidance
        import llguidance.torch
        try:
            error = self.compiler.check(text, cancel)     # the child first: a crash costs only it
        except CompileBudgetExceeded as e:                # not cached: the machine may be busy
            raise ValueError(f"structured_outputs: {e}") from None
        if error:
            return error
        self.compiles += 1
        m = llguidance.LLMatcher(self.ll_tokenizer, text,
                                 limits=llguidance.LLParserLimits(**PARSER_LIMITS), log_level=0)
        if m.is_error():
            return compile_error(m)
        first = llguidance.torch.allocate_token_bitmask(1, self.vocab_size)
        llguidance.torch.fill_next_token_bitmask(m, first)
        return first_mask_error(m, first.numpy().tobytes()) or (m, first)
