"""The Llama-family decoder, written from scratch in plain PyTorch (Llama, Qwen2, Qwen3).

    tokens -> embed -> N x [RMSNorm -> attention (+RoPE, paged KV) -> +residual
                           RMSNorm -> SwiGLU MLP -> +residual] -> RMSNorm -> lm_head -> logits

Differences between the variants are small switches read from config.json: Qwen2 adds a bias
to the q/k/v projections, Qwen3 normalises each head of q and k with its own RMSNorm. Grouped-query
attention (GQA) keeps fewer K/V heads than query heads, which shrinks the KV cache. As in vLLM,
q/k/v are one matmul (qkv_proj) and gate/up are one matmul (gate_up_proj): fewer, larger matmuls
run faster. On the CPU the runner may swap these nn.Linear for kernels it probed there
(model/cpu_linears.py). Shapes: T = tokens in the step (all requests), H = query heads, KVH = KV
heads, Dh = head dim.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from minimal_engine.config import ModelConfig
from minimal_engine.model.attention import ForwardBatch, paged_attention
from minimal_engine.model.rope_scaling import scaled_inv_freq


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x / sqrt(mean(x^2) + eps) * weight, in one fused kernel (it accumulates in float32)
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """Rotation speed of each pair of dimensions; a checkpoint's rope_scaling (Llama 3.x's
    "llama3", "linear") changes some of them (rope_scaling.py)."""
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    return inv_freq if cfg.rope_scaling is None else scaled_inv_freq(inv_freq, cfg.rope_scaling)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension (HF's convention)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.h, self.kvh, self.dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.qkv_proj = nn.Linear(cfg.hidden_size, (self.h + 2 * self.kvh) * self.dh,
                                  bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.h * self.dh, cfg.hidden_size,
                                bias=cfg.attention_bias and cfg.variant != "qwen2")
        if cfg.qk_norm:
            self.q_norm = RMSNorm(self.dh, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.dh, cfg.rms_norm_eps)
        self.qk_norm = cfg.qk_norm
        self.scale = self.dh ** -0.5

    def forward(self, x, cos, sin, kv_cache, batch: ForwardBatch):
        t = x.shape[0]
        qkv = self.qkv_proj(x).view(t, self.h + 2 * self.kvh, self.dh)  # H q, KVH k, KVH v heads
        qk, v = qkv[:, :self.h + self.kvh], qkv[:, self.h + self.kvh:]
        if self.qk_norm:
            qk = torch.cat((self.q_norm(qk[:, :self.h]), self.k_norm(qk[:, self.h:])), dim=1)
        qk = qk * cos + rotate_half(qk) * sin       # RoPE on q and k at once; cos/sin [T, 1, Dh]
        q, k = qk[:, :self.h], qk[:, self.h:]
        o = paged_attention(q, k, v, kv_cache[0], kv_cache[1], batch, self.scale)  # [T, H, Dh]
        return self.o_proj(o.reshape(t, self.h * self.dh))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, kv_cache, batch):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, kv_cache, batch)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.inv_freq = rope_inv_freq(cfg)   # plain tensor (meta in a meta build): see rope()

    def rope(self, positions: torch.Tensor, dtype: torch.dtype):
        if self.inv_freq.device != positions.device:
            self.inv_freq = rope_inv_freq(self.config).to(positions.device)
        freqs = positions.float()[:, None] * self.inv_freq[None, :]   # [T, Dh/2], in float32
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]             # [T, 1, Dh]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, input_ids: torch.Tensor, batch: ForwardBatch,
                kv_caches: list) -> torch.Tensor:
        """input_ids: [T] -> logits [S, vocab] for the rows in batch.logits_indices (float32)."""
        x = self.embed_tokens(input_ids)                                # [T, hidden]
        cos, sin = self.rope(batch.positions, x.dtype)
        for layer, kv_cache in zip(self.layers, kv_caches):
            x = layer(x, cos, sin, kv_cache, batch)
        x = self.norm(x[batch.logits_indices])                          # only rows that sample
        return self.lm_head(x).float()
