"""The OpenAI request and response shapes the server speaks (/v1/completions, /v1/chat/completions).

parse_request() turns a JSON body into (prompt or messages, SamplingParams, stream options), raising
RequestError (-> HTTP 400) with a message that names the bad field. The *_chunk / *_response functions build
the JSON objects. Chat prompts: the tokenizer's chat template when it has one; otherwise (the course's
default model has none) a simple fallback template, documented here and in serve.py:

    <role>: <content>\\n   for each message, then   "assistant: "
"""
from __future__ import annotations

import time

from .sampling_params import SamplingParams

class RequestError(ValueError):
    def __init__(self, message: str, param: str | None = None, code: str = "invalid_request", status: int = 400,
                 type_: str = "invalid_request_error"):
        super().__init__(message)
        self.param, self.code, self.status, self.type = param, code, status, type_

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": self.type, "param": self.param, "code": self.code}}


def _number(body: dict, name: str, default, low: float, high: float, integer: bool = False):
    v = body.get(name)
    if v is None:
        return default
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if not ok or isinstance(v, bool) or not low <= v <= high:
        kind = "an integer" if integer else "a number"
        raise RequestError(f"'{name}' must be {kind} in [{low}, {high}], got {v!r}", name)
    return v


def parse_messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):        # [{"type": "text", "text": ...}, ...]
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") or not isinstance(content, str):
            raise RequestError(f"messages[{i}] must be {{'role': system|user|assistant, 'content': string}}", "messages")
        out.append({"role": m["role"], "content": content})
    return out


def chat_prompt(tokenizer, messages: list[dict]) -> list[int]:
    if tokenizer.has_chat_template:
        return tokenizer.apply_chat_template(messages)
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
    return tokenizer.encode(text)


def parse_request(body, chat: bool, max_model_len: int) -> tuple:
    """-> (prompt: str | list[int] | messages, SamplingParams, stream: bool, include_usage: bool)."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if _number(body, "n", 1, 1, 1, integer=True) != 1:
        raise RequestError("only n=1 is supported", "n")
    if body.get("stop") not in (None, [], ""):
        raise RequestError("'stop' strings are not supported by this engine; use 'stop_token_ids'", "stop")
    if chat:
        prompt = parse_messages(body.get("messages"))
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            if not prompt:
                raise RequestError("'prompt' is empty: give at least one character", "prompt")
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            pass
        else:
            raise RequestError("'prompt' must be a non-empty string or a non-empty list of token ids "
                               "(batched prompts are not supported: send one request per prompt)", "prompt")
        max_tokens, name = body.get("max_tokens"), "max_tokens"
    max_tokens = _number({name: max_tokens}, name, 16, 1, max_model_len, integer=True)
    stop_ids = body.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(isinstance(t, int) for t in stop_ids):
        raise RequestError("'stop_token_ids' must be a list of integers", "stop_token_ids")
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise RequestError(f"'seed' must be an integer, got {seed!r}", "seed")
    top_k = _number(body, "top_k", -1, -1, 1 << 31, integer=True)
    try:
        params = SamplingParams(
            temperature=_number(body, "temperature", 1.0, 0.0, 2.0), top_p=_number(body, "top_p", 1.0, 1e-9, 1.0),
            top_k=-1 if top_k == 0 else top_k, max_tokens=max_tokens, seed=seed, stop_token_ids=stop_ids,
            ignore_eos=bool(body.get("ignore_eos", False)))
    except ValueError as e:
        raise RequestError(str(e)) from None
    stream = body.get("stream", False)
    opts = body.get("stream_options") or {}
    if not isinstance(stream, bool) or not isinstance(opts, dict):
        raise RequestError("'stream' must be a boolean and 'stream_options' an object", "stream")
    return prompt, params, stream, bool(opts.get("include_usage", False))


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chunk(rid: str, model: str, chat: bool, text: str | None, finish_reason: str | None, role: bool = False) -> dict:
    """One streamed event (one token's text, possibly ""); role=True: the first chat chunk also names the role."""
    if chat:
        delta = {"role": "assistant", "content": text} if role else {"content": text}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                "choices": [choice]}
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}]}


def usage_chunk(rid: str, model: str, chat: bool, u: dict) -> dict:
    return {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [], "usage": u}


def full_response(rid: str, model: str, chat: bool, text: str, finish_reason: str, u: dict) -> dict:
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish_reason}
        return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [choice], "usage": u}
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}], "usage": u}
