"""Issue 30's compiled decode step, tried two ways against the engine's eager step; neither is kept.

    MINIMAL_ENGINE_CPU_KERNELS=plain PYTHONPATH=. python benchmarks/compile_decode.py --model default
    TORCHINDUCTOR_FREEZING=1 PYTHONPATH=. python benchmarks/compile_decode.py --model default --split

* whole model (default): `torch.compile` of the model on the static-buffer decode path (`cuda_graphs=True` on the
  CPU runs the same padded buffers without capturing), against the same path eager. With the engine's pre-packed
  oneDNN linears inductor (torch 2.13) fails to lower `mkldnn._linear_pointwise` on the opaque packed weight, so
  this mode is meant for the plain kernels.
* `--split`: the engine's own decode path (gathered/lone attention, eager) with the dense parts of each layer
  compiled (RMSNorm + qkv + RoPE; o_proj + residual + RMSNorm + MLP + residual; final norm + lm_head). The compiled
  engine loads with the plain kernels, so inductor sees ordinary nn.Linear weights; with `TORCHINDUCTOR_FREEZING=1`
  it treats them as constants and packs them itself. The eager engine keeps its fast kernels.
It prints the compile time per batch size and the step times, eager and compiled, for three alternating rounds.
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from minimal_engine import LLM
from minimal_engine.bench.offline import decode_step_time
from minimal_engine.model.attention import paged_attention
from minimal_engine.model.llama import rotate_half


def compile_layer_parts(layer) -> None:
    """Replace one DecoderLayer's forward by two compiled dense parts around the eager paged attention."""
    attn = layer.self_attn

    def pre(x, cos, sin):                                   # x [T, hidden] -> q [T, H, Dh], k, v [T, KVH, Dh]
        t = x.shape[0]
        qkv = attn.qkv_proj(layer.input_layernorm(x)).view(t, attn.h + 2 * attn.kvh, attn.dh)
        qk, v = qkv[:, :attn.h + attn.kvh], qkv[:, attn.h + attn.kvh:]
        qk = qk * cos + rotate_half(qk) * sin
        return qk[:, :attn.h], qk[:, attn.h:], v

    def post(x, o):                                         # x [T, hidden], o [T, H, Dh] -> [T, hidden]
        x = x + attn.o_proj(o.reshape(x.shape[0], attn.h * attn.dh))
        return x + layer.mlp(layer.post_attention_layernorm(x))

    pre_c, post_c = torch.compile(pre, dynamic=False), torch.compile(post, dynamic=False)

    def forward(x, cos, sin, kv_cache, batch):
        q, k, v = pre_c(x, cos, sin)
        return post_c(x, paged_attention(q, k, v, kv_cache[0], kv_cache[1], batch, attn.scale))
    layer.forward = forward


def compile_split(model) -> None:
    torch._dynamo.config.cache_size_limit = 256             # one entry per layer and batch size
    torch._dynamo.config.accumulated_cache_size_limit = 1024
    for layer in model.layers:
        compile_layer_parts(layer)
    head = torch.compile(lambda x: model.lm_head(model.norm(x)).float(), dynamic=False)

    def forward(input_ids, batch, kv_caches):
        x = model.embed_tokens(input_ids)
        cos, sin = model.rope(batch.positions, x.dtype)
        for layer, kv in zip(model.layers, kv_caches):
            x = layer(x, cos, sin, kv, batch)
        return head(x[batch.logits_indices])
    model.forward = forward


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="default", help="'default' or any LLM model (synthetic:NAME, a folder)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--split", action="store_true", help="compile the dense parts on the engine's own decode path")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    model = None if a.model == "default" else a.model
    kw = dict(max_num_seqs=32, kv_cache_memory=256 << 20, dtype=a.dtype, cuda_graphs=not a.split)
    eager = LLM(model, **kw)
    if a.split:
        os.environ["MINIMAL_ENGINE_CPU_KERNELS"] = "plain"
        compiled = LLM(model, **kw)
        compile_split(compiled.model)
    else:
        compiled = LLM(model, **kw)
        graphs = compiled.engine.runner.graphs
        graphs.model = torch.compile(graphs.model, dynamic=False)
    for b in (1, 32):
        t = time.perf_counter()
        decode_step_time(compiled, b, 64, num_steps=2)
        print(f"compile and warm-up, batch {b}: {time.perf_counter() - t:.1f} s", flush=True)
    for r in range(3):
        for b in (1, 32):
            e = decode_step_time(eager, b, 64, num_steps=15)["median_step_ms"]
            c = decode_step_time(compiled, b, 64, num_steps=15)["median_step_ms"]
            print(f"round {r} batch {b}: eager {e:.2f} ms, compiled {c:.2f} ms ({c / e:.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
