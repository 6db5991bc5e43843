"""Function calling when the client forces it: `tool_choice` names a function, or is "required".

The arguments are generated under a JSON-schema constraint (structured outputs), so they always parse:
  * {"type": "function", "function": {"name": f}}: the output is f's arguments, matching f's `parameters` schema;
  * "required": the output is a non-empty JSON array of {"name": one of the tools, "parameters": its arguments}
    (the form vLLM constrains "required" to), returned as one tool call per item: at most
    MAX_PARALLEL_CALLS items, or one with parallel_tool_calls=false (a small model may otherwise
    repeat calls until max_tokens). When max_tokens cuts the array, the calls already complete are
    returned, with finish_reason "length" (as vLLM: "tool_calls" only when the output ended itself).
"auto" (OpenAI's default when tools are given) is refused: it needs the model to decide between text and a call,
which takes a tool-call parser for the model's own format; "none" ignores the tools. The tools are not shown to the
model in the prompt (the course's chat template has no place for them): the constraint alone makes the call.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from minimal_engine.features.structured_limits import check_limits
from minimal_engine.sampling_params import StructuredOutputsParams
from minimal_engine.serve.errors import RequestError, check_text

MAX_PARALLEL_CALLS = 8      # items of a "required" array (OpenAI sets none; small models repeat)


@dataclass(frozen=True)
class ToolCall:
    mode: str                   # "named" | "required"
    name: str | None            # the named function
    constraint: StructuredOutputsParams


def _tools(body: dict) -> dict[str, dict]:
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        raise RequestError("'tools' must be a non-empty list of {'type': 'function', 'function': {...}}", "tools")
    out = {}
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) and t.get("type") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., 'parameters': "
                               "{...}}}}", "tools")
        check_text(fn["name"], f"tools[{i}].function.name")
        params = fn.get("parameters", {"type": "object"})
        if not isinstance(params, dict):
            raise RequestError(f"tools[{i}].function.parameters must be a JSON schema object", "tools")
        out[fn["name"]] = params
    return out


def parse_tool_choice(body: dict) -> ToolCall | None:
    """None when no tool call is forced (no tools, or tool_choice "none")."""
    choice = body.get("tool_choice")
    if body.get("tools") in (None, []):
        if choice not in (None, "none"):
            raise RequestError("'tool_choice' needs 'tools'", "tool_choice")
        return None
    if choice == "none":
        return None
    tools = _tools(body)
    if choice is None or choice == "auto":
        raise RequestError("tool_choice 'auto' (the default when tools are given) is not supported: pass "
                           "tool_choice 'required', a named function {'type': 'function', 'function': {'name': ...}}, "
                           "or 'none'", "tool_choice")
    if body.get("stream"):
        raise RequestError("streaming tool calls is not supported: send stream=false with tools", "stream")
    if choice == "required":
        items = [{"type": "object", "properties": {"name": {"enum": [name]}, "parameters": schema},
                  "required": ["name", "parameters"], "additionalProperties": False}
                 for name, schema in tools.items()]
        parallel = body.get("parallel_tool_calls", True)
        if not isinstance(parallel, bool):
            raise RequestError("'parallel_tool_calls' must be true or false", "parallel_tool_calls")
        schema = {"type": "array", "minItems": 1, "maxItems": MAX_PARALLEL_CALLS if parallel else 1,
                  "items": {"anyOf": items}}
        return ToolCall("required", None, _constraint(schema))
    named = isinstance(choice, dict) and choice.get("type") == "function"
    fn = choice.get("function") if named else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str) or name not in tools:
        raise RequestError("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', "
                           "'function': {'name': one of the names in 'tools'}}, got "
                           f"{str(choice)[:80]}", "tool_choice")
    return ToolCall("named", name, _constraint(tools[name]))


def _constraint(schema: dict) -> StructuredOutputsParams:
    """The tools' JSON schema as a constraint, within the size limits of structured outputs."""
    try:
        so = StructuredOutputsParams(json=schema)
        check_limits(so)
    except ValueError as e:
        raise RequestError(f"'tools': {e}", "tools") from None
    return so


def complete_items(text: str) -> list:
    """The complete items at the start of a JSON array, also when the array was cut (max_tokens)."""
    decoder, items = json.JSONDecoder(), []
    i = len(text) - len(text.lstrip())
    if text[i:i + 1] != "[":
        return items
    i += 1
    while True:
        while text[i:i + 1].isspace():
            i += 1
        try:
            item, i = decoder.raw_decode(text, i)
        except ValueError:               # cut inside this item (or the array is empty)
            return items
        items.append(item)
        while text[i:i + 1].isspace():
            i += 1
        if text[i:i + 1] != ",":
            return items
        i += 1


def tool_message(call: ToolCall, text: str, finish_reason: str) -> tuple[dict, str]:
    """The generated text -> the assistant message with tool_calls, and OpenAI's finish_reason."""
    def one(name: str, arguments: str) -> dict:
        return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                "function": {"name": name, "arguments": arguments}}
    if call.mode == "named":
        calls = [one(call.name, text)]
        reason = "stop" if finish_reason == "stop" else finish_reason    # OpenAI: a forced call ends with "stop"
    else:
        calls = [one(c["name"], json.dumps(c["parameters"], ensure_ascii=False))
                 for c in complete_items(text)
                 if isinstance(c, dict) and isinstance(c.get("name"), str) and "parameters" in c]
        reason = "tool_calls" if calls and finish_reason == "stop" else finish_reason
    return {"role": "assistant", "content": None, "tool_calls": calls}, reason
