"""Quality of a setting: held-out cross-entropy per character, and top-1 agreement with a reference setting.

    from minimal_engine.tools.evaluate import evaluate_settings
    rows = evaluate_settings([dict(dtype="bfloat16"), dict(dtype="bfloat16", quantization="int8"),
                              dict(dtype="bfloat16", kv_cache_dtype="fp8")], max_chars=3000)

The measure is the training script's (train.py, `model_nats_per_char`): the held-out works are joined as
`EOS w1 EOS w2 ...` (`train.encode_stream`), cut into windows (each window starts with fresh context), and the
negative log-likelihood of every token of the works (not of the EOS separators) is summed and divided by the
number of characters: nats per character, lower is better. The text is `default_model/heldout_sample.json`:
excerpts of works the default model never saw in training (the split of train.py).

Here each window runs through the engine itself (`LLM.generate` with `prompt_logprobs`), so the int8 linear
layers and the quantized KV pool are on the path being measured. Prompts are prefilled in chunks of
`chunk` tokens (max_num_batched_tokens): every chunk after the first attends over K/V read back from the pool,
so the KV format is exercised (a prompt computed in one step would attend over its fresh, unquantized K/V).
Windows are `window` = 510 tokens + 1 (a prompt of 511 tokens: the model has 512 positions, and the engine
generates one token after the prompt).

Top-1 agreement: the share of scored positions where the setting's most likely next token equals the
reference setting's (the first setting in the list unless `reference` says otherwise).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HELDOUT = Path(__file__).resolve().parents[1] / "default_model" / "heldout_sample.json"


def heldout_texts(max_chars: int | None = None, path: Path = HELDOUT) -> list[str]:
    """The held-out excerpts, cut so that at most max_chars characters remain (whole excerpts first)."""
    texts = [w["text"] for w in json.loads(Path(path).read_text(encoding="utf-8"))["works"]]
    if max_chars is None:
        return texts
    out, left = [], max_chars
    for t in texts:
        if left <= 0:
            break
        out.append(t[:left])
        left -= len(out[-1])
    return out


def windows(ids: np.ndarray, mask: np.ndarray, window: int) -> list[tuple[list[int], np.ndarray]]:
    """train.model_nats_per_char's windows: starts every `window` tokens, each window + 1 token long
    (overlapping by one); the mask says which targets (tokens 1..) belong to works."""
    out = []
    for s in range(0, len(ids) - 1, window):
        w = ids[s:s + window + 1].astype(np.int64).tolist()
        out.append((w, mask[s + 1:s + window + 1]))
    return out


def score_windows(llm, wins) -> tuple[list[float], list[int]]:
    """Per scored target token: its log-probability and the model's top-1 token id (engine, prompt_logprobs=1)."""
    from minimal_engine.sampling_params import SamplingParams
    sp = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=1)
    outs = llm.generate([w for w, _ in wins], sp, use_tqdm=False)
    lps, top1 = [], []
    for (w, m), out in zip(wins, outs):
        for j, entry in enumerate(out.prompt_logprobs[1:], start=1):   # entry j scores w[j] given w[:j]
            if m[j - 1]:
                lps.append(entry[w[j]].logprob)
                top1.append(next(t for t, lp in entry.items() if lp.rank == 1))
    return lps, top1


def setting_name(kw: dict) -> str:
    parts = [kw.get("dtype") or "auto"]
    if kw.get("quantization"):
        parts.append(f"weights {kw['quantization']}")
    if kw.get("kv_cache_dtype", "auto") != "auto":
        parts.append(f"KV {kw['kv_cache_dtype']}")
    return " + ".join(parts)


def evaluate_settings(settings: list[dict], max_chars: int | None = 3000, window: int = 510, chunk: int = 64,
                      reference: int = 0, model=None, device: str = "cpu", texts: list[str] | None = None) -> list[dict]:
    """For each setting (LLM keyword arguments: dtype, quantization, kv_cache_dtype): held-out nats/char and
    top-1 agreement with settings[reference]. One LLM at a time (freed before the next)."""
    from minimal_engine.llm import LLM
    from minimal_engine.features.quantization import weight_bytes
    from minimal_engine.tools.train_data import encode_stream
    texts = heldout_texts(max_chars) if texts is None else texts
    n_chars = sum(map(len, texts))
    rows, tops = [], []
    for kw in settings:
        llm = LLM(model, device=device, max_num_batched_tokens=chunk, max_num_seqs=8, **kw)
        ids, mask = encode_stream(llm.tokenizer.hf.backend_tokenizer, texts)   # the `tokenizers` object
        lps, top1 = score_windows(llm, windows(ids, mask, window))
        rows.append(dict(setting=setting_name(kw), **kw, nats_per_char=-sum(lps) / n_chars, tokens=len(lps),
                         chars=n_chars, weight_bytes=weight_bytes(llm.model)["total"]))
        tops.append(np.array(top1))
        del llm
    for row, t in zip(rows, tops):
        row["top1_agreement"] = float((t == tops[reference]).mean())
        row["reference"] = rows[reference]["setting"]
    return rows

