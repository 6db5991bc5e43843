"""When a request stops: EOS, stop tokens and length (stop_token), and stop strings on the
incremental detokenizer's text, as vLLM does.

A stop string may span several tokens, so after each token the end of the text is searched (the new
characters plus the len(stop) - 1 before them). Once found, the text ends before it (or after it,
with include_stop_str_in_output) and the request stops with stop_reason = that string.
While streaming, the last max(len(stop)) - 1 characters are held back: they may be the start of a stop
string, which must never reach the client. They are sent when the request ends.
Stop strings are not checked before min_tokens output tokens.
"""
from __future__ import annotations


def find_stop(text: str, new_chars: int, stops: list[str], include: bool) -> tuple[int, str] | None:
    """(where to cut text, which stop string) for the earliest stop string ending in the new characters."""
    best = None
    for stop in stops:
        i = text.find(stop, max(0, len(text) - new_chars - len(stop) + 1))
        if i != -1 and (best is None or i < best[0]):
            best = (i, stop)
    if best is None:
        return None
    return (best[0] + len(best[1]) if include else best[0]), best[1]


def stop_token(seq, token: int, eos_ids, max_model_len: int | None) -> tuple:
    """(finish reason, stop_reason) after seq got token: "stop" on EOS (unless ignore_eos; stop
    reason None) or a stop token (stop_reason: that token), "length" at max_tokens/max_model_len."""
    p = seq.params
    if (token in eos_ids and not p.ignore_eos) or token in p.stop_set:
        return "stop", (token if token in p.stop_set else None)
    if seq.num_output_tokens >= p.max_tokens or (max_model_len and len(seq) >= max_model_len):
        return "length", None
    return None, None


def check_stop(seq, new_chars: int) -> tuple[int, str] | None:
    """(where to cut seq's text, which stop string) for a stop string that just appeared, or None.
    It cuts nothing: the scheduler sends the text up to the cut (Scheduler.update_from_output)."""
    p = seq.params
    if not p.stop or seq.num_output_tokens < p.min_tokens:
        return None
    return find_stop(seq.detokenizer.text, new_chars, p.stop, p.include_stop_str_in_output)


def sendable_end(seq, finished: bool) -> int:
    """How far seq's text may be sent: all of it when finished, else less what may still turn out
    to be the start of a stop string (never less than what was sent already)."""
    p, text = seq.params, seq.detokenizer.text
    holds = not finished and p.stop and not p.include_stop_str_in_output
    hold = max(map(len, p.stop)) - 1 if holds else 0
    return max(seq.sent_chars, len(text) - hold)
