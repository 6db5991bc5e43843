"""Each token's raw bytes and its name in logprobs, also for tokens inside a UTF-8 character.

A byte-level BPE tokenizer often splits one Japanese character (3 bytes) over two tokens: neither
decodes to text on its own (``tokenizer.decode([id])`` gives U+FFFD). So the logprob fields are
built here, not from that:

- ``bytes`` (chat): the token's own bytes, read back from the vocabulary (OpenAI's meaning;
  joined over the tokens they give the answer's UTF-8 bytes);
- the token's name (completions ``tokens`` and ``top_logprobs`` keys, chat ``token``): its text
  when the bytes are whole characters, else ``"bytes:\\xe3\\x81"`` as OpenAI writes such tokens,
  so two partial tokens never share a key; ``"token_id:N"`` when the client asked
  ``return_tokens_as_token_ids`` (vLLM's option);
- ``text_offset`` (completions): where the token's text starts in the answer, in characters of
  the text the server sends: a token inside a character is at that character's offset.
"""
from __future__ import annotations

import codecs
import re

_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")      # sentencepiece's byte tokens


def _byte_level_table() -> dict[str, int]:
    """GPT-2's printable character for each byte (ByteLevel pre-tokenizer), reversed."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), 256)))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class TokenText:
    """Raw bytes and logprob names of token ids for one tokenizer (model/tokenizer.py)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        hf = tokenizer.hf
        self.special = set(getattr(hf, "all_special_ids", None) or [])
        self.added = set(getattr(hf, "added_tokens_decoder", None) or {})
        self._table = _byte_level_table()
        self._cache: dict[int, bytes] = {}

    def bytes_of(self, token_id: int) -> bytes:
        """The token's own bytes: a special or added token's text, else its vocabulary entry."""
        got = self._cache.get(token_id)
        if got is None:
            got = self._cache[token_id] = self._bytes(token_id)
        return got

    def _bytes(self, token_id: int) -> bytes:
        tok = self.tokenizer
        if token_id not in self.added:
            vid = token_id % tok.id_modulo if tok.id_modulo else token_id
            piece = tok.hf.convert_ids_to_tokens(vid)
            if isinstance(piece, str) and piece and all(c in self._table for c in piece):
                return bytes(self._table[c] for c in piece)
            if isinstance(piece, str) and _BYTE_FALLBACK.fullmatch(piece):
                return bytes([int(piece[3:5], 16)])
        return tok.decode([token_id], skip_special_tokens=False).encode("utf-8")

    def name(self, token_id: int, as_id: bool = False) -> str:
        """The token as logprobs name it: its text, "bytes:\\xNN..." for part of a character, or
        "token_id:N"."""
        if as_id:
            return f"token_id:{token_id}"
        raw = self.bytes_of(token_id)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


class Offsets:
    """text_offset for one choice: feed its tokens in order; each gets the character offset
    where its text starts. Characters are counted as the server sends them (a character split
    over tokens counts once, when complete); special tokens add nothing when they are skipped."""

    def __init__(self, text: TokenText, start: int = 0, skip_special: bool = True):
        self.text, self.offset = text, start
        self.skip = text.special if skip_special else set()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def next(self, token_id: int) -> int:
        at = self.offset
        if token_id not in self.skip:
            self.offset += len(self._decoder.decode(self.text.bytes_of(token_id)))
        return at
