"""The OpenAI request shapes the server reads (/v1/completions, /v1/chat/completions).

parse_request() turns a JSON body into a ParsedRequest (prompt or messages, SamplingParams, stream options, echo),
raising RequestError (-> HTTP 400) with a message that names the bad field and `param` set to it. Which fields are
read, accepted without effect or refused: fields.py. Messages: messages.py. The answers' shapes: responses.py.
Output constraints (response_format, vLLM's structured_outputs and guided_*) become StructuredOutputsParams.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from minimal_engine.features.structured_limits import check_limits
from minimal_engine.checks import MAX_LOGPROBS, SEED_RANGE
from minimal_engine.sampling_params import SamplingParams, StructuredOutputsParams
from minimal_engine.serve.errors import RequestError, check_text, flag
from minimal_engine.serve.fields import FieldError, check_fields
from minimal_engine.serve.messages import parse_messages
from minimal_engine.serve.tools import ToolCall, parse_tool_choice

MAX_STOP_TOKEN_IDS = 1024    # longer lists are refused (a 9 MB list would slow every step of the server)
MAX_STOP_STRINGS = 64
MAX_PROMPTS = 64             # batched prompts x n in one request


def _number(body: dict, name: str, default, low: float, high: float, integer: bool = False):
    v = body.get(name)
    if v is None:
        return default
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if not ok or isinstance(v, bool) or not low <= v <= high:     # NaN fails the range test too
        kind = "an integer" if integer else "a number"
        raise RequestError(f"'{name}' must be {kind} in [{low}, {high}], got {str(v)[:40]}", name)
    return v


def _ids(x) -> bool:
    return isinstance(x, list) and bool(x) and all(isinstance(t, int) and not isinstance(t, bool) for t in x)


def _prompts(body: dict) -> list:
    """'prompt' as OpenAI and vLLM take it: a string, a list of token ids, or a list of either (a batch)."""
    prompt = body.get("prompt")
    batch = [prompt] if isinstance(prompt, str) or _ids(prompt) else prompt
    if not isinstance(batch, list) or not batch or not all(isinstance(p, str) or _ids(p) for p in batch):
        raise RequestError("'prompt' must be a non-empty string, a non-empty list of token ids, or a non-empty "
                           "list of those (one completion per prompt)", "prompt")
    if len(batch) > MAX_PROMPTS:
        raise RequestError(f"'prompt' has {len(batch)} prompts; at most {MAX_PROMPTS} per request", "prompt")
    for p in batch:
        if p == "":
            raise RequestError("'prompt' is empty: give at least one character", "prompt")
        if isinstance(p, str):
            check_text(p, "prompt")
    return batch


def _stop(body: dict) -> list[str]:
    stop = body.get("stop")
    stop = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(x, str) for x in stop) or len(stop) > MAX_STOP_STRINGS:
        raise RequestError(f"'stop' must be a string or a list of at most {MAX_STOP_STRINGS} strings", "stop")
    return [check_text(x, "stop") for x in stop]       # an empty string is refused by SamplingParams (as vLLM)


def _logprobs(body: dict, chat: bool) -> int | None:
    """Completions: logprobs=k. Chat: logprobs=true with top_logprobs=k (OpenAI's names)."""
    if not chat:
        return _number(body, "logprobs", None, 0, MAX_LOGPROBS, integer=True)
    top = _number(body, "top_logprobs", None, 0, MAX_LOGPROBS, integer=True)
    if not flag(body, "logprobs"):
        if top is not None:
            raise RequestError("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        return None
    return top or 0


def _stop_token_ids(body: dict) -> list[int]:
    ids = body.get("stop_token_ids")
    if ids is None:
        return []
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise RequestError("'stop_token_ids' must be a list of integer token ids", "stop_token_ids")
    if len(ids) > MAX_STOP_TOKEN_IDS:
        raise RequestError(f"'stop_token_ids' has {len(ids)} entries; at most {MAX_STOP_TOKEN_IDS} are allowed",
                           "stop_token_ids")
    return ids


def _logit_bias(body: dict) -> dict[int, float] | None:
    """OpenAI's logit_bias: {"token id as a string": bias in [-100, 100]}."""
    bias = body.get("logit_bias")
    if bias is None:
        return None
    try:
        if not isinstance(bias, dict):
            raise ValueError
        out = {int(k): v for k, v in bias.items()}
    except (ValueError, TypeError):
        raise RequestError("'logit_bias' must map token ids (as strings) to numbers in [-100, 100]",
                           "logit_bias") from None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and -100 <= v <= 100 for v in out.values()):
        raise RequestError("'logit_bias' values must be numbers in [-100, 100]", "logit_bias")
    return out


def _structured(body: dict) -> StructuredOutputsParams | None:
    """response_format (OpenAI), structured_outputs (vLLM) or vLLM's older guided_* fields: at most one constraint."""
    given = {}
    fmt = body.get("response_format")
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind == "json_object":
            given["response_format"] = {"json_object": True}
        elif kind == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
                raise RequestError("response_format json_schema needs {'json_schema': {'name': ..., 'schema': "
                                   "{...}}}", "response_format")
            given["response_format"] = {"json": spec.get("schema", {})}
        elif kind != "text":
            raise RequestError("'response_format' type must be 'text', 'json_object' or 'json_schema', got "
                               f"{str(kind)[:40]!r}", "response_format")
    so = body.get("structured_outputs")
    if so is not None:
        if not isinstance(so, dict):
            raise RequestError("'structured_outputs' must be an object such as {'json': schema}", "structured_outputs")
        given["structured_outputs"] = so
    for name in ("json", "regex", "choice", "grammar"):
        if body.get(f"guided_{name}") is not None:
            given[f"guided_{name}"] = {name: body[f"guided_{name}"]}
    if len(given) > 1:
        raise RequestError(f"give one output constraint, got {sorted(given)}", sorted(given)[1])
    if not given:
        return None
    field, spec = next(iter(given.items()))
    try:
        so = StructuredOutputsParams(**spec)
        check_limits(so)                # sizes llguidance compiles without harm (structured_limits)
    except (TypeError, ValueError) as e:
        raise RequestError(f"'{field}': {e}", field) from None
    return so


@dataclass
class ParsedRequest:
    prompt: list                # prompts (str or token ids) for completions, or the parsed messages for chat
    params: SamplingParams
    stream: bool
    include_usage: bool
    echo: bool = False          # completions: the prompt (and its logprobs) in front of the output, as vLLM
    no_output: bool = False     # echo with max_tokens=0: the prompt only (the engine still runs one step)
    tool_call: ToolCall | None = None   # chat with tool_choice named or "required" (tools.py)
    show_prompt_logprobs: bool = True   # the client asked for prompt_logprobs (not only echo's logprobs)
    max_tokens: int | None = None       # as the client sent it (None: not sent, a default applies)
    max_tokens_field: str = "max_tokens"    # or chat's "max_completion_tokens", when that was sent
    tokens_as_ids: bool = False     # vLLM's return_tokens_as_token_ids: tokens named "token_id:N"


def parse_request(body, chat: bool, max_model_len: int, max_prompt_chars: int | None = None) -> ParsedRequest:
    """Every field is checked here, before anything is tokenized or queued."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    try:
        check_fields(body, "chat" if chat else "completions")
    except FieldError as e:
        raise RequestError(str(e), e.field) from None
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise RequestError("'model' must be a string (see /v1/models)", "model")
    n = _number(body, "n", 1, 1, MAX_PROMPTS, integer=True)
    if chat:
        prompt, param = parse_messages(body.get("messages"), max_prompt_chars), "messages"
        chars = sum(len(m["content"]) for m in prompt)
        name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    else:
        prompt, param, name = _prompts(body), "prompt", "max_tokens"
        chars = max(len(p) if isinstance(p, str) else 0 for p in prompt)
        if len(prompt) * n > MAX_PROMPTS:
            raise RequestError(f"{len(prompt)} prompts x n={n} completions: at most {MAX_PROMPTS} per request", "n")
    if max_prompt_chars is not None and chars > max_prompt_chars:
        raise RequestError(f"the {param} has {chars} characters; at most {max_prompt_chars} can fit in "
                           f"max_model_len={max_model_len} tokens", param)
    echo = not chat and flag(body, "echo")
    # no max_tokens: 16 for completions (OpenAI's and vLLM's default); for chat the rest of the
    # context (vLLM), set by Completions.prepare once the prompt is tokenized (until then the
    # whole max_model_len)
    asked = _number(body, name, None, 0 if echo else 1, max_model_len, integer=True)
    max_tokens = asked if asked is not None else max_model_len if chat else 16
    no_output = echo and max_tokens == 0
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)
                             or not SEED_RANGE[0] <= seed <= SEED_RANGE[1]):
        raise RequestError(f"'seed' must be an integer in [-2**63, 2**63 - 1], got {str(seed)[:40]}", "seed")
    top_k = _number(body, "top_k", -1, -1, 1 << 31, integer=True)
    constraint, tool_call = _structured(body), parse_tool_choice(body) if chat else None
    if tool_call is not None:
        if constraint is not None:
            raise RequestError("a forced tool call cannot be combined with response_format or structured_outputs",
                               "tool_choice")
        constraint = tool_call.constraint
    kwargs = dict(temperature=_number(body, "temperature", 1.0, 0.0, 2.0), top_p=_number(body, "top_p", 1.0, 1e-9, 1.0),
                  top_k=-1 if top_k == 0 else top_k, max_tokens=max(max_tokens, 1), seed=seed,
                  min_p=_number(body, "min_p", 0.0, 0.0, 1.0), logit_bias=_logit_bias(body),
                  structured_outputs=constraint,
                  stop_token_ids=_stop_token_ids(body), ignore_eos=flag(body, "ignore_eos"),
                  skip_special_tokens=flag(body, "skip_special_tokens", True),
                  include_stop_str_in_output=flag(body, "include_stop_str_in_output"), stop=_stop(body),
                  logprobs=_logprobs(body, chat), n=n,
                  prompt_logprobs=_number(body, "prompt_logprobs", None, 0, MAX_LOGPROBS, integer=True),
                  **{k: body[k] for k in ("presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens")
                     if body.get(k) is not None})
    try:
        params = SamplingParams(**kwargs)
    except ValueError as e:
        raise RequestError(str(e), str(e).split()[0]) from None   # the message starts with the field's name
    stream = flag(body, "stream")
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise RequestError("'stream_options' must be an object", "stream_options")
    shown = params.prompt_logprobs is not None
    if echo and params.logprobs is not None and params.prompt_logprobs is None:
        params = replace(params, prompt_logprobs=params.logprobs)   # echo's logprobs cover the prompt too
    return ParsedRequest(prompt, params, stream, flag(opts or {}, "include_usage"), echo=echo, no_output=no_output,
                         show_prompt_logprobs=shown, tool_call=tool_call, max_tokens=asked,
                         max_tokens_field=name,
                         tokens_as_ids=flag(body, "return_tokens_as_token_ids"))
