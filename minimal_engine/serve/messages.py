"""Chat messages as OpenAI's clients send them, and the prompt they make.

Roles: system, developer (OpenAI's newer name for system, read as system as vLLM does), user and assistant (an
assistant turn's content may be null). Tool-result turns and earlier tool calls are refused: forced tool calls are
generated (tools.py), but the course's chat template cannot show a tool's result to the model.
The prompt: the tokenizer's chat template when it has one (the course's default model has a Japanese-only one: see
its README); otherwise a fallback template, `<role>: <content>\\n` for each message, then `assistant: `.
"""
from __future__ import annotations

from minimal_engine.serve.errors import RequestError, check_text


def _content(content, i: int, role: str) -> str:
    if content is None and role == "assistant":    # OpenAI: an assistant turn may carry only tool calls
        return ""
    if isinstance(content, str):
        return check_text(content, "messages")
    if not isinstance(content, list):
        raise RequestError(f"messages[{i}].content must be a string or a list of text parts", "messages")
    texts = []
    for j, part in enumerate(content):            # [{"type": "text", "text": ...}, ...]
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text":
            raise RequestError(f"messages[{i}].content[{j}] has type {str(kind)[:40]!r}: this engine reads only "
                               "text parts ({'type': 'text', 'text': string})", "messages")
        if not isinstance(part.get("text"), str):
            raise RequestError(f"messages[{i}].content[{j}].text must be a string", "messages")
        texts.append(check_text(part["text"], "messages"))
    return "".join(texts)


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
        if role not in ("system", "developer", "user", "assistant"):
            raise RequestError(f"messages[{i}] must be {{'role': system|developer|user|assistant, 'content': "
                               f"string}}, got role {str(role)[:40]!r}", "messages")
        if m.get("tool_calls"):
            raise RequestError(f"messages[{i}].tool_calls: earlier tool calls cannot be given to the model (its chat "
                               "template has no place for them)", "messages")
        role = "system" if role == "developer" else role        # as vLLM: developer is the system role
        out.append({"role": role, "content": _content(m.get("content"), i, role)})
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
