"""The training script's data side: the corpus and its split, the tokenizer, and the bigram baseline.

Used by ``python -m minimal_engine.tools.train`` (train.py's docstring describes each step) and by
``tools.evaluate`` (the held-out stream, ``encode_stream``). numpy and ``tokenizers`` only, no torch.
"""
import gzip
import json
import random

import numpy as np

EOS = "<|endoftext|>"
START = 0x110000  # beyond Unicode: context symbol before each work's first character


def load_works(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def split_works(works, seed=0, val_frac=0.025):
    """Deterministic split of whole works: returns (train_texts, val_texts)."""
    idx = list(range(len(works)))
    random.Random(seed).shuffle(idx)
    n_val = max(1, round(len(works) * val_frac))
    val = set(idx[:n_val])
    return [w for i, w in enumerate(works) if i not in val], [works[i] for i in sorted(val)]


# ---------------------------------------------------------------- tokenizer
def train_tokenizer(texts, vocab_size=8192):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def wrap_tokenizer(tok):
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS,
                                   clean_up_tokenization_spaces=False, model_max_length=512)


def encode_stream(tok, texts):
    """EOS w1 EOS w2 ... as uint16, plus a mask of positions that belong to works (not EOS)."""
    eos = tok.token_to_id(EOS)
    ids, mask = [], []
    for enc in tok.encode_batch(texts):
        ids += [eos] + enc.ids
        mask += [False] + [True] * len(enc.ids)
    return np.array(ids, dtype=np.uint16), np.array(mask, dtype=bool)


# ---------------------------------------------------------------- character bigram baseline
def _codes(text):
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)


def fit_bigram(train_texts):
    prev, cur = [], []
    for t in train_texts:
        c = _codes(t)
        prev.append(np.concatenate([[START], c[:-1]]))
        cur.append(c)
    prev, cur = np.concatenate(prev), np.concatenate(cur)
    vocab = np.unique(cur)
    pairs, pair_n = np.unique(prev * (1 << 21) + cur, return_counts=True)
    ctx, ctx_n = np.unique(prev, return_counts=True)
    return dict(vocab=vocab, V=len(vocab) + 1, pairs=pairs, pair_n=pair_n, ctx=ctx, ctx_n=ctx_n)


def _lookup(keys, table, counts):
    i = np.clip(np.searchsorted(table, keys), 0, len(table) - 1)
    return np.where(table[i] == keys, counts[i], 0)


def bigram_nats_per_char(bg, texts):
    """Held-out cross-entropy (nats/char) of the add-one bigram; unseen characters map to UNK."""
    UNK = -1
    total, n = 0.0, 0
    for t in texts:
        c = _codes(t)
        c = np.where(_lookup(c, bg["vocab"], np.ones_like(bg["vocab"])) > 0, c, UNK)
        p = np.concatenate([[START], c[:-1]])
        n_pc = np.where((p == UNK) | (c == UNK), 0, _lookup(p * (1 << 21) + c, bg["pairs"], bg["pair_n"]))
        n_p = np.where(p == UNK, 0, _lookup(p, bg["ctx"], bg["ctx_n"]))
        total -= np.log((n_pc + 1) / (n_p + bg["V"])).sum()
        n += len(c)
    return total / n
