"""Every check a request passes before it is queued: the prompt (text or token ids) and its SamplingParams against
the engine's fixed limits (vocabulary, max_model_len, the KV pool). One place, used by LLM, the server and the
disaggregated pair through LLMEngine.check; a CheckedPrompt is queued without being checked again."""
from __future__ import annotations

from dataclasses import dataclass

from minimal_engine.config import EngineConfig
from minimal_engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class CheckedPrompt:
    """A prompt tokenized and checked against one engine's limits (LLMEngine.check)."""

    text: str | None             # the prompt's text (None when it was given as token ids)
    token_ids: list[int]
    params: SamplingParams
    grammar: object = None       # structured outputs: the compiled constraint (each request gets a copy)


def check_unicode(text: str, what: str) -> None:
    """A lone surrogate (e.g. JSON "\\ud800") cannot be encoded: say so instead of the tokenizer's message."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} contains a lone surrogate (U+{ord(text[e.start]):04X}) at character {e.start}: "
                         "the text must be valid Unicode") from None


def tokenize_prompt(prompt, tokenizer) -> tuple[str | None, list[int]]:
    """A string is tokenized; a list of token ids is taken as it is (checked by check_request). vLLM's prompt
    dicts are read too: {"prompt_token_ids": [...]} (TokensPrompt) and {"prompt": "..."} (TextPrompt)."""
    if isinstance(prompt, dict):
        keys = set(prompt)
        if keys == {"prompt_token_ids"}:
            prompt = prompt["prompt_token_ids"]
            if not isinstance(prompt, (list, tuple)):
                raise TypeError("prompt_token_ids must be a list of token ids")
        elif keys == {"prompt"} and isinstance(prompt["prompt"], str):
            prompt = prompt["prompt"]
        else:
            raise TypeError(f"a prompt dict must be {{'prompt_token_ids': [ids]}} or {{'prompt': text}}, got keys "
                            f"{sorted(map(str, keys))[:5]}")
    if isinstance(prompt, str):
        if not prompt:
            raise ValueError("prompt is empty: give at least one character or one token id")
        check_unicode(prompt, "prompt")
        return prompt, tokenizer.encode(prompt)
    if isinstance(prompt, (list, tuple)):
        return None, list(prompt)
    raise TypeError(f"a prompt must be a string, a list of token ids or {{'prompt_token_ids': [ids]}}, got "
                    f"{type(prompt).__name__}")


def check_request(token_ids: list[int], params: SamplingParams, vocab: int, config: EngineConfig,
                  num_blocks: int) -> None:
    """Raise ValueError/TypeError naming what is wrong and what is allowed."""
    if not isinstance(params, SamplingParams):
        raise TypeError(f"sampling params must be a SamplingParams, got {type(params).__name__}")
    if not token_ids:
        raise ValueError("prompt is empty: it has no tokens")
    bad = [t for t in token_ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab]
    if bad:
        raise ValueError(f"token ids must be integers in [0, {vocab - 1}] (the vocabulary), got {bad[:5]}")
    stops = [t for t in params.stop_token_ids if not 0 <= t < vocab]
    if stops:
        raise ValueError(f"stop_token_ids must be in [0, {vocab - 1}] (the vocabulary), got {stops[:5]}")
    biased = [t for t in (params.logit_bias or {}) if t >= vocab]
    if biased:
        raise ValueError(f"logit_bias token ids must be in [0, {vocab - 1}] (the vocabulary), got {biased[:5]}")
    if params.prompt_logprobs is not None and config.enable_prefix_caching:
        raise ValueError("prompt_logprobs needs every prompt token computed: not with enable_prefix_caching")
    max_len = config.max_model_len
    if len(token_ids) >= max_len:
        raise ValueError(f"prompt has {len(token_ids)} tokens; max_model_len is {max_len}, "
                         f"so a prompt may have at most {max_len - 1} tokens")
    # the last sampled token is returned, never fed back, so it never takes a KV slot: hence the - 1
    need = min(len(token_ids) + params.max_tokens, max_len) - 1
    bs = config.block_size
    if -(-need // bs) > num_blocks:
        raise ValueError(f"the KV pool holds {num_blocks * bs} tokens ({num_blocks} blocks of {bs}) but this "
                         f"request needs up to {need} (prompt + max_tokens - 1); raise num_kv_blocks or lower "
                         "max_tokens")
