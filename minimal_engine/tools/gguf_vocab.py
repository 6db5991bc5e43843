"""The vocabulary written into a GGUF file: the model's real byte-level BPE tokenizer, or a placeholder.

A model whose tokenizer is of the GPT-2 kind (byte-level BPE, GPT-2's split regex: the course's default and
draft models) is written as llama.cpp's converter writes such a tokenizer: `tokenizer.ggml.model = "gpt2"`, the
tokens in id order, their types (special tokens CONTROL), the merges as "a b", and the pre-tokenizer name
`tokenizer.ggml.pre = "gpt-2"` (the same split regex; llama.cpp's converter does not recognise this tokenizer by its
hash, so the name is set here). llama-server then takes text and gives the engine's token ids.

Synthetic models (random weights, no tokenizer) get a placeholder of the model's size instead (<unk>, <s>, </s>,
256 byte tokens, then tok_N): the benchmarks feed token ids, and llama.cpp needs a vocabulary of the right size.

`tokenizer_from_gguf(meta)` rebuilds a tokenizer from a file's keys with the `tokenizers` library, so a test can
check that the exported vocabulary tokenizes as the model's own tokenizer does.
"""
from __future__ import annotations

import json

GPT2_PRE = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}


def placeholder_vocab(n: int) -> tuple[list[str], list[int]]:
    import gguf
    t = gguf.TokenType
    if n < 259:
        return [f"tok_{i}" for i in range(n)], [t.NORMAL] * n
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [f"tok_{i}" for i in range(259, n)]
    return tokens, [t.UNKNOWN, t.CONTROL, t.CONTROL] + [t.BYTE] * 256 + [t.NORMAL] * (n - 259)


def bpe_vocab(hf_tokenizer, vocab_size: int) -> dict | None:
    """{"tokens", "types", "merges", "eos_id"} of a GPT-2-style tokenizer as transformers loaded it (its backend's
    pre-tokenizer, not only tokenizer.json's: transformers gives a qwen2 model Qwen2's digit-splitting regex), or
    None when the model has none (synthetic) or another kind (then the placeholder is written)."""
    import gguf
    backend = getattr(hf_tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    spec = json.loads(backend.to_str())
    pre = spec.get("pre_tokenizer") or {}
    if spec["model"].get("type") != "BPE" or any(pre.get(k) != v for k, v in GPT2_PRE.items()):
        return None
    ids = dict(spec["model"]["vocab"])
    special = {}
    for a in spec.get("added_tokens", []):
        ids[a["content"]] = a["id"]
        if a.get("special"):
            special[a["id"]] = a["content"]
    if max(ids.values()) >= vocab_size:
        raise ValueError(f"tokenizer.json has ids up to {max(ids.values())}, the model only {vocab_size} rows")
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]             # rows no token uses (as llama.cpp pads)
    types = [gguf.TokenType.UNUSED] * vocab_size
    for text, i in ids.items():
        tokens[i] = text
        types[i] = gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"].get("merges", [])]
    eos = next(iter(special), None)
    return {"tokens": tokens, "types": types, "merges": merges, "eos_id": eos}


def write_vocab(writer, hf_tokenizer, vocab_size: int) -> str:
    """Write the tokenizer keys (hf_tokenizer None: the placeholder); returns "gpt2" or "placeholder"."""
    real = bpe_vocab(hf_tokenizer, vocab_size) if hf_tokenizer is not None else None
    if real is None:
        tokens, types = placeholder_vocab(vocab_size)
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores([0.0] * len(tokens))
        writer.add_token_types(types)
        if vocab_size >= 259:
            writer.add_bos_token_id(1)
            writer.add_eos_token_id(2)
        return "placeholder"
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(real["tokens"])
    writer.add_token_types(real["types"])
    writer.add_token_merges(real["merges"])
    if real["eos_id"] is not None:              # GPT-2's convention: <|endoftext|> ends (and would begin) a text
        writer.add_eos_token_id(real["eos_id"])
        writer.add_bos_token_id(real["eos_id"])
    writer.add_add_bos_token(False)             # the tokenizer adds nothing in front of a prompt
    return "gpt2"


def tokenizer_from_gguf(meta: dict):
    """A `tokenizers.Tokenizer` built from a GGUF file's tokenizer keys (model "gpt2", pre "gpt-2")."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    if meta.get("tokenizer.ggml.model") != "gpt2" or meta.get("tokenizer.ggml.pre") != "gpt-2":
        raise ValueError("not a GPT-2-style vocabulary: tokenizer.ggml.model="
                         f"{meta.get('tokenizer.ggml.model')!r}, pre={meta.get('tokenizer.ggml.pre')!r}")
    vocab = {t: i for i, t in enumerate(meta["tokenizer.ggml.tokens"]) if not t.startswith("[PAD")}
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok
