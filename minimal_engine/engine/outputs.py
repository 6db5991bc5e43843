"""What a step hands on, as data: the scheduler's plan for the runner (SchedulerOutput), the
runner's results (ModelRunnerOutput, which the scheduler applies to the requests), the per-step
counters (StepStats) and what a request has produced (RequestOutput, as vLLM's). Nothing here
changes a request.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from minimal_engine.engine.logprobs import with_text
from minimal_engine.engine.sequence import RequestMetrics, Sequence


@dataclass
class ScheduledSeq:
    seq: Sequence
    start: int          # tokens of seq already in the KV cache before this step
    num_tokens: int     # tokens computed in this step: seq's own, then its drafts
    spec_token_ids: list[int] = field(default_factory=list)   # drafts after its last token

    @property
    def token_ids(self) -> list[int]:
        """The tokens this step computes."""
        end = self.start + self.num_tokens - len(self.spec_token_ids)
        return self.seq.token_ids[self.start:end] + self.spec_token_ids

    @property
    def samples(self) -> bool:
        """Does this step reach the end of seq's tokens, so that a next token is sampled?"""
        return self.start + self.num_tokens - len(self.spec_token_ids) == len(self.seq)


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    new_requests: list[Sequence] = field(default_factory=list)   # scheduled for the first time

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled

    def stats(self, prefix_caching: bool) -> StepStats:
        new = self.new_requests if prefix_caching else []    # prefix-cache lookups
        return StepStats(self.num_tokens, len(self.preempted), sum(s.num_prompt_tokens for s in new),
                         sum(s.num_cached_tokens for s in new))


@dataclass
class ModelRunnerOutput:
    """One step's results by request id (vLLM's ModelRunnerOutput). Scheduler.update_from_output
    applies them: the only place where a step changes a request."""

    sampled: dict[str, list[int]] = field(default_factory=dict)   # one token, or kept drafts + 1
    errors: dict[str, str] = field(default_factory=dict)          # sampling failed: it alone fails
    logprobs: dict[str, list[dict]] = field(default_factory=dict)  # one entry per sampled token
    prompt_logprobs: dict[str, list[dict]] = field(default_factory=dict)   # prompt positions scored

    def decoded(self, tokenizer) -> ModelRunnerOutput:
        """The same results with each logprob's token text filled in (logprobs.py)."""
        return replace(self, logprobs={r: with_text(e, tokenizer)
                                       for r, e in self.logprobs.items()},
                       prompt_logprobs={r: with_text(e, tokenizer)
                                        for r, e in self.prompt_logprobs.items()})


@dataclass(frozen=True)
class StepStats:
    """What the latest step did, for per-step counters (vLLM's SchedulerStats): the tokens it ran,
    the requests it preempted, and the prefix-cache lookups of requests scheduled for the first time
    (in prompt tokens; zero without prefix caching)."""

    num_scheduled_tokens: int = 0
    num_preempted: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0


@dataclass
class RequestOutput:
    """What a request has produced so far (or in total, when finished)."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]
    finished: bool
    finish_reason: str | None
    metrics: RequestMetrics
    new_text: str = ""            # text added by the latest step (streaming)
    new_token_ids: tuple = ()
    error: str | None = None      # finish_reason "error": what went wrong (the others go on)
    logprobs: list | None = None  # SamplingParams.logprobs: per output token {id: Logprob}
    prompt_logprobs: list | None = None
    stop_reason: str | int | None = None   # the stop string or token id that ended it (None: EOS)
    num_cached_tokens: int = 0    # prompt tokens whose K/V came from the prefix cache (as vLLM's)
    completions: list | None = None  # SamplingParams(n > 1): the n completions (LLM groups them)

    @property
    def outputs(self) -> list[RequestOutput]:
        """vLLM compatibility: `out.outputs[i].text` (n completions per prompt; one when n=1)."""
        return self.completions or [self]


def request_output(seq: Sequence, new_text: str = "", new_ids: tuple = ()) -> RequestOutput:
    """seq as a RequestOutput: its text so far is what has been sent (stop_strings.py holds back
    what may still turn out to be the start of a stop string)."""
    return RequestOutput(seq.request_id, seq.prompt, seq.token_ids[:seq.num_prompt_tokens],
                         seq.detokenizer.text[:seq.sent_chars], seq.output_token_ids,
                         seq.is_finished, seq.finish_reason, seq.metrics, new_text, new_ids,
                         seq.error, seq.logprobs and list(seq.logprobs),
                         seq.prompt_logprobs and list(seq.prompt_logprobs), seq.stop_reason,
                         num_cached_tokens=seq.num_cached_tokens or 0)
