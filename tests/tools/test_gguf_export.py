"""GGUF export (minimal_engine/tools/gguf_export.py): a tiny random model written with the `gguf` package and
read back: tensors equal to transformers' own weights, keys right, and the q/k row permutation that
llama.cpp's RoPE convention needs."""
import math

import numpy as np
import pytest
import torch

pytest.importorskip("gguf")

from conftest import load_benchmark                                                  # noqa: E402
from minimal_engine import LLM                                                        # noqa: E402
from minimal_engine.tools.gguf_export import (export_gguf, permute_for_llama_cpp, read_gguf,  # noqa: E402
                                              verify_gguf)


def unpermute(w, heads):
    """Inverse of permute_for_llama_cpp: interleaved pairs back to (first half, second half)."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("outtype", ["f32", "bf16", "q8_0"])
def test_tiny_llama_round_trip(llama_dir, tmp_path, outtype):
    import transformers
    llm = LLM(llama_dir, dtype="float32", device="cpu")
    path = export_gguf(llm, tmp_path / f"tiny-{outtype}.gguf", outtype)
    meta, tensors = read_gguf(path)
    cfg = llm.model_config
    assert meta["general.architecture"] == "llama"
    assert meta["llama.block_count"] == cfg.num_layers == 2
    assert meta["llama.embedding_length"] == cfg.hidden_size == 64
    assert meta["llama.attention.head_count"] == 4 and meta["llama.attention.head_count_kv"] == 2
    assert meta["llama.feed_forward_length"] == 128
    assert meta["llama.rope.freq_base"] == pytest.approx(cfg.rope_theta)
    assert meta["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(cfg.rms_norm_eps)
    assert len(meta["tokenizer.ggml.tokens"]) == cfg.vocab_size
    hf = transformers.AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).state_dict()
    pairs = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight",
             "output_norm.weight": "model.norm.weight", "blk.1.attn_v.weight": "model.layers.1.self_attn.v_proj.weight",
             "blk.0.ffn_down.weight": "model.layers.0.mlp.down_proj.weight",
             "blk.0.attn_norm.weight": "model.layers.0.input_layernorm.weight"}
    tol = {"f32": 0.0, "bf16": 2 ** -8, "q8_0": 1 / 127}[outtype]   # relative to the largest weight
    for ours, theirs in pairs.items():
        t = hf[theirs]
        atol = tol * t.abs().max().item() if tensors[ours].ndim > 1 else 0.0   # norms stay float32
        torch.testing.assert_close(torch.from_numpy(np.array(tensors[ours])), t, atol=atol, rtol=0)
    q = unpermute(torch.from_numpy(np.array(tensors["blk.0.attn_q.weight"])), 4)
    k = unpermute(torch.from_numpy(np.array(tensors["blk.0.attn_k.weight"])), 2)
    a = tol * hf["model.layers.0.self_attn.q_proj.weight"].abs().max().item()
    torch.testing.assert_close(q, hf["model.layers.0.self_attn.q_proj.weight"], atol=a, rtol=0)
    torch.testing.assert_close(k, hf["model.layers.0.self_attn.k_proj.weight"], atol=a * 2, rtol=0)
    assert verify_gguf(llm, path)["tensors"] == len(tensors)


def test_permutation_turns_half_rotation_into_pair_rotation():
    """transformers rotates (x_i, x_{i+d/2}); llama.cpp's llama rotates (x_{2i}, x_{2i+1}). The permuted rows
    of q make both give the same attention scores: rope_pairs(P q) == P rope_halves(q)."""
    d, pos = 8, 5
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    cos, sin = torch.cos(pos * inv), torch.sin(pos * inv)
    x = torch.randn(d)
    x1, x2 = x[:d // 2], x[d // 2:]
    halves = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin])
    p = permute_for_llama_cpp(torch.eye(d), 1)                  # the row permutation as a matrix
    y = p @ x
    pairs = torch.stack([y[0::2] * cos - y[1::2] * sin, y[1::2] * cos + y[0::2] * sin], dim=1).flatten()
    torch.testing.assert_close(pairs, p @ halves)
    assert math.isclose(float(pairs @ pairs), float(halves @ halves), rel_tol=1e-5)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "llama3_rope"])
def test_other_architectures_read_back(tmp_path, arch):
    from conftest import save_tiny_model
    folder = save_tiny_model(tmp_path / arch, arch)
    llm = LLM(folder, dtype="float32", device="cpu")
    path = export_gguf(llm, tmp_path / f"{arch}.gguf", "f32")
    meta, tensors = read_gguf(path)
    assert meta["general.architecture"] == {"qwen2": "qwen2", "qwen3": "qwen3", "llama3_rope": "llama"}[arch]
    assert ("blk.0.attn_q.bias" in tensors) == (arch == "qwen2")
    assert ("blk.0.attn_q_norm.weight" in tensors) == (arch == "qwen3")
    assert ("rope_freqs.weight" in tensors) == (arch == "llama3_rope")
    assert ("output.weight" in tensors) == (not llm.model_config.tie_word_embeddings)
    assert verify_gguf(llm, path)["max_abs_error"] == 0.0


def test_bad_outtype(llama_dir, tmp_path):
    with pytest.raises(ValueError, match="outtype"):
        export_gguf(LLM(llama_dir, dtype="float32", device="cpu"), tmp_path / "x.gguf", "q4_k")


def test_llamacpp_bench_reads_llama_cpp_outputs():
    bench = load_benchmark("llamacpp_bench")
    js = ('[{"n_prompt": 512, "n_gen": 0, "avg_ts": 250.0}, {"n_prompt": 0, "n_gen": 128, "avg_ts": 40.0}]')
    assert bench.parse_llama_bench(js) == {"prefill_tok_s": 250.0, "tpot_ms": 25.0}
    table = ("main: n_kv_max = 8448\n\n"
             "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n"
             "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n"
             "|   128 |    128 |   32 |   8192 |    4.000 |  1024.00 |   12.000 |   341.33 |   16.000 |   512.00 |\n")
    assert bench.parse_batched_bench(table) == pytest.approx(32 * 128 / 16.0)
    assert bench.ratios({"tpot_ms": 30.0, "prefill_tok_s": 100.0}, {"tpot_ms": 20.0, "prefill_tok_s": 50.0}) == \
        {"tpot_ms": 1.5, "prefill_tok_s": 2.0}


def test_llamacpp_bench_export_only(llama_dir, tmp_path, capsys):
    bench = load_benchmark("llamacpp_bench")
    assert bench.main(["--model", str(llama_dir), "--outtype", "bf16", "--threads", "1", "--out", str(tmp_path),
                       "--export-only"]) == 0
    assert "read back" in capsys.readouterr().out
    assert len(list(tmp_path.glob("*-bf16.gguf"))) == 1



@pytest.mark.parametrize("model", [None, "minimal_engine/draft_model"], ids=["default", "draft"])
def test_course_models_export_their_real_tokenizer(model, tmp_path):
    """Issue 32: the default and draft models carry their byte-level BPE tokenizer (model gpt2, pre gpt-2),
    and a tokenizer rebuilt from the file's keys gives the model's token ids on the fixed texts (a placeholder
    vocabulary, tok_N, made llama-server send 4x more tokens as text)."""
    from minimal_engine.tools.gguf_export import VOCAB_CHECK_TEXTS
    llm = LLM(model, dtype="float32", device="cpu", max_num_seqs=1, num_kv_blocks=4)
    path = export_gguf(llm, tmp_path / "m.gguf", "f32")
    report = verify_gguf(llm, path)
    assert report["texts_tokenized_alike"] == len(VOCAB_CHECK_TEXTS) and report["max_abs_error"] == 0.0
    meta, _ = read_gguf(path)
    assert (meta["tokenizer.ggml.model"], meta["tokenizer.ggml.pre"]) == ("gpt2", "gpt-2")
    assert meta["tokenizer.ggml.eos_token_id"] == llm.tokenizer.hf.eos_token_id
    assert not any(t.startswith("tok_") for t in meta["tokenizer.ggml.tokens"])


def test_a_vocabulary_that_tokenizes_differently_is_caught(tmp_path, monkeypatch):
    """verify_gguf compares token ids: a file whose merges lost their order fails it."""
    from minimal_engine.tools import gguf_vocab
    llm = LLM(dtype="float32", device="cpu", max_num_seqs=1, num_kv_blocks=4)
    real = gguf_vocab.bpe_vocab

    def shuffled(*args):
        v = real(*args)
        return {**v, "merges": v["merges"][::-1]}
    monkeypatch.setattr(gguf_vocab, "bpe_vocab", shuffled)
    path = export_gguf(llm, tmp_path / "bad.gguf", "f32")
    with pytest.raises(AssertionError, match="tokenizes"):
        verify_gguf(llm, path)


def test_llamacpp_bench_fits_the_default_model_and_records_the_machine():
    """Issue 32 #2: the long prompt leaves room for one token (512 positions: 511, which failed in round 1)."""
    bench = load_benchmark("llamacpp_bench")
    assert bench.prefill_len(512) == 511 and bench.prefill_len(2048) == 512
    llm = LLM(device="cpu", max_num_seqs=2)
    row = bench.engine_round(llm, llm.model_config.vocab_size, seed=0, batch=2, io=(8, 8))
    assert all(row[k] > 0 for k in bench.METRICS)
    m = bench.machine_info()
    assert m["cpu"] and isinstance(m["flags"], list) and m["torch_cpu_capability"]


def test_llamacpp_bench_runs_rounds_with_the_int8_pair(llama_dir, tmp_path, monkeypatch, capsys):
    """The whole loop against a stand-in llama-bench (prints llama-bench's JSON): ratios per type, the INT8 engine
    against Q8_0 as its own column, the long prompt's length passed as -p, the machine and load in the JSON."""
    import json
    import os
    fake = tmp_path / "bin" / "llama-bench"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/args"\n'
                    'echo \'[{"n_prompt": 255, "n_gen": 0, "avg_ts": 1000.0}, {"n_prompt": 0, "n_gen": 128, "avg_ts": 100.0}]\'\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    bench = load_benchmark("llamacpp_bench")
    out = tmp_path / "out"
    assert bench.main(["--model", str(llama_dir), "--dtype", "float32", "--outtype", "f32", "--threads", "1",
                       "--rounds", "1", "--int8", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "INT8 vs Q8_0" in text and "CPU:" in text
    res = json.loads((out / "llamacpp_bench.json").read_text())
    assert res["prefill_len"] == 255 and "-p 255" in (fake.parent / "args").read_text()
    assert set(res["rounds"][0]) >= {"engine", "engine_int8", "f32", "q8_0", "ratio_int8_q8_0", "loadavg"}
    assert res["machine"]["cpu"] and res["median_min_max_ratios"]["tpot_ms/int8/q8_0"][0] > 0
