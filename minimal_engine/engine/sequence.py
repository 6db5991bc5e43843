"""Sequence: one request as the engine sees it: its tokens, KV blocks, progress and clock.

A sequence holds prompt and generated tokens in one list. `num_computed_tokens` counts how many
of them already have K and V in the cache (as vLLM's). LLMEngine.add_request builds a Sequence
whole; after that one owner changes it, the Scheduler (admission, preemption, and
update_from_output after each step; its BlockManager keeps the block table), as vLLM's Scheduler
owns its Requests. tests/engine/test_request_state_owner.py checks that nothing else does.
"""
from __future__ import annotations

import enum
import time

from minimal_engine.engine.metrics import RequestMetrics
from minimal_engine.sampling_params import SamplingParams

__all__ = ["RequestMetrics", "Sequence", "SequenceStatus"]   # RequestMetrics: metrics.py


class SequenceStatus(enum.Enum):
    WAITING = "waiting"      # in the waiting queue (new, or preempted)
    RUNNING = "running"      # holds KV blocks, scheduled every step
    FINISHED = "finished"


class Sequence:
    def __init__(self, request_id: str, prompt: str | None, prompt_token_ids: list[int],
                 params: SamplingParams, arrival_time: float | None = None, *, detokenizer=None,
                 generator=None, grammar=None, min_tokens_ids=frozenset(), metrics=None):
        """min_tokens_ids: EOS and stop tokens, masked before min_tokens; metrics: None, or
        RequestMetrics to start from (disaggregation)."""
        self.request_id = request_id
        self.prompt = prompt
        self.token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0
        self.block_table: list[int] = []       # physical block ids, in order
        self.num_cached_tokens: int | None = None   # prefix-cache hits when first scheduled
        self.finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
        self.error: str | None = None          # why the request failed (finish_reason "error")
        self.metrics = metrics or RequestMetrics(
            time.perf_counter() if arrival_time is None else arrival_time,
            num_prompt_tokens=len(prompt_token_ids))
        self.detokenizer = detokenizer         # model/tokenizer.py's IncrementalDetokenizer
        self.generator = generator             # torch.Generator of sampled rows
        self.grammar = grammar                 # structured outputs' matcher
        self.min_tokens_ids = min_tokens_ids
        self.logprobs = [] if params.logprobs is not None else None   # one dict per output token
        self.prompt_logprobs = [None] if params.prompt_logprobs is not None else None   # 1st: None
        self.stop_reason = None                # the stop string or stop token id that ended it
        self.sent_chars = 0                    # characters of text returned (stop_strings.py)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    def __repr__(self) -> str:
        return (f"Sequence({self.request_id!r}, {self.status.value}, tokens={len(self)}, "
                f"computed={self.num_computed_tokens}, blocks={len(self.block_table)})")
