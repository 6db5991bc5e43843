"""The error a client gets as OpenAI-style JSON ({"error": {message, type, param, code}}), and the small checks
every request parser shares (a true/false field, text that must be valid Unicode); refusal(): the 400
for a request LLMEngine.check refused, naming the field the client sent."""
from __future__ import annotations

import re

from minimal_engine.engine.requests import check_unicode


class RequestError(ValueError):
    """An error the client gets as OpenAI-style JSON: {"error": {message, type, param, code}}."""

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_request", status: int = 400,
                 type_: str = "invalid_request_error"):
        # a quoted value may hold a lone surrogate ("\udfff" sent in a wrong-typed field): JSON cannot carry it
        # as UTF-8, so it is written as its escape, and the client gets this 400, not a 500 from the encoder
        super().__init__(message.encode("utf-8", "backslashreplace").decode("utf-8"))
        self.param, self.code, self.status, self.type = param, code, status, type_

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": self.type, "param": self.param, "code": self.code}}


def server_error(message: str, status: int = 500) -> RequestError:
    return RequestError(message, None, "server_error" if status == 500 else "unavailable", status, "server_error")


def flag(body: dict, name: str, default: bool = False) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise RequestError(f"'{name}' must be true or false, got {str(v)[:40]!r}", name)
    return v


def check_text(text: str, param: str) -> str:
    try:
        check_unicode(text, param)
    except ValueError as e:
        raise RequestError(str(e), param) from None
    return text


SPEC_REFUSED = " is not supported with speculative decoding"
PENALTIES = ("presence_penalty", "frequency_penalty", "repetition_penalty")


def refusal(message: str, chat: bool, params, prompt_logprobs_sent: bool) -> RequestError:
    """The 400 for a request LLMEngine.check refused, its param the field the client sent: the
    penalty that is set (not the message's list of three); echo when the client asked for echo's
    logprobs and never sent prompt_logprobs."""
    param = _param_of(re.sub(r"^prompt \d+: ", "", message), chat, params)
    if param == "prompt_logprobs" and not prompt_logprobs_sent:
        param = "echo"
    return RequestError(message, param)


def _param_of(message: str, chat: bool, params) -> str:
    """Which field an engine validation message is about."""
    if SPEC_REFUSED in message:
        what = message.split(SPEC_REFUSED)[0]
        if what.endswith("penalties"):
            return next(n for n in PENALTIES if getattr(params, n) != (n == PENALTIES[2]))
        return what
    for field in ("stop_token_ids", "structured_outputs", "min_tokens", "logit_bias",
                  "prompt_logprobs"):
        if message.startswith(field):
            return field
    if "KV pool" in message:
        return "max_tokens"
    return "messages" if chat else "prompt"
