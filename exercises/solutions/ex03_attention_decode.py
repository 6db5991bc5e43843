"""Model solution of exercise 03 (chapter 3): one decode token's attention over its KV cache, with GQA."""
import torch


def attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
    h, d = q.shape
    kvh = k_cache.shape[1]
    # GQA：Query ヘッド h は KV ヘッド h // (H // KVH) を使うので、KV ヘッドを隣り合わせに複製します。
    k = k_cache.repeat_interleave(h // kvh, dim=1)          # [T, H, D]
    v = v_cache.repeat_interleave(h // kvh, dim=1)
    scores = torch.einsum("hd,thd->ht", q, k) / d ** 0.5     # [H, T]：1/√D でスケール
    weights = scores.float().softmax(dim=-1).to(q.dtype)     # T 個の位置の方向に softmax
    return torch.einsum("ht,thd->hd", weights, v)            # [H, D]
