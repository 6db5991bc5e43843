"""Chat messages as OpenAI's clients send them, and the prompt they make.

Roles: system, developer (OpenAI's newer name for system, read as system as vLLM does), user and assistant (an
assistant turn's content may be null). Tool-result turns and earlier tool calls are refused: forced tool calls are
generated (tools.py), but the course's chat template cannot show a tool's result to the model.
The prompt: the tokenizer's chat template when it has one (the course's default model has a Japanese-only one: see
its README); otherwise a fallback template, `<role>: <content>\\n` for each message, then `assistant: `.
"""
from __future__ import annotations

from minimal_engine.engine.requests import chat_message
from minimal_engine.serve.errors import RequestError


def parse_messages(messages, max_chars: int | None = None) -> list[dict]:
    """Check and normalise the messages. max_chars: the prompt's character cap, applied before any templating;
    each message counts its content plus one character (every template writes at least a separator per turn),
    so many empty messages cannot slip past it."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of {role, content} objects", "messages")
    if max_chars is not None and len(messages) > max_chars:
        raise RequestError(f"{len(messages)} messages: at most {max_chars} (the prompt's character limit, each "
                           "message counting at least one character)", "messages")
    out, chars = [], 0
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("tool", "function"):
            raise RequestError(f"messages[{i}] has role {role!r}: tool results cannot be given to the model (its chat "
                               "template has no tool role); function calling here is tool_choice named or "
                               "'required' on a new conversation", "messages")
        if isinstance(m, dict) and m.get("tool_calls"):
            raise RequestError(f"messages[{i}].tool_calls: earlier tool calls cannot be given to the model (its chat "
                               "template has no place for them)", "messages")
        try:                            # the rules LLM.chat applies too (engine/requests.py)
            out.append(chat_message(m if isinstance(m, dict) else {}, f"messages[{i}]"))
        except ValueError as e:
            raise RequestError(str(e), "messages") from None
        chars += len(out[-1]["content"]) + 1
        if max_chars is not None and chars > max_chars:
            raise RequestError(f"the messages have more than {max_chars} characters (each message counting its "
                               f"content plus one); at most {max_chars}", "messages")
    return out


def chat_prompt(tokenizer, messages: list[dict]) -> list[int]:
    if tokenizer.has_chat_template:
        try:
            return tokenizer.apply_chat_template(messages)
        except Exception as e:                   # jinja2.TemplateError raised by the template itself, ...
            raise RequestError(f"the model's chat template refused these messages: {type(e).__name__}: {e}",
                               "messages") from None
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
    return tokenizer.encode(text)
