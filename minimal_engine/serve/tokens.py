"""vLLM's POST /tokenize and /detokenize and GET /tokenizer_info: the server's tokenizer, for clients that count
or inspect tokens, or build the same tokenizer."""
from __future__ import annotations

from minimal_engine.serve.errors import RequestError, check_text, flag
from minimal_engine.serve.messages import chat_prompt, parse_messages

MAX_TOKENS_IN = 1 << 16        # ids accepted by /detokenize


def tokenize_request(body, tokenizer, engine, max_len: int, max_chars: int) -> dict:
    """vLLM's POST /tokenize: {"prompt": str, "add_special_tokens": bool} or {"messages": [...]}
    -> {"count", "max_model_len", "tokens", "token_strs"} (token_strs with "return_token_strs": true)."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if body.get("messages") is not None:
        ids = chat_prompt(tokenizer, parse_messages(body["messages"], max_chars))   # the prompt's cap, before templating
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise RequestError("'prompt' must be a string (or send 'messages')", "prompt")
        if len(prompt) > max_chars:
            raise RequestError(f"the prompt has {len(prompt)} characters; at most {max_chars}", "prompt")
        check_text(prompt, "prompt")
        ids = tokenizer.hf.encode(prompt, add_special_tokens=flag(body, "add_special_tokens", True)) if prompt else []
    strs = [tokenizer.hf.convert_ids_to_tokens(i) for i in ids] if flag(body, "return_token_strs") else None
    return {"count": len(ids), "max_model_len": max_len, "tokens": ids, "token_strs": strs}


def detokenize_request(body, tokenizer, vocab_size: int) -> dict:
    """vLLM's POST /detokenize: {"tokens": [ids]} -> {"prompt": text}."""
    ids = body.get("tokens") if isinstance(body, dict) else None
    if isinstance(ids, list) and len(ids) > MAX_TOKENS_IN:
        raise RequestError(f"'tokens' has {len(ids)} ids; at most {MAX_TOKENS_IN} are allowed",
                           "tokens")
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size
                                            for t in ids):
        raise RequestError(f"'tokens' must be a list of token ids in [0, {vocab_size - 1}]", "tokens")
    return {"prompt": tokenizer.decode(ids, skip_special_tokens=False)}


def tokenizer_info(tokenizer) -> dict:
    """GET /tokenizer_info (vLLM's route): the tokenizer's configuration as in tokenizer_config.json, with its
    class name, so a client (lm-evaluation-harness) can build the same tokenizer instead of downloading one."""
    hf = tokenizer.hf
    config = {k: v for k, v in (getattr(hf, "init_kwargs", None) or {}).items() if k not in ("name_or_path", "tokenizer_file")}

    def plain(v):                        # AddedToken and other objects -> JSON values
        if isinstance(v, (str, int, float, bool)) or v is None:
            return v
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return getattr(v, "content", None) or str(v)
    config = {k: plain(v) for k, v in config.items()}
    config["tokenizer_class"] = type(hf).__name__
    if getattr(hf, "chat_template", None):
        config["chat_template"] = hf.chat_template
    return config
