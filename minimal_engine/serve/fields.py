"""The one rule for request fields: every field a client may send is implemented with vLLM's meaning, or refused.

Each field of OpenAI's completions and chat schemas (the `openai` SDK's CompletionCreateParams) and each vLLM extra
this server reads is in exactly one of three tables:
  * IMPLEMENTED: read by protocol.parse_request with vLLM's semantics;
  * NO_EFFECT:   accepted; they do not change the output in vLLM either (an end-user id, storage and routing hints);
  * REFUSED:     a value other than the default gets a 400 that names the field and says what is supported.
A field in none of them is unknown: ignored, and named once per request in a warning log ("ignored fields: ..."),
as vLLM does. tests/serve walks the SDK's field lists, so a new field cannot be dropped silently again.
"""
from __future__ import annotations

import logging

log = logging.getLogger("minimal_engine.serve")

COMMON = {"model", "stream", "stream_options", "n", "max_tokens", "temperature", "top_p", "seed", "stop", "logprobs",
          "presence_penalty", "frequency_penalty", "logit_bias", "response_format"}
IMPLEMENTED = {
    "completions": COMMON | {"prompt", "echo"},
    "chat": COMMON | {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls"},
}
VLLM_EXTRAS = {"top_k", "min_p", "repetition_penalty", "stop_token_ids", "ignore_eos", "min_tokens",
               "skip_special_tokens", "include_stop_str_in_output", "prompt_logprobs",
               "return_tokens_as_token_ids",
               "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar"}
NO_EFFECT = {"user", "metadata", "store", "service_tier", "prompt_cache_key", "prompt_cache_options",
             "prompt_cache_retention", "safety_identifier", "request_id", "priority"}


def _unset(v) -> bool:
    return v is None or v is False or v == [] or v == {} or v == ""


REFUSED = {     # field -> (is the value the harmless default?, what to say)
    "best_of": (lambda v: v is None or v == 1, "best_of > 1 is not supported (vLLM V1 dropped it too): use n"),
    "suffix": (_unset, "suffix (insertion) is not supported: send the whole prompt"),
    "functions": (_unset, "functions (function calling) is not implemented by this server"),
    "function_call": (lambda v: v is None or v == "none", "function_call is not supported: no function calling"),
    "audio": (_unset, "audio output is not supported: this is a text model"),
    "modalities": (lambda v: v is None or v == ["text"], "only the 'text' modality is supported"),
    "prediction": (_unset, "predicted outputs are not supported"),
    "reasoning_effort": (lambda v: v is None, "reasoning_effort is not supported: the model has no reasoning mode"),
    "verbosity": (lambda v: v is None, "verbosity is not supported"),
    "web_search_options": (_unset, "web search is not supported"),
    "moderation": (_unset, "moderation is not supported"),
    "length_penalty": (lambda v: v is None or v == 1, "length_penalty applies to beam search, which is not supported"),
    "use_beam_search": (lambda v: not v, "beam search is not supported"),
    "allowed_token_ids": (_unset, "allowed_token_ids is not supported: use logit_bias"),
    "bad_words": (_unset, "bad_words is not supported: use logit_bias"),
    "truncate_prompt_tokens": (lambda v: v is None, "truncate_prompt_tokens is not supported: send a shorter prompt"),
    "chat_template": (_unset, "chat_template is not supported: the model's own template is used"),
    "chat_template_kwargs": (_unset, "chat_template_kwargs is not supported"),
    "add_generation_prompt": (lambda v: v is None or v is True, "add_generation_prompt=false is not supported"),
    "continue_final_message": (lambda v: not v, "continue_final_message is not supported"),
    "documents": (_unset, "documents (RAG templates) are not supported"),
    "spaces_between_special_tokens": (lambda v: v is None or v is True,
                                      "spaces_between_special_tokens=false is not supported"),
}


class FieldError(ValueError):
    """A refused field: protocol.py turns it into a 400 with `param` set to the field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"'{field}': {message}")
        self.field = field


def check_fields(body: dict, route: str) -> list[str]:
    """Refuse what is not implemented; return (and log once) the fields nobody reads. route: completions | chat."""
    known = IMPLEMENTED[route] | VLLM_EXTRAS | NO_EFFECT
    for name, (harmless, message) in REFUSED.items():
        if name in body and not harmless(body[name]):
            raise FieldError(name, message)
    if route == "chat" and body.get("echo"):
        raise FieldError("echo", "echo is supported on /v1/completions only")
    ignored = sorted(k for k in body if k not in known and k not in REFUSED and not (route == "chat" and k == "echo"))
    if ignored:
        log.warning("ignored fields: %s", ", ".join(str(k)[:40] for k in ignored[:20]))
    return ignored
