"""CUDA graphs for decode steps (cuda_graphs.py) and the in-place paged decode attention (attention_paged.py).

On the CPU the graph bookkeeping (padded sizes, static buffers, padding rows) runs without capture, the
Triton kernel runs through Triton's interpreter where Triton is installed, and greedy tokens must stay
equal to transformers'. The capture itself is tested only where CUDA is available."""

import pytest
import torch

from conftest import hf_greedy
from minimal_engine import LLM, SamplingParams
from minimal_engine.model.attention_paged import paged_decode_reference
from minimal_engine.config import EngineConfig
from minimal_engine.engine.cuda_graphs import DecodeGraphs, graph_batch_sizes, padded_batch_size

PROMPTS = [[5, 17, 33, 100, 7, 9, 200, 45, 3, 80, 81, 82, 90], [11, 12], list(range(40, 90)), [300, 2, 250] * 7]
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def test_padded_batch_sizes():
    assert graph_batch_sizes(64) == [1, 2, 4, 8, 16, 32, 64]
    assert graph_batch_sizes(48) == [1, 2, 4, 8, 16, 32, 48]
    sizes = graph_batch_sizes(48)
    assert [padded_batch_size(sizes, n) for n in (1, 3, 16, 17, 33, 48)] == [1, 4, 16, 32, 48, 48]
    assert padded_batch_size(sizes, 49) is None


def test_static_buffers_are_filled_and_padded():
    g = DecodeGraphs(model=None, kv_caches=None, max_num_seqs=8, max_blocks_per_seq=6, block_size=4,
                     scratch_slot=99, device=torch.device("cpu"), capture=False)
    g.block_tables.fill_(7)                          # stale values from an earlier step
    rows = [(11, 5, 21, [3, 5], 6), (12, 0, 8, [2], 1), (13, 9, 38, [4, 1, 9], 10)]
    b = g.fill(rows)
    assert b == 4                                    # 3 requests -> the captured size 4
    assert g.input_ids[:4].tolist() == [11, 12, 13, 0]
    assert g.positions[:4].tolist() == [5, 0, 9, 0]
    assert g.slots[:4].tolist() == [21, 8, 38, 99]   # the padding row writes into the scratch slot
    assert g.context_lens[:4].tolist() == [6, 1, 10, 0]   # ... and attends to nothing
    assert g.block_tables[:4, :3].tolist() == [[3, 5, 0], [2, 0, 0], [4, 1, 9], [0, 0, 0]]
    ids, fb = g.batch(b)
    assert fb.num_decodes == 4 and fb.prefills == [] and fb.logits_indices.tolist() == [0, 1, 2, 3]
    assert fb.decode.block_tables.shape == (4, 6) and ids.data_ptr() == g.input_ids.data_ptr()
    with pytest.raises(ValueError, match="blocks"):
        g.fill([(1, 0, 0, list(range(7)), 1)])


def naive_decode_attention(q, k_cache, v_cache, tables, lens, scale, bs):
    """One request and one head at a time, straight from the definition."""
    out = torch.zeros_like(q)
    kvh = k_cache.shape[0]
    g = q.shape[1] // kvh
    for i, n in enumerate(lens.tolist()):
        slots = [tables[i, p // bs].item() * bs + p % bs for p in range(n)]
        for h in range(q.shape[1]):
            k, v = k_cache[h // g, slots], v_cache[h // g, slots]
            out[i, h] = ((q[i, h] @ k.T) * scale).softmax(-1) @ v if n else 0
    return out


def make_case(h=4, kvh=2, dh=16, bs=4, blocks=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    kc = torch.randn(kvh, (blocks + 1) * bs, dh, generator=gen)
    vc = torch.randn(kvh, (blocks + 1) * bs, dh, generator=gen)
    tables = torch.randperm(blocks, generator=gen)[:12].view(3, 4).to(torch.int32)
    lens = torch.tensor([1, 3 * bs + 2, 0], dtype=torch.int32)
    q = torch.randn(3, h, dh, generator=gen)
    return q, kc, vc, tables, lens


def test_paged_reference_matches_the_definition():
    q, kc, vc, tables, lens = make_case()
    out = paged_decode_reference(q, kc, vc, tables, lens, 0.25, 4)
    torch.testing.assert_close(out, naive_decode_attention(q, kc, vc, tables, lens, 0.25, 4))
    assert out[2].abs().max() == 0                   # a padding row gives 0


def test_choice_of_decode_attention_and_graphs():
    """Which decode path and whether CUDA graphs: plain functions, so the choices a GPU makes are tested here."""
    import minimal_engine.model.attention_paged as ap
    from minimal_engine.engine.model_runner import cuda_graphs_wanted
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert ap.use_paged_decode(gpu, kv_quantized=False)            # CUDA: in place (the kernel, or the reference)
    assert not ap.use_paged_decode(gpu, kv_quantized=True)         # a one-byte pool is dequantized while gathering
    assert ap.use_paged_decode(cpu, False) == (ap.triton is not None and ap.INTERPRETED)   # CPU: gather, unless
    assert not ap.use_paged_decode(cpu, True)                      # ... Triton's interpreter runs the kernel
    assert ap.triton_available(gpu) == (ap.triton is not None)
    assert cuda_graphs_wanted(None, gpu, False) and not cuda_graphs_wanted(None, cpu, False)
    assert cuda_graphs_wanted(True, cpu, False)                    # the uncaptured static-buffer path (tests)
    assert not cuda_graphs_wanted(True, gpu, True) and not cuda_graphs_wanted(None, gpu, True)
    assert not cuda_graphs_wanted(False, gpu, False)


@pytest.mark.parametrize("max_num_seqs", [64, 256])
def test_gpu_check_captures_the_sizes_tested_here(max_num_seqs):
    """make gpu-check's engines (max_num_seqs 64 for correctness, 256 for speed) capture
    graph_batch_sizes(max_num_seqs); the CPU static-buffer path runs the same padding for every batch size."""
    sizes = graph_batch_sizes(max_num_seqs)
    g = DecodeGraphs(model=None, kv_caches=None, max_num_seqs=max_num_seqs, max_blocks_per_seq=4, block_size=4,
                     scratch_slot=9999, device=torch.device("cpu"), capture=False)
    for n in range(1, max_num_seqs + 1):
        b = g.fill([(1, 0, 4 * i, [i], 1) for i in range(n)])
        assert b == padded_batch_size(sizes, n) and b in sizes
        assert g.context_lens[n:b].tolist() == [0] * (b - n) and g.slots[n:b].tolist() == [9999] * (b - n)


def test_cuda_graphs_default_and_validation():
    assert EngineConfig().cuda_graphs is None
    with pytest.raises(ValueError, match="cuda_graphs"):
        EngineConfig(cuda_graphs="yes")


@pytest.fixture(scope="module")
def reference(tiny_model):
    arch, folder = tiny_model
    return folder, [hf_greedy(folder, p, GREEDY.max_tokens) for p in PROMPTS]


@pytest.mark.parametrize("settings", [dict(), dict(block_size=4, num_kv_blocks=20), dict(max_num_batched_tokens=7)],
                         ids=["batch", "preemption", "chunked"])
def test_static_decode_path_gives_transformers_tokens(reference, settings):
    """Decode-only steps through the static buffers (padding rows, block tables) on the CPU: tokens unchanged."""
    folder, expected = reference
    llm = LLM(folder, dtype="float32", device="cpu", max_num_seqs=3, **settings)   # sizes 1, 2, 3
    runner = llm.engine.runner
    assert runner.graphs is None                     # off by default on the CPU
    runner.set_cuda_graphs(True)                     # the CPU runs the same path without capture
    calls = []
    run = runner.graphs.run
    runner.graphs.run = lambda rows: calls.append(len(rows)) or run(rows)
    outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.token_ids for o in outs] == expected
    assert calls and max(calls) <= 3
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks


def test_paged_decode_without_graphs_gives_transformers_tokens(reference):
    folder, expected = reference
    llm = LLM(folder, dtype="float32", device="cpu", attention_backend="paged")   # CUDA's eager decode path
    assert llm.engine.runner.attention_backend == "paged"                     # (reference kernel on the CPU)
    assert [o.token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)] == expected


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_captured_graphs_on_cuda(llama_dir):
    p = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    expected = [hf_greedy(llama_dir, q, 24) for q in PROMPTS]
    llm = LLM(llama_dir, dtype="float32", device="cuda")
    assert llm.engine.runner.graphs is not None and llm.engine.runner.graphs.capture
    assert [o.token_ids for o in llm.generate(PROMPTS, p, use_tqdm=False)] == expected
    assert llm.engine.runner.graphs.graphs           # some sizes were captured and replayed


def test_llm_takes_the_cuda_graphs_option(reference):
    """`LLM(..., cuda_graphs=...)` reaches the model runner (None: off on the CPU; True: the static path)."""
    folder, _ = reference
    assert LLM(folder, dtype="float32", device="cpu").engine.runner.graphs is None
    assert LLM(folder, dtype="float32", device="cpu", cuda_graphs=True).engine.runner.graphs is not None
    with pytest.raises(ValueError, match="cuda_graphs"):
        LLM(folder, dtype="float32", device="cpu", cuda_graphs="on")
