"""Sequence: one request as the engine sees it: its tokens, its KV blocks, its progress and its clock.

A sequence holds prompt and generated tokens in one list. `num_computed_tokens` counts how many of them
already have K and V in the cache; the scheduler moves it forward, chunk by chunk during prefill and one
token per step during decode. After a preemption it drops back to 0 and everything is recomputed.
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
    num_draft_tokens: int = 0       # speculative decoding (features/spec_decode/): drafts proposed, those accepted,
    num_accepted_tokens: int = 0    # and verification steps with drafts
    num_spec_steps: int = 0

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_times)

    @property
    def ttft(self) -> float | None:
        """TTFT = first token time - arrival."""
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

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
        """Tokens per verification step: 1 + accepted drafts / steps (vLLM's mean acceptance length)."""
        return 1 + self.num_accepted_tokens / self.num_spec_steps if self.num_spec_steps else None

    @property
    def itl(self) -> list[float]:
        """Inter-token latencies: the gaps between consecutive tokens."""
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:])]


class Sequence:
    def __init__(self, request_id: str, prompt: str | None, prompt_token_ids: list[int],
                 params: SamplingParams, arrival_time: float | None = None):
        self.request_id = request_id
        self.prompt = prompt
        self.token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0
        self.block_table: list[int] = []       # physical block ids, in order
        self.num_cached_tokens: int | None = None   # prompt tokens found in the prefix cache when first scheduled
        self.finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
        self.error: str | None = None          # why the request failed (finish_reason "error")
        self.metrics = RequestMetrics(time.perf_counter() if arrival_time is None else arrival_time,
                                      num_prompt_tokens=len(prompt_token_ids))
        self.detokenizer = None                # set by the engine (incremental text)
        self.generator = None                  # torch.Generator when params.seed is set
        self.grammar = None                    # structured outputs: this request's grammar matcher (set by the engine)
        self.min_tokens_ids = frozenset()      # set by the engine: EOS + stop tokens, masked before min_tokens
        self.logprobs = [] if params.logprobs is not None else None   # one dict per output token (sampler)
        self.prompt_logprobs = [None] if params.prompt_logprobs is not None else None   # first token: None
        self.stop_reason = None                # the stop string or stop token id that ended the request
        self.sent_chars = 0                    # characters of text already returned (stop-string hold-back)
        self.spec_token_ids: list[int] = []    # draft tokens at the end of token_ids, to verify (spec_decode/)

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

    def add_drafts(self, ids: list[int]) -> None:
        """Speculative decoding: append draft tokens; the scheduler schedules them like a prefill chunk."""
        self.token_ids.extend(ids)
        self.spec_token_ids = list(ids)

    def keep_drafts(self, keep: int) -> None:
        """Take back every draft token except the first `keep` (those not scheduled, or all after verifying)."""
        n = len(self.spec_token_ids)
        if keep < n:
            del self.token_ids[len(self.token_ids) - n + keep:]
            self.spec_token_ids = self.spec_token_ids[:keep]

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    def __repr__(self) -> str:
        return (f"Sequence({self.request_id!r}, {self.status.value}, tokens={len(self)}, "
                f"computed={self.num_computed_tokens}, blocks={len(self.block_table)})")
