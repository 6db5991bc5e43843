"""Latency and throughput metrics (chapters 1 and 10): TPOT <-> tok/s/user, output vs total tokens.

"Output" vs "total" tokens: the course's tok/s counts *output* (generated) tokens, as most engines and
MLPerf do; InferenceX's ``tput_per_gpu`` and its $/M tokens and J/token count *total* tokens (input +
output). With ``input_len`` prompt tokens and ``output_len`` generated tokens per request,
``output_share = output_len / (input_len + output_len)`` converts one into the other (8k in / 1k out:
1024 / 9216 = 1/9). Plain Python (no torch); time is in milliseconds where the name says ``_ms``.
"""
from __future__ import annotations

from minimal_engine.calculators.datasheets import _check_positive

__all__ = ["tpot_ms_from_tok_s_user", "tok_s_user_from_tpot_ms", "output_share", "output_tok_s_from_total",
           "total_tok_s_from_output"]


# ---------------------------------------------------- TPOT and interactivity
def tpot_ms_from_tok_s_user(tok_s_user: float) -> float:
    """TPOT in ms from interactivity: ``1000 / tok_s_user`` (60 tok/s/user -> 16.67 ms)."""
    _check_positive(tok_s_user, "tok_s_user")
    return 1000.0 / tok_s_user


def tok_s_user_from_tpot_ms(tpot_ms: float) -> float:
    """Interactivity (tok/s/user) from TPOT: ``1000 / tpot_ms`` (InferenceX's ``intvty``)."""
    _check_positive(tpot_ms, "tpot_ms")
    return 1000.0 / tpot_ms


# ------------------------------------------------ output vs total tokens
def _check_lengths(input_len: float, output_len: float) -> None:
    _check_positive(input_len, "input_len", allow_zero=True)
    _check_positive(output_len, "output_len")


def output_share(input_len: float, output_len: float) -> float:
    """Fraction of a request's tokens that are output tokens: ``output_len / (input_len + output_len)``.

    8k in / 1k out: 1024 / (8192 + 1024) = 1/9 = 0.111. 1k / 1k: 0.5.
    """
    _check_lengths(input_len, output_len)
    return output_len / (input_len + output_len)


def output_tok_s_from_total(total_tok_s: float, input_len: float, output_len: float) -> float:
    """Output tok/s hidden in a total (input + output) tok/s: ``total_tok_s x output_share``.

    InferenceX's MI355X row, 157.12 total tok/s/GPU at 8k/1k: 157.12 / 9 = 17.46 output tok/s/GPU.
    """
    _check_positive(total_tok_s, "total_tok_s", allow_zero=True)
    return total_tok_s * output_share(input_len, output_len)


def total_tok_s_from_output(output_tok_s: float, input_len: float, output_len: float) -> float:
    """Total (input + output) tok/s that goes with an output tok/s: ``output_tok_s / output_share``.

    Every request of ``input_len`` prompt tokens and ``output_len`` generated
    tokens processes ``input_len + output_len`` tokens; 100 output tok/s at
    8k/1k is 900 total tok/s.
    """
    _check_positive(output_tok_s, "output_tok_s", allow_zero=True)
    return output_tok_s / output_share(input_len, output_len)
