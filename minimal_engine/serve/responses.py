"""The OpenAI response shapes: usage, logprobs in the completions and chat formats, one choice, a streamed chunk, a
whole answer (vLLM's extras: stop_reason, prompt_logprobs, usage.prompt_tokens_details.cached_tokens)."""
from __future__ import annotations

import time

from minimal_engine.serve.token_text import Offsets, TokenText


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    """OpenAI's usage; prompt_tokens_details.cached_tokens: prompt tokens the prefix cache supplied (as vLLM)."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens, "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def completion_logprobs(entries: list, text: TokenText, offsets: Offsets,
                        first_id: int | None = None, as_id: bool = False) -> dict:
    """OpenAI's completions format: tokens, token_logprobs, top_logprobs ({token name: logprob}),
    text_offset (names and offsets: token_text.py). A None entry is a prompt's first token (echo),
    `first_id`: its logprob and top_logprobs are null."""
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for entry in entries:
        if entry is None:
            first = (text.name(first_id, as_id), None, None, offsets.next(first_id))
            for key, value in zip(out, first):
                out[key].append(value)
            continue
        tid, lp = next(iter(entry.items()))     # the sampled token comes first (logprobs.token_logprobs)
        out["tokens"].append(text.name(tid, as_id))
        out["token_logprobs"].append(lp.logprob)
        out["top_logprobs"].append({text.name(t, as_id): e.logprob for t, e in entry.items()})
        out["text_offset"].append(offsets.next(tid))
    return out


def chat_logprobs(entries: list[dict], k: int, text: TokenText, as_id: bool = False) -> dict:
    """OpenAI's chat format: {"content": [{token, logprob, bytes, top_logprobs: [k x {token,
    logprob, bytes}]}]}; bytes: the token's own bytes (token_text.py)."""
    def one(tid, lp):
        return {"token": text.name(tid, as_id), "logprob": lp.logprob,
                "bytes": list(text.bytes_of(tid))}
    content = []
    for entry in entries:
        first = next(iter(entry.items()))
        top = sorted((x for x in entry.items() if x[1].rank <= k), key=lambda x: x[1].rank)[:k]
        content.append({**one(*first), "top_logprobs": [one(*x) for x in top]})
    return {"content": content}


def prompt_logprobs_json(entries: list | None) -> list | None:
    """vLLM's prompt_logprobs: per prompt token None (the first) or {token id: {logprob, rank, decoded_token}}."""
    if entries is None:
        return None
    return [None if e is None else {str(t): {"logprob": lp.logprob, "rank": lp.rank,
                                             "decoded_token": lp.decoded_token} for t, lp in e.items()}
            for e in entries]


def _choice(chat: bool, index: int, text: str | None, finish_reason, logprobs, stop_reason, stream: bool,
            role: bool = False, prompt_logprobs=None) -> dict:
    extra = {} if prompt_logprobs is None else {"prompt_logprobs": prompt_logprobs_json(prompt_logprobs)}
    if not chat:
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason,
                "stop_reason": stop_reason, **extra}
    body = text if isinstance(text, dict) else (  # a dict: the whole message (tool calls, tools.py)
        {"role": "assistant", "content": text} if role or not stream else {"content": text})
    return {"index": index, "delta" if stream else "message": body, "logprobs": logprobs,
            "finish_reason": finish_reason, "stop_reason": stop_reason, **extra}


def chunk(rid: str, model: str, chat: bool, text: str | None, finish_reason: str | None, role: bool = False,
          index: int = 0, logprobs: dict | None = None, stop_reason=None) -> dict:
    """One streamed event (one token's text, possibly ""); role=True: the first chat chunk also names the role."""
    return {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": int(time.time()),
            "model": model, "choices": [_choice(chat, index, text, finish_reason, logprobs, stop_reason, True, role)]}


def usage_chunk(rid: str, model: str, chat: bool, u: dict) -> dict:
    return {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [], "usage": u}


def full_response(rid: str, model: str, chat: bool, choices: list[tuple], u: dict) -> dict:
    """choices: (text, finish_reason, logprobs, stop_reason, prompt_logprobs) per choice, in index order."""
    return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": model, "choices": [_choice(chat, i, *c[:4], False, prompt_logprobs=c[4]) for i, c in enumerate(choices)], "usage": u}
