"""SamplingParams: how to pick each next token and when to stop (vLLM's names and meanings).

Every field is checked when the object is built, so a bad value fails before any request is queued.
As in vLLM, a temperature below SAMPLING_EPS is greedy: dividing logits by 1e-38 would overflow them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

SAMPLING_EPS = 1e-5               # vLLM's _SAMPLING_EPS: temperatures below it mean greedy
SEED_RANGE = (-(1 << 63), (1 << 63) - 1)   # int64, as vLLM's protocol (torch.Generator takes these)
MAX_LOGPROBS = 20                 # vLLM's default max_logprobs
# vLLM asks only > 0, but 1e-300 divides the logits into infinities and sampling fails (NaN): the
# range is one the sampler survives (1e3 / 0.01 stays finite), far wider than any useful setting
REPETITION_PENALTY_RANGE = (0.01, 100.0)


def child_seed(seed: int | None, i: int) -> int | None:
    """The seed of choice i of a request with n > 1 (seed, seed+1, ...), wrapped into int64 so that a valid
    seed near 2**63 - 1 stays valid for every choice (torch.Generator.manual_seed takes int64)."""
    if seed is None:
        return None
    low, high = SEED_RANGE
    return (seed + i - low) % (high - low + 1) + low


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class StructuredOutputsParams:
    """vLLM's structured outputs: exactly one constraint on the generated text (features/structured_output.py)."""

    json: dict | str | None = None    # a JSON schema (dict or its JSON text)
    regex: str | None = None          # a regular expression the whole output matches
    choice: list[str] | None = None   # the output is one of these strings
    grammar: str | None = None        # a Lark or GBNF grammar
    json_object: bool = False         # any JSON object (OpenAI's response_format {"type": "json_object"})

    def __post_init__(self):
        given = [n for n in ("json", "regex", "choice", "grammar") if getattr(self, n) is not None]
        given += ["json_object"] if self.json_object else []
        if len(given) != 1:
            raise ValueError(f"structured_outputs must set exactly one of json, regex, choice, grammar, json_object; "
                             f"got {given or 'none'}")
        if self.choice is not None and (not isinstance(self.choice, list) or not self.choice
                                        or not all(isinstance(c, str) for c in self.choice)):
            raise ValueError("structured_outputs: choice must be a non-empty list of strings")
        for name in ("regex", "grammar"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise ValueError(f"structured_outputs: {name} must be a string")
        if self.json is not None and not isinstance(self.json, (dict, str)):
            raise ValueError("structured_outputs: json must be a JSON schema (an object or its JSON text)")


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
    include_stop_str_in_output: bool = False   # keep the stop string's (or stop token's / EOS's) text in `text`
    stop: str | list[str] | None = None        # stop strings: the text is cut before the first one found
    presence_penalty: float = 0.0     # [-2, 2]: subtract it from every token already generated
    frequency_penalty: float = 0.0    # [-2, 2]: subtract it times the token's count in the output
    repetition_penalty: float = 1.0   # [0.01, 100]: divide (>1 discourages) seen tokens' logits
    min_tokens: int = 0               # EOS and stop tokens are masked (stop strings unchecked) before this many
    logprobs: int | None = None       # sampled token's logprob + the top k (raw model output, as vLLM)
    prompt_logprobs: int | None = None
    n: int = 1                        # completions of the prompt (LLM.generate; they share its cached blocks)
    min_p: float = 0.0                # [0, 1]: drop tokens less likely than min_p x the most likely one
    logit_bias: dict[int, float] | None = None   # token id -> added to its logit before anything else, [-100, 100]
    structured_outputs: StructuredOutputsParams | None = None   # constrain the output (JSON schema, regex, ...)

    def __post_init__(self):
        if not _is_int(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not _is_int(self.n) or self.n < 1:
            raise ValueError(f"n must be an integer >= 1, got {self.n!r}")
        if not _is_real(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 and finite (0 means greedy), got {self.temperature!r}")
        if not _is_real(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not _is_int(self.top_k) or (self.top_k < 1 and self.top_k != -1):
            raise ValueError(f"top_k must be -1 (disabled) or an integer >= 1, got {self.top_k!r}")
        if self.seed is not None and (not _is_int(self.seed) or not SEED_RANGE[0] <= self.seed <= SEED_RANGE[1]):
            raise ValueError(f"seed must be None or an integer in [-2**63, 2**63 - 1], got {self.seed!r}")
        ids = self.stop_token_ids
        if ids is None:
            ids = []
        if not isinstance(ids, (list, tuple, set, frozenset)) or not all(_is_int(t) for t in ids):
            raise ValueError(f"stop_token_ids must be a list of integers, got {str(ids)[:80]}")
        self.stop_token_ids = list(ids)
        self.stop_set = frozenset(ids)      # looked up once per token: a set, not a list
        self._check_extras()
        for name in ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")

    def _check_extras(self) -> None:
        """vLLM's ranges for stop strings, penalties, min_tokens and logprobs."""
        if self.stop is not None and not isinstance(self.stop, (str, list, tuple)):   # not a dict's keys, not 123
            raise ValueError(f"stop must be a string or a list of non-empty strings, got {type(self.stop).__name__}")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop must be a string or a list of non-empty strings, got {str(self.stop)[:80]}")
        self.stop = stop
        for name in ("presence_penalty", "frequency_penalty"):
            if not _is_real(getattr(self, name)) or not -2 <= getattr(self, name) <= 2:
                raise ValueError(f"{name} must be in [-2, 2], got {getattr(self, name)!r}")
        low, high = REPETITION_PENALTY_RANGE
        if not _is_real(self.repetition_penalty) or not low <= self.repetition_penalty <= high:
            raise ValueError(f"repetition_penalty must be greater than zero, in [{low:g}, "
                             f"{high:g}] (1 = no penalty), got {self.repetition_penalty!r}")
        if not _is_int(self.min_tokens) or not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be an integer in [0, max_tokens={self.max_tokens}], got {self.min_tokens!r}")
        if self.structured_outputs is not None and not isinstance(self.structured_outputs, StructuredOutputsParams):
            raise ValueError("structured_outputs must be a StructuredOutputsParams")
        if not _is_real(self.min_p) or not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p!r}")
        bias = self.logit_bias
        if bias is not None:
            if not isinstance(bias, dict) or not all(_is_int(t) and t >= 0 and _is_real(b) and -100 <= b <= 100
                                                     for t, b in bias.items()):
                raise ValueError("logit_bias must map token ids (integers >= 0) to numbers in [-100, 100], got "
                                 f"{str(bias)[:80]}")
            self.logit_bias = {int(t): float(b) for t, b in bias.items()} or None
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or not 0 <= v <= MAX_LOGPROBS):
                raise ValueError(f"{name} must be None or an integer in [0, {MAX_LOGPROBS}], got {v!r}")

    @property
    def penalized(self) -> bool:
        return self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1

    @property
    def adjusts_logits(self) -> bool:
        """Does anything change this request's logits before the draw (also for greedy rows)?"""
        return (self.penalized or bool(self.min_tokens) or self.logit_bias is not None
                or self.structured_outputs is not None)

    @property
    def greedy(self) -> bool:
        return self.temperature < SAMPLING_EPS
