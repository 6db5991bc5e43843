"""Tokenizer wrapper and incremental detokenization.

Byte-level BPE often splits one Japanese character (3 bytes in UTF-8) over two or three tokens. Decoding
token by token would then print broken characters (U+FFFD). IncrementalDetokenizer decodes a short window
of recent tokens and only emits text once it ends in whole characters, as vLLM does. When a request ends
in the middle of a character (max_tokens cut it), finish() drops the partial bytes, as vLLM does.
"""
from __future__ import annotations

from pathlib import Path

REPLACEMENT = "\ufffd"


class Tokenizer:
    def __init__(self, path: str | Path, wrap_ids: bool = False):
        """wrap_ids: ids past the vocabulary wrap around (id % its size) when decoded (synthetic
        models, whose vocabulary is larger than this tokenizer's)."""
        from transformers import AutoTokenizer
        try:
            self.hf = AutoTokenizer.from_pretrained(str(path))
        except Exception as e:
            raise ValueError(f"cannot load a tokenizer from {path} ({type(e).__name__}: {e}); the model "
                             "folder needs tokenizer.json / tokenizer_config.json") from None
        self.id_modulo = len(self.hf) if wrap_ids else None

    @property
    def eos_token_id(self) -> int | None:
        return self.hf.eos_token_id

    def __len__(self) -> int:
        return len(self.hf)

    @property
    def max_token_chars(self) -> int:
        """Characters in the longest vocabulary entry: a text longer than n x this cannot fit in n tokens.
        (Byte-level entries spell one character per byte, so this over-counts: a safe upper bound.)"""
        if getattr(self, "_max_token_chars", None) is None:
            self._max_token_chars = max(map(len, self.hf.get_vocab()), default=1)
        return self._max_token_chars

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        if self.id_modulo:
            ids = [i % self.id_modulo for i in ids]
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.hf, "chat_template", None))

    def apply_chat_template(self, messages: list[dict]) -> list[int]:
        if not self.has_chat_template:
            raise ValueError("this model's tokenizer has no chat template; use generate() with plain prompts")
        out = self.hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(out, dict) or hasattr(out, "input_ids"):
            out = out["input_ids"]
        return list(out)


class IncrementalDetokenizer:
    """Feed output tokens one by one; get back only the new, complete text."""

    def __init__(self, tokenizer: Tokenizer, prompt_ids: list[int], skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        self.ids = list(prompt_ids[-5:])    # a little prompt context: some tokenizers decode spaces by context
        self.prefix_offset = 0              # window start
        self.read_offset = len(self.ids)    # ids before this are already emitted as text
        self.text = ""

    def add(self, token_id: int) -> str:
        self.ids.append(token_id)
        prefix = self.tokenizer.decode(self.ids[self.prefix_offset:self.read_offset], self.skip)
        full = self.tokenizer.decode(self.ids[self.prefix_offset:], self.skip)
        if len(full) > len(prefix) and not full.endswith(REPLACEMENT):
            delta = full[len(prefix):]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            self.text += delta
            return delta
        return ""

    def flush(self) -> str:
        """At the end: emit whatever is left, even an incomplete character."""
        prefix = self.tokenizer.decode(self.ids[self.prefix_offset:self.read_offset], self.skip)
        full = self.tokenizer.decode(self.ids[self.prefix_offset:], self.skip)
        delta = full[len(prefix):] if full.startswith(prefix) else ""
        self.read_offset = len(self.ids)
        self.prefix_offset = self.read_offset
        self.text += delta
        return delta

    def finish(self) -> str:
        """At the end of a request: emit what is left, without a trailing incomplete character (vLLM drops
        those bytes rather than print U+FFFD)."""
        prefix = self.tokenizer.decode(self.ids[self.prefix_offset:self.read_offset], self.skip)
        full = self.tokenizer.decode(self.ids[self.prefix_offset:], self.skip)
        delta = full[len(prefix):].rstrip(REPLACEMENT) if full.startswith(prefix) else ""
        self.prefix_offset = self.read_offset = len(self.ids)
        self.text += delta
        return delta
