"""The checks behind SamplingParams, StructuredOutputsParams and EngineConfig (read after the core
path).

Each dataclass calls its check in `__post_init__`, so a bad value fails when the object is built,
before any request is queued, with a message that names the field and what is allowed. The ranges
are vLLM's; where a range differs, the constant below says why. The option vocabulary of
LLM(quantization=..., kv_cache_dtype=...) lives here too (features/quantization.py and
engine/kv_cache.py implement it).
"""
from __future__ import annotations

import math
import numbers

SEED_RANGE = (-(1 << 63), (1 << 63) - 1)   # int64, as vLLM's protocol (torch.Generator takes these)
MAX_LOGPROBS = 20                 # vLLM's default max_logprobs
# vLLM asks only > 0, but 1e-300 divides the logits into infinities and sampling fails (NaN): the
# range is one the sampler survives (1e3 / 0.01 stays finite), far wider than any useful setting
REPETITION_PENALTY_RANGE = (0.01, 100.0)
QUANTIZATION_METHODS = (None, "int8")
KV_CACHE_DTYPES = ("auto", "fp8", "int8")


def is_int(v) -> bool:
    """An integer: Python's or numpy's (np.int64 from an array), never a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)   # np.bool_ is no Integral


def is_real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


INT_FIELDS = ("max_tokens", "n", "top_k", "min_tokens")


def check_sampling_params(p) -> dict:
    """Raise ValueError naming the first bad field of SamplingParams `p`; return the fields that
    take more than one form in one form each: stop strings and stop token ids as lists, the logit
    bias as a dict or None, integers (numpy's too) as Python ints, top_k=0 as -1 (all tokens, as
    vLLM reads 0)."""
    if not is_int(p.max_tokens) or p.max_tokens < 1:
        raise ValueError(f"max_tokens must be an integer >= 1, got {p.max_tokens!r}")
    if not is_int(p.n) or p.n < 1:
        raise ValueError(f"n must be an integer >= 1, got {p.n!r}")
    if not is_real(p.temperature) or p.temperature < 0:
        raise ValueError(f"temperature must be >= 0 and finite (0 means greedy), "
                         f"got {p.temperature!r}")
    if not is_real(p.top_p) or not 0 < p.top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {p.top_p!r}")
    if not is_int(p.top_k) or p.top_k < -1:
        raise ValueError(f"top_k must be -1 or 0 (all tokens) or an integer >= 1, got {p.top_k!r}")
    if p.seed is not None and (not is_int(p.seed) or not SEED_RANGE[0] <= p.seed <= SEED_RANGE[1]):
        raise ValueError(f"seed must be None or an integer in [-2**63, 2**63 - 1], got {p.seed!r}")
    ids = [] if p.stop_token_ids is None else p.stop_token_ids
    if not isinstance(ids, (list, tuple, set, frozenset)) or not all(is_int(t) for t in ids):
        raise ValueError(f"stop_token_ids must be a list of integers, got {str(ids)[:80]}")
    stop = check_stop(p.stop)
    for name in ("presence_penalty", "frequency_penalty"):
        if not is_real(getattr(p, name)) or not -2 <= getattr(p, name) <= 2:
            raise ValueError(f"{name} must be in [-2, 2], got {getattr(p, name)!r}")
    low, high = REPETITION_PENALTY_RANGE
    if not is_real(p.repetition_penalty) or not low <= p.repetition_penalty <= high:
        raise ValueError(f"repetition_penalty must be greater than zero, in [{low:g}, "
                         f"{high:g}] (1 = no penalty), got {p.repetition_penalty!r}")
    if not is_int(p.min_tokens) or not 0 <= p.min_tokens <= p.max_tokens:
        raise ValueError(f"min_tokens must be an integer in [0, max_tokens={p.max_tokens}], "
                         f"got {p.min_tokens!r}")
    if not is_real(p.min_p) or not 0 <= p.min_p <= 1:
        raise ValueError(f"min_p must be in [0, 1], got {p.min_p!r}")
    bias = check_logit_bias(p.logit_bias)
    for name in ("logprobs", "prompt_logprobs"):
        v = getattr(p, name)
        if v is not None and (not is_int(v) or not 0 <= v <= MAX_LOGPROBS):
            raise ValueError(f"{name} must be None or an integer in [0, {MAX_LOGPROBS}], got {v!r}")
    for name in ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output"):
        if not isinstance(getattr(p, name), bool):
            raise ValueError(f"{name} must be True or False, got {getattr(p, name)!r}")
    ints = {name: int(getattr(p, name)) for name in INT_FIELDS}
    ints["top_k"] = ints["top_k"] or -1
    for name in ("seed", "logprobs", "prompt_logprobs"):
        ints[name] = None if getattr(p, name) is None else int(getattr(p, name))
    return dict(ints, stop=stop, stop_token_ids=[int(t) for t in ids], logit_bias=bias)


def check_stop(stop) -> list[str]:
    if stop is not None and not isinstance(stop, (str, list, tuple)):   # not a dict's keys, not 123
        raise ValueError(f"stop must be a string or a list of non-empty strings, "
                         f"got {type(stop).__name__}")
    out = [stop] if isinstance(stop, str) else list(stop or [])
    if not all(isinstance(s, str) and s for s in out):
        raise ValueError(f"stop must be a string or a list of non-empty strings, "
                         f"got {str(stop)[:80]}")
    return out


def check_logit_bias(bias) -> dict[int, float] | None:
    if bias is None:
        return None
    if not isinstance(bias, dict) or not all(is_int(t) and t >= 0 and is_real(b)
                                             and -100 <= b <= 100 for t, b in bias.items()):
        raise ValueError("logit_bias must map token ids (integers >= 0) to numbers in [-100, 100], "
                         f"got {str(bias)[:80]}")
    return {int(t): float(b) for t, b in bias.items()} or None


def check_structured_outputs(s) -> None:
    """Exactly one constraint of StructuredOutputsParams `s`, of the right type."""
    given = [n for n in ("json", "regex", "choice", "grammar") if getattr(s, n) is not None]
    given += ["json_object"] if s.json_object else []
    if len(given) != 1:
        raise ValueError("structured_outputs must set exactly one of json, regex, choice, grammar, "
                         f"json_object; got {given or 'none'}")
    if s.choice is not None and (not isinstance(s.choice, list) or not s.choice
                                 or not all(isinstance(c, str) for c in s.choice)):
        raise ValueError("structured_outputs: choice must be a non-empty list of strings")
    for name in ("regex", "grammar"):
        if getattr(s, name) is not None and not isinstance(getattr(s, name), str):
            raise ValueError(f"structured_outputs: {name} must be a string")
    if s.json is not None and not isinstance(s.json, (dict, str)):
        raise ValueError("structured_outputs: json must be a JSON schema (an object or its JSON "
                         "text)")


def check_quantization(value) -> None:
    if value not in QUANTIZATION_METHODS:
        raise ValueError(f"quantization must be None (no quantization) or 'int8' (weight-only "
                         f"INT8, per output channel), got {value!r}")


def check_kv_cache_dtype(value) -> None:
    if value not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype must be 'auto' (the model dtype), 'fp8' (float8 e4m3 "
                         f"with a scale per KV head) or 'int8' (int8 with a scale per KV head), "
                         f"got {value!r}")


def check_engine_config(c) -> None:
    """Raise ValueError naming the first bad field of EngineConfig `c` and what is allowed."""
    for name in ("block_size", "max_num_seqs", "max_num_batched_tokens"):
        value = getattr(c, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    blocks, max_len = c.num_kv_blocks, c.max_model_len
    if blocks is not None and (not isinstance(blocks, int) or blocks < 1):
        raise ValueError(f"num_kv_blocks must be a positive integer or None, got {blocks!r}")
    if max_len is not None and (not isinstance(max_len, int) or max_len < 2):
        raise ValueError(f"max_model_len must be an integer >= 2 or None, got {c.max_model_len!r}")
    if c.cuda_graphs not in (None, True, False):
        raise ValueError(f"cuda_graphs must be None (auto), True or False, got {c.cuda_graphs!r}")
    if not isinstance(c.enable_prefix_caching, bool):
        raise ValueError(f"enable_prefix_caching must be True or False, "
                         f"got {c.enable_prefix_caching!r}")
    if c.batching not in ("continuous", "static"):
        raise ValueError(f"batching must be 'continuous' or 'static', got {c.batching!r}")
    check_quantization(c.quantization)
    check_kv_cache_dtype(c.kv_cache_dtype)
    if c.attention_backend not in (None, "paged", "gathered"):
        raise ValueError("attention_backend must be None (by device), 'paged' (block tables read "
                         "in place) or 'gathered' (contexts copied out in groups), "
                         f"got {c.attention_backend!r}")
