"""KV memory and batching arithmetic for chapters 4 and 5 (re-exported by ``minimal_engine.calculators``).

Quizzes and lessons call these (``answer_from``), so every number they show has one source:

    padded_slots(100, 16)                        -> 112   (7 blocks of 16 slots)
    last_block_waste(100, 16)                    -> 12    (slots reserved but empty in the last block)
    cached_prefix_tokens(1000, 16)               -> 992   (only full blocks are cached and reused)
    prefix_hit_rate(256, 64, 16, 10)             -> 0.72  (share of prompt tokens read from the cache)
    contiguous_users(pool_tokens=65536, max_model_len=8192)          -> 8
    paged_users(pool_tokens=65536, tokens_per_user=700, block_size=16) -> 93
    static_batch_idle_share([10, 100, 20, 50]) -> 0.55  (slot-steps a static batch leaves idle)
    goodput_rps(...)                             -> requests per second that met the SLO
"""
from __future__ import annotations


def _pos_int(x, name: str, zero: bool = False) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or int(x) != x or (x < 0 if zero else x < 1):
        raise ValueError(f"{name} must be a {'non-negative' if zero else 'positive'} integer, got {x!r}")
    return int(x)


def padded_slots(tokens: int, block_size: int) -> int:
    """Token slots that ``tokens`` tokens occupy in a paged cache: whole blocks, ceil(tokens / block_size) x block_size."""
    t, b = _pos_int(tokens, "tokens", zero=True), _pos_int(block_size, "block_size")
    return -(-t // b) * b


def last_block_waste(tokens: int, block_size: int) -> int:
    """Internal fragmentation of paging: empty slots in a sequence's last block (at most block_size - 1)."""
    return padded_slots(tokens, block_size) - _pos_int(tokens, "tokens", zero=True)


def cached_prefix_tokens(shared_len: int, block_size: int) -> int:
    """Tokens of a shared prefix a later request can reuse: only full blocks are hashed and cached."""
    return (_pos_int(shared_len, "shared_len", zero=True) // _pos_int(block_size, "block_size")) * block_size


def prefix_hit_rate(shared_len: int, own_len: int, block_size: int, num_requests: int) -> float:
    """Share of prompt tokens served from the prefix cache when ``num_requests`` requests share a prefix of
    ``shared_len`` tokens followed by ``own_len`` tokens of their own: the first request computes everything,
    each later one reuses the full blocks of the shared prefix (as vLLM's automatic prefix caching)."""
    n = _pos_int(num_requests, "num_requests")
    prompt = _pos_int(shared_len, "shared_len", zero=True) + _pos_int(own_len, "own_len", zero=True)
    if prompt < 1:
        raise ValueError("a prompt needs at least one token")
    hit = cached_prefix_tokens(min(shared_len, prompt - 1), block_size)   # the last prompt token is always computed
    return (n - 1) * hit / (n * prompt)


def contiguous_users(pool_tokens: int, max_model_len: int) -> int:
    """Requests that fit when each reserves ``max_model_len`` contiguous slots up front."""
    return _pos_int(pool_tokens, "pool_tokens", zero=True) // _pos_int(max_model_len, "max_model_len")


def paged_users(pool_tokens: int, tokens_per_user: int, block_size: int = 16) -> int:
    """Requests that fit with paging when each holds ``tokens_per_user`` tokens (rounded up to whole blocks)."""
    return _pos_int(pool_tokens, "pool_tokens", zero=True) // padded_slots(_pos_int(tokens_per_user, "tokens_per_user"),
                                                                         block_size)


def paged_over_contiguous(pool_tokens: int, max_model_len: int, tokens_per_user: int, block_size: int = 16) -> float:
    """How many times more requests fit with paging than with max_model_len reservations."""
    return paged_users(pool_tokens, tokens_per_user, block_size) / contiguous_users(pool_tokens, max_model_len)


def static_batch_idle_slots(output_lens: list[int]) -> int:
    """Decode slot-steps one static batch leaves idle: ``len x max - sum`` (tokens it could have made)."""
    lens = [_pos_int(x, "output length") for x in output_lens]
    if not lens:
        raise ValueError("output_lens must not be empty")
    return len(lens) * max(lens) - sum(lens)


def static_batches_idle_share(output_lens: list[int], group: int) -> float:
    """The idle share of requests run as static batches of ``group`` in order: all groups' idle slot-steps over
    all their slot-steps (each group runs to its longest member)."""
    lens = [_pos_int(x, "output length") for x in output_lens]
    groups = [lens[i:i + _pos_int(group, "group")] for i in range(0, len(lens), group)]
    if not groups:
        raise ValueError("output_lens must not be empty")
    return sum(map(static_batch_idle_slots, groups)) / sum(len(g) * max(g) for g in groups)


def padding_tokens(prompt_lens: list[int]) -> int:
    """Pad tokens in one left-padded prefill batch: ``len x max - sum``."""
    return static_batch_idle_slots(prompt_lens)


def static_batch_idle_share(output_lens: list[int]) -> float:
    """Share of decode slot-steps left idle by one static batch: every member waits for the longest one.

    ``1 - sum(lens) / (len(lens) x max(lens))``; continuous batching refills those slots with new requests.
    """
    lens = [_pos_int(x, "output length") for x in output_lens]
    if not lens:
        raise ValueError("output_lens must not be empty")
    return 1 - sum(lens) / (len(lens) * max(lens))


def padding_share(prompt_lens: list[int]) -> float:
    """Share of a left-padded prefill batch that is padding: ``1 - sum(lens) / (len(lens) x max(lens))``."""
    return static_batch_idle_share(prompt_lens)


def goodput_rps(ttft_ms: list[float], tpot_ms: list[float], duration_s: float, ttft_slo_ms: float,
                tpot_slo_ms: float) -> float:
    """Goodput: requests per second that met both SLOs (TTFT <= ttft_slo_ms and TPOT <= tpot_slo_ms)."""
    if len(ttft_ms) != len(tpot_ms):
        raise ValueError("ttft_ms and tpot_ms need one value per request")
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s!r}")
    ok = sum(1 for a, b in zip(ttft_ms, tpot_ms) if a <= ttft_slo_ms and (b != b or b <= tpot_slo_ms))
    return ok / duration_s


__all__ = ["cached_prefix_tokens", "contiguous_users", "goodput_rps", "last_block_waste", "padded_slots",
           "padding_share", "padding_tokens", "paged_over_contiguous", "paged_users", "prefix_hit_rate",
           "static_batch_idle_share", "static_batch_idle_slots", "static_batches_idle_share"]
