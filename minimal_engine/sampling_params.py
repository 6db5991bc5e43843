"""SamplingParams: how to pick each next token and when to stop (vLLM's names and meanings).

Every field is checked when the object is built (checks.py), so a bad value fails before any request
is queued. As in vLLM, a temperature below SAMPLING_EPS is greedy: dividing by 1e-38 would overflow.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from minimal_engine.checks import check_sampling_params, check_structured_outputs

SAMPLING_EPS = 1e-5               # vLLM's _SAMPLING_EPS


@dataclass(frozen=True)
class StructuredOutputsParams:
    """vLLM's structured outputs: one constraint on the text (features/structured_output.py)."""

    json: dict | str | None = None    # a JSON schema (dict or its JSON text)
    regex: str | None = None          # a regular expression the whole output matches
    choice: list[str] | None = None   # the output is one of these strings
    grammar: str | None = None        # a Lark or GBNF grammar
    json_object: bool = False         # any JSON object (OpenAI's response_format json_object)

    def __post_init__(self):
        check_structured_outputs(self)


@dataclass
class SamplingParams:
    temperature: float = 1.0          # 0 (or below SAMPLING_EPS) = greedy (argmax)
    top_k: int = -1                   # -1 = all tokens; otherwise keep the k most likely
    top_p: float = 1.0                # keep the smallest set whose probability reaches top_p
    max_tokens: int = 16              # at most this many new tokens
    seed: int | None = None           # per-request seed: same seed, same tokens
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False          # benchmarks: always generate max_tokens
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False   # keep the stop string's (or token's) text in `text`
    stop: str | list[str] | None = None        # stop strings: the text is cut before the first one
    presence_penalty: float = 0.0     # [-2, 2]: subtract it from every token already generated
    frequency_penalty: float = 0.0    # [-2, 2]: subtract it times the token's count in the output
    repetition_penalty: float = 1.0   # [0.01, 100]: divide (>1 discourages) seen tokens' logits
    min_tokens: int = 0               # before this many: EOS, stop tokens masked, stop strings off
    logprobs: int | None = None       # sampled token's logprob + the top k (raw model output)
    prompt_logprobs: int | None = None
    n: int = 1                        # completions of the prompt (they share its cached blocks)
    min_p: float = 0.0                # [0, 1]: drop tokens below min_p x the most likely one's
    logit_bias: dict[int, float] | None = None   # token id -> added to its logit first, [-100, 100]
    structured_outputs: StructuredOutputsParams | None = None   # JSON schema, regex, ...

    def __post_init__(self):
        vars(self).update(check_sampling_params(self))   # each field in one form
        if self.structured_outputs is not None and not isinstance(self.structured_outputs,
                                                                  StructuredOutputsParams):
            raise ValueError("structured_outputs must be a StructuredOutputsParams")
        self.stop_set = frozenset(self.stop_token_ids)   # looked up once per token: a set

    @property
    def penalized(self) -> bool:
        return (self.presence_penalty != 0 or self.frequency_penalty != 0
                or self.repetition_penalty != 1)

    @property
    def adjusts_logits(self) -> bool:
        """Does anything change this request's logits before the draw (also for greedy rows)?"""
        return (self.penalized or bool(self.min_tokens) or self.logit_bias is not None
                or self.structured_outputs is not None)

    @property
    def greedy(self) -> bool:
        return self.temperature < SAMPLING_EPS
