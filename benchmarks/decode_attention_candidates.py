"""CPU decode attention without padding: candidate layouts timed against the padded gather, in one process.

    PYTHONPATH=. python benchmarks/decode_attention_candidates.py --threads 2 --rounds 5

For one layer's KV pool (the engine's head-major layout, attention.py) and a batch of decode requests with the
given context lengths, each candidate computes every request's attention over its own context; all must agree
with a per-request reference. Candidates:
  padded    every request's context gathered and padded to the longest, masked (the engine before 2026-12-05)
  grouped   requests sorted by length and cut into groups whose padded size stays within 1.25x of their
            contexts' sum; one padded call per group
  blocks    each request's own blocks only (no padding past its last block): scores per block, then one
            softmax per request across its blocks (split-K, as paged-attention kernels do it)
  loop      one SDPA call per request over exactly its context
Prints median microseconds per layer call (preparing the index tensors, once per step, timed apart) and the
median of per-round ratios to `padded` (below 1: faster), with min-max.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
import torch.nn.functional as F

WORKLOADS = {   # name: context lengths of the decode requests in one step
    "4 short + 1 long": [24, 30, 36, 40, 448],
    "mixed 32": [int(x) for x in torch.linspace(40, 600, 32)],
    "equal 32": [300] * 32,
    "batch 1 (200)": [200],
}
SHAPES = {"default (fp32)": (5, 5, 64, torch.float32), "llama-125m (bf16)": (12, 4, 64, torch.bfloat16)}


def setup(lens, heads, kv_heads, dh, dtype, bs=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    tables, nxt = [], 0
    for n in lens:
        nb = -(-n // bs)
        tables.append(list(range(nxt, nxt + nb)))
        nxt += nb
    perm = torch.randperm(nxt, generator=g).tolist()          # blocks scattered through the pool
    tables = [[perm[b] for b in t] for t in tables]
    pool_blocks = nxt + 1
    k = torch.randn(kv_heads, pool_blocks * bs, dh, generator=g).to(dtype)
    v = torch.randn(kv_heads, pool_blocks * bs, dh, generator=g).to(dtype)
    q = torch.randn(len(lens), heads, dh, generator=g).to(dtype)
    return q, k, v, tables, pool_blocks


def rows_of(tables, kv_heads, pool_blocks):
    heads = torch.arange(kv_heads)[None, :, None] * pool_blocks
    return (heads + torch.tensor(tables)[:, None, :]).flatten()


def gather(cache, rows, bs):
    dh = cache.shape[-1]
    return cache.view(-1, bs * dh).index_select(0, rows).view(-1, dh)


# ---------------------------------------------------------------- padded (the old engine path)
def prep_padded(lens, tables, kv_heads, pool_blocks, bs):
    w = max(len(t) for t in tables)
    rows = rows_of([t + [0] * (w - len(t)) for t in tables], kv_heads, pool_blocks)
    pad = (torch.arange(w * bs) >= torch.tensor(lens)[:, None]).view(len(lens), 1, 1, -1)
    return rows, pad


def attn_padded(q, k, v, prep, bs, scale):
    rows, pad = prep
    d, h, dh = q.shape
    kvh = k.shape[0]
    g = h // kvh
    kd = gather(k, rows, bs).view(d * kvh, -1, dh)
    vd = gather(v, rows, bs).view(d * kvh, -1, dh)
    s = torch.bmm(q.reshape(d * kvh, g, dh), kd.transpose(1, 2)).float() * scale
    s = s.view(d, kvh, g, -1).masked_fill_(pad, float("-inf"))
    o = torch.bmm(s.softmax(-1).to(q.dtype).view(d * kvh, g, -1), vd)
    return o.view(d, h, dh)


# ---------------------------------------------------------------- grouped
def groups_of(lens, slack=1.25):
    order = sorted(range(len(lens)), key=lambda i: -lens[i])
    out, cur = [], []
    for i in order:
        if cur and (len(cur) + 1) * lens[cur[0]] > slack * (sum(lens[j] for j in cur) + lens[i]):
            out.append(cur)
            cur = []
        cur.append(i)
    return out + [cur] if cur else out


def prep_grouped(lens, tables, kv_heads, pool_blocks, bs):
    parts = []
    for grp in groups_of(lens):
        idx = torch.tensor(grp)
        parts.append((idx, prep_padded([lens[i] for i in grp], [tables[i] for i in grp], kv_heads,
                                       pool_blocks, bs)))
    inv = torch.argsort(torch.cat([p[0] for p in parts]))
    return parts, inv


def attn_grouped(q, k, v, prep, bs, scale):
    parts, inv = prep
    if len(parts) == 1:
        return attn_padded(q, k, v, parts[0][1], bs, scale)
    outs = [attn_padded(q.index_select(0, idx), k, v, p, bs, scale) for idx, p in parts]
    return torch.cat(outs).index_select(0, inv)


# ---------------------------------------------------------------- blocks (split-K over each request's blocks)
def prep_blocks(lens, tables, kv_heads, pool_blocks, bs):
    owner = torch.tensor([i for i, t in enumerate(tables) for _ in t])                 # [B]
    blocks = torch.tensor([b for t in tables for b in t])                              # [B]
    rows = (blocks[:, None] + torch.arange(kv_heads)[None, :] * pool_blocks).flatten()  # (block, head) order
    first = torch.tensor([j * bs for t in tables for j in range(len(t))])              # position of slot 0
    ctx = torch.tensor(lens)[owner]
    pad = (first[:, None] + torch.arange(bs)[None, :] >= ctx[:, None]).view(-1, 1, 1, bs)  # [B, 1, 1, bs]
    return owner, rows, pad


def attn_blocks(q, k, v, prep, bs, scale):
    owner, rows, pad = prep
    d, h, dh = q.shape
    kvh = k.shape[0]
    g = h // kvh
    nb = owner.numel()
    kb = gather(k, rows, bs).view(nb * kvh, bs, dh)                     # [B*KVH, bs, Dh]
    vb = gather(v, rows, bs).view(nb * kvh, bs, dh)
    qb = q.view(d, kvh, g, dh).index_select(0, owner).view(nb * kvh, g, dh)
    s = torch.bmm(qb, kb.transpose(1, 2)).float().mul_(scale).view(nb, kvh, g, bs)
    s.masked_fill_(pad, float("-inf"))
    m = torch.full((d, kvh, g), float("-inf")).index_reduce_(0, owner, s.amax(-1), "amax")
    p = (s - m.index_select(0, owner)[..., None]).exp_()
    den = torch.zeros(d, kvh, g).index_add_(0, owner, p.sum(-1))
    ob = torch.bmm(p.to(q.dtype).view(nb * kvh, g, bs), vb).view(nb, kvh, g, dh)
    o = torch.zeros(d, kvh, g, dh, dtype=torch.float32).index_add_(0, owner, ob.float())
    return (o / den[..., None]).to(q.dtype).view(d, h, dh)


# ---------------------------------------------------------------- loop
def prep_loop(lens, tables, kv_heads, pool_blocks, bs):
    return [(rows_of([t], kv_heads, pool_blocks), n) for t, n in zip(tables, lens)]


def attn_loop(q, k, v, prep, bs, scale):
    h, dh = q.shape[1:]
    kvh = k.shape[0]
    outs = []
    for i, (rows, n) in enumerate(prep):
        kd = gather(k, rows, bs).view(1, kvh, -1, dh)[:, :, :n]
        vd = gather(v, rows, bs).view(1, kvh, -1, dh)[:, :, :n]
        qi = q[i:i + 1].view(1, kvh, h // kvh, dh)
        outs.append(F.scaled_dot_product_attention(qi, kd, vd, scale=scale).view(1, h, dh))
    return torch.cat(outs)


CANDIDATES = {"padded": (prep_padded, attn_padded), "grouped": (prep_grouped, attn_grouped),
              "blocks": (prep_blocks, attn_blocks), "loop": (prep_loop, attn_loop)}


def timed(fn, reps):
    fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{torch.backends.cpu.get_cpu_capability()}, {args.threads} threads")
    bs = 16
    for shape, (h, kvh, dh, dtype) in SHAPES.items():
        for wl, lens in WORKLOADS.items():
            q, k, v, tables, pool_blocks = setup(lens, h, kvh, dh, dtype, bs)
            scale = dh ** -0.5
            ref = attn_loop(q.float(), k.float(), v.float(), prep_loop(lens, tables, kvh, pool_blocks, bs),
                            bs, scale)
            preps = {n: p(lens, tables, kvh, pool_blocks, bs) for n, (p, _) in CANDIDATES.items()}
            for n, (_, a) in CANDIDATES.items():
                err = (a(q, k, v, preps[n], bs, scale).float() - ref).abs().max().item()
                assert err < (2e-2 if dtype == torch.bfloat16 else 1e-4), (n, err)
            t = {n: [] for n in CANDIDATES}
            tp = {n: [] for n in CANDIDATES}
            for _ in range(args.rounds):
                for n, (p, a) in CANDIDATES.items():
                    t[n].append(timed(lambda: a(q, k, v, preps[n], bs, scale), args.reps))
                    tp[n].append(timed(lambda: p(lens, tables, kvh, pool_blocks, bs), 10))
            print(f"{shape}, {wl} (contexts {sum(lens)} tokens, padded {len(lens) * max(lens)}):")
            for n in CANDIDATES:
                r = [a / b for a, b in zip(t[n], t["padded"])]
                print(f"  {n:8s} {statistics.median(t[n]):8.1f} us/layer  prep {statistics.median(tp[n]):7.1f} us"
                      f"  ratio {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
