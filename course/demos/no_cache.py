"""Generation WITHOUT a KV cache, for chapter 3: the engine's own model code, the whole sequence every step.

    res = generate_no_cache(llm.model, prompt_ids, max_tokens=32)
    res["token_ids"], res["step_s"]          # greedy tokens; seconds of each step (step i sees prompt + i tokens)

This lives in the course, outside the engine's hot path. Each step runs the model's ``forward`` on ALL the
tokens so far as if they were a fresh prompt (one prefill chunk, positions 0..n-1) and keeps only the last
row's logits. Nothing survives from one step to the next: the K/V tensors the attention layer writes are a
scratch buffer made for this step and dropped after it, so step ``t`` recomputes K and V (and everything
else) for all ``t`` earlier tokens. That is exactly the work the KV cache saves.

``attend_with_cache`` is the chapter's hand-built KV-cached attention of one layer (a few lines of torch).
``logprob_differences`` measures how far the two paths' log-probabilities are apart (rounding only).
"""
from __future__ import annotations

import time

import torch

from minimal_engine.model.attention import ForwardBatch, PrefillChunk


def full_sequence_batch(n: int, device, block_size: int = 16) -> ForwardBatch:
    """The layout of one step that feeds all ``n`` tokens as one prompt (no cached prefix)."""
    ar = torch.arange(n, device=device)
    return ForwardBatch(positions=ar, slot_mapping=ar, num_decodes=0, decode=None,
                        prefills=[PrefillChunk(0, n, n, None)],
                        logits_indices=torch.tensor([n - 1], device=device), block_size=block_size)


def scratch_kv(model, n: int) -> list:
    """Per layer (K, V) buffers for this step only: [kv_heads, n, head_dim], thrown away afterwards."""
    cfg, p = model.config, next(model.parameters())
    return [(torch.empty(cfg.num_kv_heads, n, cfg.head_dim, dtype=p.dtype, device=p.device),
             torch.empty(cfg.num_kv_heads, n, cfg.head_dim, dtype=p.dtype, device=p.device))
            for _ in range(cfg.num_layers)]


@torch.inference_mode()
def next_token_logits(model, token_ids: list[int]) -> torch.Tensor:
    """Logits [vocab] (float32) of the token after ``token_ids``, computed from scratch."""
    dev = next(model.parameters()).device
    n = len(token_ids)
    ids = torch.tensor(token_ids, dtype=torch.long, device=dev)
    return model(ids, full_sequence_batch(n, dev), scratch_kv(model, n))[0]


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def generate_no_cache(model, prompt_ids: list[int], max_tokens: int, on_step=None) -> dict:
    """Greedy generation of ``max_tokens`` tokens, recomputing the whole sequence at every step.

    Returns ``token_ids`` (the generated tokens), ``step_s`` (seconds of each step; step i processes
    ``len(prompt_ids) + i`` tokens) and ``tokens_processed`` (positions computed in all, for comparing with
    the cached engine's ``len(prompt_ids) + max_tokens - 1``). ``on_step(i, max_tokens)`` after each step.
    """
    if not prompt_ids or max_tokens < 1:
        raise ValueError("prompt_ids must be non-empty and max_tokens >= 1")
    dev = next(model.parameters()).device
    seq, out, times, processed = list(prompt_ids), [], [], 0
    for i in range(max_tokens):
        _sync(dev)
        t = time.perf_counter()
        token = int(next_token_logits(model, seq).argmax())
        _sync(dev)
        times.append(time.perf_counter() - t)
        processed += len(seq)
        out.append(token)
        seq.append(token)
        if on_step is not None:
            on_step(i + 1, max_tokens)
    return {"token_ids": out, "step_s": times, "tokens_processed": processed}


def logprob_differences(llm, prompt_ids: list[int], max_tokens: int) -> dict:
    """How far apart the cached and the uncached paths are, step by step, on the engine's greedy tokens.

    The engine generates with ``logprobs=2`` (raw log-probabilities of the chosen token and the runner-up);
    the no-cache path then recomputes each step from scratch on the same tokens (teacher-forced, so the two
    never drift apart). Returns ``token_ids``, ``diffs`` (|engine - no cache| log-probability of the chosen
    token per step) and ``gaps`` (the engine's top-1 minus top-2 log-probability per step).
    """
    from minimal_engine import SamplingParams
    params = SamplingParams(temperature=0, max_tokens=max_tokens, logprobs=2, ignore_eos=True)
    out = llm.generate([list(prompt_ids)], params, use_tqdm=False)[0]
    seq, diffs, gaps = list(prompt_ids), [], []
    for tid, entry in zip(out.token_ids, out.logprobs):
        mine = next_token_logits(llm.model, seq).float().log_softmax(-1)[tid].item()
        diffs.append(abs(entry[tid].logprob - mine))
        top = sorted((lp.logprob for lp in entry.values()), reverse=True)
        gaps.append(top[0] - top[1])
        seq.append(tid)
    return {"token_ids": out.token_ids, "diffs": diffs, "gaps": gaps}


def attend_with_cache(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, cache: dict) -> torch.Tensor:
    """One decode step of attention by hand: append this token's K and V to ``cache``, attend over all of it.

    q: [H, Dh] (after RoPE); k_new, v_new: [KVH, Dh]; cache: {"k": [KVH, L, Dh], "v": ...} (empty dict at
    first). Returns [H, Dh]. Query heads are grouped onto their KV head (GQA: H / KVH queries share one).
    """
    cache["k"] = torch.cat([cache["k"], k_new[:, None]], 1) if "k" in cache else k_new[:, None]
    cache["v"] = torch.cat([cache["v"], v_new[:, None]], 1) if "v" in cache else v_new[:, None]
    kvh, dh = k_new.shape
    g = q.shape[0] // kvh
    scores = q.view(kvh, g, dh) @ cache["k"].transpose(1, 2) / dh ** 0.5      # [KVH, G, L]
    return (scores.softmax(-1) @ cache["v"]).reshape(-1, dh)                   # [H, Dh]


__all__ = ["attend_with_cache", "full_sequence_batch", "generate_no_cache", "logprob_differences", "next_token_logits",
           "scratch_kv"]
