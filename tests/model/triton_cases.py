"""Run under Triton's interpreter by tests/model/test_triton_interpreter.py (TRITON_INTERPRET=1 set before any import):
the paged-decode Triton kernel against the definition on every case the engine feeds it on a GPU, and the
engine's own decode steps through the same dispatch it takes on CUDA. Prints one JSON object.

    TRITON_INTERPRET=1 python tests/model/triton_cases.py MODEL_DIR
"""
import json
import sys
import time

import torch

BLOCK = 16                                  # the engine's default block size
CONTEXTS = [1, BLOCK - 1, BLOCK, BLOCK + 1, 5 * BLOCK + 3, 0]   # the last row: CUDA-graph padding (context 0)
TOLERANCE = {"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (2e-2, 1e-2)}   # (atol, rtol)


def kernel_cases() -> list[dict]:
    """Every dtype the engine feeds the kernel on a GPU, GQA ratios 1/2/4/8, head dims 64/128; each case is one
    launch over requests of CONTEXTS tokens (1, block-1, block, block+1, a long one, a padding row), with
    scattered blocks; `view`: the table is a column slice of a wider one (row stride != width)."""
    cases = [dict(dtype=dt, ratio=r, dh=dh, bs=BLOCK, view=False)
             for dt in ("float32", "float16", "bfloat16") for r in (1, 2, 4, 8) for dh in (64, 128)]
    cases += [dict(dtype="bfloat16", ratio=4, dh=64, bs=BLOCK, view=True), dict(dtype="float32", ratio=2, dh=64,
                                                                                 bs=8, view=False)]
    return cases


def case_id(c: dict) -> str:
    return f"{c['dtype']}-gqa{c['ratio']}-dh{c['dh']}-bs{c['bs']}" + ("-view" if c["view"] else "")


def make_inputs(c: dict, seed: int = 0):
    """q [D, H, Dh], pools [KVH, slots, Dh] (dtype), tables [D, W] int32 (scattered blocks), lens [D] int32."""
    g = torch.Generator().manual_seed(seed)
    kvh, bs = 2, c["bs"]
    contexts = [1, bs - 1, bs, bs + 1, 5 * bs + 3, 0]
    width = -(-max(contexts) // bs)
    blocks = len(contexts) * width + 3
    dt = getattr(torch, c["dtype"])
    k = torch.randn(kvh, (blocks + 1) * bs, c["dh"], generator=g).to(dt)
    v = torch.randn(kvh, (blocks + 1) * bs, c["dh"], generator=g).to(dt)
    q = torch.randn(len(contexts), kvh * c["ratio"], c["dh"], generator=g).to(dt)
    ids = torch.randperm(blocks, generator=g)[:len(contexts) * width].view(len(contexts), width).to(torch.int32)
    if c["view"]:
        wide = torch.full((len(contexts), width + 5), 10 ** 6, dtype=torch.int32)   # never read past the context
        wide[:, :width] = ids
        ids = wide[:, :width]
        assert ids.stride(0) == width + 5
    return q, k, v, ids, torch.tensor(contexts, dtype=torch.int32)


def definition(q, k_cache, v_cache, tables, lens, scale, bs):
    """Attention straight from its definition, in float64, one request and one query head at a time."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    g = q.shape[1] // k_cache.shape[0]
    for i, n in enumerate(lens.tolist()):
        slots = [tables[i, p // bs].item() * bs + p % bs for p in range(n)]
        for h in range(q.shape[1]):
            if n:
                kk, vv = k_cache[h // g, slots].double(), v_cache[h // g, slots].double()
                out[i, h] = ((q[i, h].double() @ kk.T) * scale).softmax(-1) @ vv
    return out


def run_kernels() -> list[dict]:
    from minimal_engine.model.attention_paged import INTERPRETED, paged_decode_triton
    assert INTERPRETED, "TRITON_INTERPRET=1 must be set before minimal_engine is imported"
    rows = []
    for c in kernel_cases():
        q, k, v, tables, lens = make_inputs(c)
        scale = c["dh"] ** -0.5
        t = time.perf_counter()
        out = paged_decode_triton(q, k, v, tables, lens, scale, c["bs"])
        ref = definition(q, k, v, tables, lens, scale, c["bs"])
        atol, rtol = TOLERANCE[c["dtype"]]
        err = (out.double() - ref).abs()
        ok = out.dtype == q.dtype and out.shape == q.shape and bool((err <= atol + rtol * ref.abs()).all())
        rows.append(dict(id=case_id(c), ok=ok, max_abs_err=err.max().item(), padding_row_zero=bool(
            out[-1].abs().max() == 0), seconds=time.perf_counter() - t))
    return rows


def run_engine(model_dir: str) -> dict:
    """Greedy tokens of the engine whose decode steps go through the kernel (counted), eager and through the
    CUDA-graph static buffers (padding rows included), float32 and bfloat16."""
    import minimal_engine.model.attention_paged as ap
    from minimal_engine import LLM, SamplingParams
    calls = {"n": 0, "rows": []}
    kernel = ap.paged_decode_triton

    def counted(q, *args):
        calls["n"] += 1
        calls["rows"].append(q.shape[0])
        return kernel(q, *args)
    ap.paged_decode_triton = counted                 # count, do not change: paged_decode_attention calls this name
    prompts = [[5, 17, 33, 100, 7, 9, 200, 45, 3, 80, 81, 82, 90], [11, 12], list(range(40, 90))]
    sp = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    out = {}
    for dtype in ("float32", "bfloat16"):
        for graphs in (False, True):
            llm = LLM(model_dir, dtype=dtype, device="cpu", max_num_seqs=5, cuda_graphs=graphs)
            assert llm.engine.runner.attention_backend == "paged"
            before = calls["n"]
            toks = [o.token_ids for o in llm.generate(prompts, sp, use_tqdm=False)]
            out[f"{dtype}-{'graphs' if graphs else 'eager'}"] = dict(tokens=toks, kernel_calls=calls["n"] - before,
                                                                     rows=sorted(set(calls["rows"])))
            calls["rows"].clear()
    return out


if __name__ == "__main__":
    print(json.dumps({"kernels": run_kernels(), "engine": run_engine(sys.argv[1])}))
