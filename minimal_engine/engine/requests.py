"""Every check a request passes before it is queued (read after the core path): the prompt (text
or token ids) and its SamplingParams against the engine's fixed limits (vocabulary, max_model_len,
the KV pool). One place, used by LLM, the server and the disaggregated pair through
LLMEngine.check; a CheckedPrompt is queued without being checked again. Also the shapes LLM's
arguments may take (pair_prompts, conversations) and the child requests of SamplingParams(n > 1)
(children)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from minimal_engine.config import EngineConfig
from minimal_engine.checks import SEED_RANGE, is_int
from minimal_engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class CheckedPrompt:
    """A prompt tokenized and checked against one engine's limits (LLMEngine.check)."""

    text: str | None             # the prompt's text (None when it was given as token ids)
    token_ids: list[int]
    params: SamplingParams
    grammar: object = None       # structured outputs: the compiled constraint (copied per request)


def check_unicode(text: str, what: str) -> None:
    """A lone surrogate (e.g. JSON "\\ud800") cannot be encoded: say so instead of the tokenizer's
    message."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} contains a lone surrogate (U+{ord(text[e.start]):04X}) at "
                         f"character {e.start}: the text must be valid Unicode") from None


def tokenize_prompt(prompt, tokenizer) -> tuple[str | None, list[int]]:
    """A string is tokenized; a list of token ids is taken as it is (checked by check_request).
    vLLM's prompt dicts are read too: {"prompt_token_ids": [...]} (TokensPrompt) and
    {"prompt": "..."} (TextPrompt)."""
    if isinstance(prompt, dict):
        keys = set(prompt)
        if keys == {"prompt_token_ids"}:
            prompt = prompt["prompt_token_ids"]
            if not isinstance(prompt, (list, tuple)):
                raise TypeError("prompt_token_ids must be a list of token ids")
        elif keys == {"prompt"} and isinstance(prompt["prompt"], str):
            prompt = prompt["prompt"]
        else:
            raise TypeError(f"a prompt dict must be {{'prompt_token_ids': [ids]}} or "
                            f"{{'prompt': text}}, got keys {sorted(map(str, keys))[:5]}")
    if isinstance(prompt, str):
        if not prompt:
            raise ValueError("prompt is empty: give at least one character or one token id")
        check_unicode(prompt, "prompt")
        return prompt, tokenizer.encode(prompt)
    if isinstance(prompt, (list, tuple)):    # numpy's integers as Python's (np.int64 from arrays)
        return None, [int(t) if is_int(t) else t for t in prompt]
    raise TypeError(f"a prompt must be a string, a list of token ids or "
                    f"{{'prompt_token_ids': [ids]}}, got {type(prompt).__name__}")


def check_request(token_ids: list[int], params: SamplingParams, vocab: int, config: EngineConfig,
                  num_blocks: int) -> None:
    """Raise ValueError/TypeError naming what is wrong and what is allowed."""
    if not isinstance(params, SamplingParams):
        raise TypeError(f"sampling params must be a SamplingParams, got {type(params).__name__}")
    if not token_ids:
        raise ValueError("prompt is empty: it has no tokens")
    bad = [t for t in token_ids
           if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab]
    if bad:
        raise ValueError(f"token ids must be integers in [0, {vocab - 1}] (the vocabulary), "
                         f"got {bad[:5]}")
    stops = [t for t in params.stop_token_ids if not 0 <= t < vocab]
    if stops:
        raise ValueError(f"stop_token_ids must be in [0, {vocab - 1}] (the vocabulary), "
                         f"got {stops[:5]}")
    biased = [t for t in (params.logit_bias or {}) if t >= vocab]
    if biased:
        raise ValueError(f"logit_bias token ids must be in [0, {vocab - 1}] (the vocabulary), "
                         f"got {biased[:5]}")
    max_len = config.max_model_len
    if len(token_ids) >= max_len:
        raise ValueError(f"prompt has {len(token_ids)} tokens; max_model_len is {max_len}, "
                         f"so a prompt may have at most {max_len - 1} tokens")
    # the last sampled token is returned, never fed back, so it never takes a KV slot: hence the - 1
    need = min(len(token_ids) + params.max_tokens, max_len) - 1
    bs = config.block_size
    if -(-need // bs) > num_blocks:
        raise ValueError(f"the KV pool holds {num_blocks * bs} tokens ({num_blocks} blocks of "
                         f"{bs}) but this request needs up to {need} (prompt + max_tokens - 1); "
                         "raise num_kv_blocks or lower max_tokens")


def pair_prompts(prompts, sampling_params) -> list[tuple[object, SamplingParams]]:
    """LLM.generate's arguments: one prompt or a list, with one SamplingParams (None: the defaults)
    or one per prompt -> (prompt, params) pairs."""
    if isinstance(prompts, (str, dict)) or (isinstance(prompts, (list, tuple)) and prompts
                                            and all(is_int(t) for t in prompts)):
        prompts = [prompts]
    if not isinstance(prompts, (list, tuple)):
        raise ValueError("prompts must be a string, a list of token ids, a prompt dict or a list "
                         f"of these, got {type(prompts).__name__}")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts is empty: give at least one prompt")
    if sampling_params is None:
        sampling_params = SamplingParams()
    if isinstance(sampling_params, (list, tuple)):
        params = list(sampling_params)
    else:
        params = [sampling_params] * len(prompts)
    if len(params) != len(prompts):
        raise ValueError(f"got {len(prompts)} prompts but {len(params)} SamplingParams: give "
                         "one, or one per prompt")
    return list(zip(prompts, params))


ROLES = ("system", "developer", "user", "assistant")


def conversations(messages) -> list[list[dict]]:
    """LLM.chat's argument: one conversation ([{"role": ..., "content": ...}]) or a list of them,
    each message checked and read as the server reads it (chat_message)."""
    ok = isinstance(messages, (list, tuple)) and messages and (
        all(isinstance(m, dict) for m in messages)
        or all(isinstance(c, (list, tuple)) and c and all(isinstance(m, dict) for m in c)
               for c in messages))
    if not ok:
        raise ValueError('messages must be a conversation (a list of {"role": ..., "content": ...} '
                         "dicts) or a list of conversations, got "
                         f"{type(messages).__name__} {str(messages)[:40]!r}")
    convs = [messages] if isinstance(messages[0], dict) else list(messages)
    where = (lambda k, i: f"messages[{i}]") if len(convs) == 1 else (
        lambda k, i: f"conversation {k}: messages[{i}]")
    return [[chat_message(m, where(k, i)) for i, m in enumerate(c)] for k, c in enumerate(convs)]


def chat_message(m: dict, where: str) -> dict:
    """One OpenAI chat message -> {"role", "content": str}: role system, developer (read as system,
    as vLLM), user or assistant; content a string or a list of text parts (joined); an assistant's
    may be None (a turn with only tool calls). Raises ValueError naming `where` and what is
    allowed."""
    role, content = m.get("role"), m.get("content")
    if role not in ROLES:
        raise ValueError(f"{where} must be {{'role': system|developer|user|assistant, 'content': "
                         f"string}}, got role {str(role)[:40]!r}")
    if content is None and role == "assistant":
        content = ""
    if isinstance(content, list):                # [{"type": "text", "text": ...}, ...]
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f"{where}.content[{j}] must be a text part "
                                 f"({{'type': 'text', 'text': string}}), got {str(part)[:60]}")
        content = "".join(part["text"] for part in content)
    if not isinstance(content, str):
        raise ValueError(f"{where}.content must be a string or a list of text parts, "
                         f"got {type(content).__name__}")
    check_unicode(content, f"{where}.content")
    return {"role": "system" if role == "developer" else role, "content": content}


def children(c: CheckedPrompt) -> list[CheckedPrompt]:
    """SamplingParams(n=k > 1): k requests of the prompt with n=1 and seeds seed, seed+1, ... (as
    vLLM; child_seed); n=1: the request itself."""
    if c.params.n == 1:
        return [c]
    return [replace(c, params=replace(c.params, n=1, seed=child_seed(c.params.seed, i)))
            for i in range(c.params.n)]


def child_seed(seed: int | None, i: int) -> int | None:
    """The seed of choice i of a request with n > 1 (seed, seed+1, ...), wrapped into int64 so that
    a valid seed near 2**63 - 1 stays valid for every choice (torch.Generator takes int64)."""
    if seed is None:
        return None
    low, high = SEED_RANGE
    return (seed + i - low) % (high - low + 1) + low
