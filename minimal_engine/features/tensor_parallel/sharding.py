"""Tensor-parallel sharding rules for the Llama-family decoder (llama.py): which rows and columns each rank keeps.

Megatron-LM's scheme, as vLLM applies it (its ColumnParallelLinear / RowParallelLinear):

    attention:  qkv_proj  split by OUTPUT columns (whole heads: rank r keeps its query heads and their KV heads)
                o_proj    split by INPUT rows (the heads it was given)   -> partial sums -> all-reduce
    MLP:        gate_up   split by OUTPUT columns (the same slice of gate and of up)
                down_proj split by INPUT rows                            -> partial sums -> all-reduce

So each layer costs exactly two all-reduces of [T, hidden] (T = tokens in the step), whatever N is.
Everything between the two splits (RoPE, per-head q/k norms, attention, SiLU * up) is local to a rank.

Heads: the KV heads are split into N contiguous, near-equal groups and each rank takes the query heads that
use its KV heads (GQA groups stay whole). An uneven split is allowed (the course's default model has 5 heads;
TP=2 gives 3 + 2): the rank with more heads is the slowest and sets the pace. vLLM asks for an even split.
When N exceeds the number of KV heads, each KV head is REPLICATED on N / KVH ranks, which then share its
query heads; this needs N to be a multiple of KVH and to divide the query heads. Anything else is refused.

Embedding and lm_head are REPLICATED, not split by vocabulary: rank 0 samples from the full logits with no
all-gather, and for the course's models (vocabulary 8k-150k) the copy is small next to the layers. vLLM
shards them by vocabulary (VocabParallelEmbedding) because for a 70B model the copy would cost GBs per rank.
Norm weights are replicated (they are tiny). A bias of o_proj is kept on rank 0 only (added once after the sum).
"""
from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn


def split_sizes(total: int, n: int) -> list[int]:
    """Near-equal contiguous parts: split_sizes(5, 2) -> [3, 2]."""
    return [total // n + (1 if r < total % n else 0) for r in range(n)]


def _start(sizes: list[int], rank: int) -> int:
    return sum(sizes[:rank])


def check_tp_size(num_heads: int, num_kv_heads: int, tp_size: int) -> None:
    """Raise a ValueError that says what is allowed when tp_size does not split the heads sensibly."""
    if not isinstance(tp_size, int) or isinstance(tp_size, bool) or tp_size < 1:
        raise ValueError(f"tensor_parallel_size must be an integer >= 1, got {tp_size!r}")
    if tp_size <= num_kv_heads:
        return
    if tp_size % num_kv_heads or num_heads % tp_size:
        raise ValueError(f"tensor_parallel_size={tp_size} does not split this model's heads: it has {num_heads} "
                         f"query heads and {num_kv_heads} KV heads; use at most {num_kv_heads} ranks, or a multiple "
                         f"of {num_kv_heads} that divides {num_heads} (KV heads are then replicated)")


def head_ranges(num_heads: int, num_kv_heads: int, tp_size: int, rank: int) -> tuple[range, range]:
    """(query heads, KV heads) that rank keeps."""
    check_tp_size(num_heads, num_kv_heads, tp_size)
    g = num_heads // num_kv_heads                                   # query heads per KV head (GQA group)
    if tp_size <= num_kv_heads:
        kv = split_sizes(num_kv_heads, tp_size)
        k0 = _start(kv, rank)
        return range(k0 * g, (k0 + kv[rank]) * g), range(k0, k0 + kv[rank])
    per_rank = num_heads // tp_size                                 # replicated KV: each rank one KV head
    q0 = rank * per_rank
    return range(q0, q0 + per_rank), range(q0 // g, q0 // g + 1)


def _rows(w: torch.Tensor, idx: torch.Tensor, dim: int = 0) -> nn.Parameter:
    return nn.Parameter(w.detach().index_select(dim, idx).contiguous(), requires_grad=False)


class ReduceAfter(nn.Module):
    """A row-parallel Linear: this rank's partial product, then the all-reduce that sums the ranks' parts."""

    def __init__(self, linear: nn.Linear, comm):
        super().__init__()
        self.linear, self.comm = linear, comm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.comm.all_reduce(self.linear(x))                 # [T, hidden], summed over ranks


def shard_model(model: nn.Module, rank: int, tp_size: int, comm) -> nn.Module:
    """Cut a full LlamaForCausalLM down to rank's shard, in place; `comm.all_reduce(t)` sums t over the ranks.
    model.config becomes the rank's view (its own query and KV head counts): the KV pool is sized from it."""
    cfg = model.config
    qh, kvh = head_ranges(cfg.num_heads, cfg.num_kv_heads, tp_size, rank)
    inter = split_sizes(cfg.intermediate_size, tp_size)
    i0, i1 = _start(inter, rank), _start(inter, rank) + inter[rank]
    dh, h, n_kv = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
    dev = model.embed_tokens.weight.device

    def cols(heads: range, offset: int) -> torch.Tensor:            # output rows of the heads in qkv's weight
        return torch.arange((offset + heads.start) * dh, (offset + heads.stop) * dh, device=dev)

    qkv_idx = torch.cat((cols(qh, 0), cols(kvh, h), cols(kvh, h + n_kv)))
    o_idx = cols(qh, 0)                                               # o_proj input columns = the same heads
    mlp_idx = torch.cat((torch.arange(i0, i1, device=dev), torch.arange(i0, i1, device=dev) + cfg.intermediate_size))
    for layer in model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        attn.qkv_proj.weight = _rows(attn.qkv_proj.weight, qkv_idx)     # [(Hr + 2 KVHr) * Dh, hidden]
        if attn.qkv_proj.bias is not None:
            attn.qkv_proj.bias = _rows(attn.qkv_proj.bias, qkv_idx)
        attn.o_proj.weight = _rows(attn.o_proj.weight, o_idx, dim=1)   # [hidden, Hr * Dh]
        if attn.o_proj.bias is not None and rank > 0:
            attn.o_proj.bias = None                                     # added once, by rank 0
        attn.h, attn.kvh = len(qh), len(kvh)
        attn.o_proj = ReduceAfter(attn.o_proj, comm)
        mlp.gate_up_proj.weight = _rows(mlp.gate_up_proj.weight, mlp_idx)   # [2 * Ir, hidden]
        mlp.down_proj.weight = _rows(mlp.down_proj.weight, mlp_idx[:i1 - i0], dim=1)  # [hidden, Ir]
        mlp.down_proj = ReduceAfter(mlp.down_proj, comm)
    model.config = replace(cfg, num_heads=len(qh), num_kv_heads=len(kvh), intermediate_size=i1 - i0)
    return model
