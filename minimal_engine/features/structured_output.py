"""Structured outputs: a grammar (JSON schema, regex, choice, Lark/GBNF) decides which tokens may come next.

    LLM().generate(prompt, SamplingParams(structured_outputs=StructuredOutputsParams(json=schema)))

As in vLLM (its "guidance" backend), llguidance compiles the constraint and, before every sampled token, fills a
bitmask over the vocabulary: the sampler sets every token the grammar forbids to -inf on this request's row only
(other requests in the batch are untouched), then samples as usual; the sampled token advances the matcher. When the
grammar is complete only EOS is allowed, so the request stops there. LLM gives a GrammarBackend to LLMEngine, which
gives each constrained request its own GrammarMatcher (seq.grammar).

JSON schemas: an object schema that lists `properties` but says nothing about
`additionalProperties` is closed (no keys but its own), as vLLM's default backend (xgrammar) reads
it and as vLLM's guidance backend does with `disable_additional_properties`; otherwise a small model
invents keys until max_tokens. An explicit `additionalProperties` (true or a schema) is kept. Before
compiling, every constraint passes the size limits of structured_limits.py (llguidance would crash
the process on some huge grammars).
"""
from __future__ import annotations

import json

import torch

from minimal_engine.features.structured_limits import PARSER_LIMITS, check_json_schema, check_limits
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
    """The constraint as llguidance's grammar definition; a bad schema or pattern raises ValueError."""
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
    """One request's grammar state: the mask for its next token, and the tokens it has taken."""

    def __init__(self, matcher, vocab_size: int):
        self.matcher, self.vocab_size = matcher, vocab_size
        self.bitmask = torch.full((1, (vocab_size + 31) // 32), -1, dtype=torch.int32)

    def allowed(self) -> torch.Tensor:
        """[vocab] bool: the tokens the grammar allows next."""
        import llguidance.torch
        llguidance.torch.fill_next_token_bitmask(self.matcher, self.bitmask)
        bits = (self.bitmask[0, :, None] >> BITS) & 1                     # [vocab / 32, 32]
        return bits.flatten()[:self.vocab_size].bool()

    def mask(self, row: torch.Tensor) -> torch.Tensor:
        """row: [vocab] logits -> a copy with the forbidden tokens at -inf."""
        allowed = self.allowed().to(row.device)
        return row.masked_fill(~allowed[:row.shape[-1]], float("-inf"))

    def copy(self) -> "GrammarMatcher":
        """A matcher in the same state (each request of n > 1 gets its own)."""
        return GrammarMatcher(self.matcher.deep_copy(), self.vocab_size)

    def accept(self, token: int) -> None:
        if not self.matcher.consume_token(token):
            raise ValueError(f"the grammar refused token {token}: {self.matcher.get_error()}")


class GrammarBackend:
    """Builds the llguidance tokenizer once (lazily: only when a request is constrained) and a matcher per request."""

    def __init__(self, tokenizer, vocab_size: int):
        self.tokenizer, self.vocab_size = tokenizer, vocab_size
        self._lltok = None

    def _ll_tokenizer(self):
        if self._lltok is None:
            try:
                import llguidance.hf
            except ImportError:
                raise ValueError("structured outputs need the llguidance package (pinned in requirements.txt): "
                                 "run make setup") from None
            self._lltok = llguidance.hf.from_tokenizer(self.tokenizer.hf, n_vocab=self.vocab_size)
        return self._lltok

    def matcher(self, so: StructuredOutputsParams) -> GrammarMatcher:
        """Compile the constraint (a bad one raises ValueError before the request is queued)."""
        import llguidance
        try:
            check_limits(so)
        except ValueError as e:
            raise ValueError(f"structured_outputs: {e}") from None
        try:
            text = grammar_text(so)
        except (ValueError, RuntimeError, TypeError) as e:
            raise ValueError(f"structured_outputs: the constraint does not compile: {e}") from None
        limits = llguidance.LLParserLimits(**PARSER_LIMITS)
        m = llguidance.LLMatcher(self._ll_tokenizer(), text, limits=limits)
        if m.is_error():
            raise ValueError(f"structured_outputs: the constraint does not compile: {m.get_error()}")
        return GrammarMatcher(m, self.vocab_size)
