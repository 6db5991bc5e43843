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
from dataclasses import dataclass, field

from minimal_engine.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"      # in the waiting queue (new, or preempted)
    RUNNING = "running"      # holds KV blocks, scheduled every step
    FINISHED = "finished"


@dataclass
class RequestMetrics:
    """Timestamps (time.perf_counter seconds) and the vLLM formulas built on them."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    token_times: list[float] = field(default_factory=list)   # one per generated token
    num_prompt_tokens: int = 0
    num_preemptions: int = 0
    num_draft_tokens: int = 0       # speculative decoding (features/spec_decode/): drafts
    num_accepted_tokens: int = 0    # proposed, those accepted, and verification steps
    num_spec_steps: int = 0

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_times)

    @property
    def ttft(self) -> float | None:
        """TTFT = first token time - arrival."""
        t = self.first_token_time
        return None if t is None else t - self.arrival_time

    @property
    def e2e_latency(self) -> float | None:
        """E2EL = last token time - arrival."""
        return None if not self.token_times else self.token_times[-1] - self.arrival_time

    @property
    def tpot(self) -> float | None:
        """TPOT = (E2EL - TTFT) / (output tokens - 1); defined only with 2+ output tokens."""
        n = self.num_output_tokens
        return None if n < 2 else (self.e2e_latency - self.ttft) / (n - 1)

    @property
    def acceptance_rate(self) -> float | None:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens per verification step: 1 + accepted / steps (vLLM's mean acceptance length)."""
        return 1 + self.num_accepted_tokens / self.num_spec_steps if self.num_spec_steps else None

    @property
    def itl(self) -> list[float]:
        """Inter-token latencies: the gaps between consecutive tokens."""
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:])]


class Sequence:
    def __init__(self, request_id: str, prompt: str | None, prompt_token_ids: list[int],
                 params: SamplingParams, arrival_time: float | None = None, *, detokenizer=None,
                 generator=None, grammar=None, min_tokens_ids=frozenset(), metrics=None):
        """detokenizer: model/tokenizer.py's IncrementalDetokenizer; generator: torch.Generator for
        sampled rows; grammar: structured outputs' matcher; min_tokens_ids: EOS and stop tokens, masked
        before min_tokens; metrics: None, or a RequestMetrics to start from (disaggregation)."""
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
        self.detokenizer = detokenizer
        self.generator = generator
        self.grammar = grammar
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
