"""Export an engine model to GGUF (llama.cpp's file format) with the `gguf` package, and check it by reading back.

    from minimal_engine import LLM
    from minimal_engine.tools.gguf_export import export_gguf, verify_gguf
    llm = LLM("synthetic:llama-125m", dtype="bfloat16", device="cpu")
    export_gguf(llm, "llama-125m-bf16.gguf", outtype="bf16")      # f32 | f16 | bf16 | q8_0
    verify_gguf(llm, "llama-125m-bf16.gguf")                       # every tensor and key read back and compared

The same weights as the engine, so llama.cpp and the engine can be timed on one model (benchmarks/llamacpp_bench.py).
What the export does, as llama.cpp's own converter (convert_hf_to_gguf.py) would:
  * names: transformers' names (loader.hf_state_dict splits our fused qkv / gate_up) -> GGUF names
    (blk.N.attn_q.weight, ...); the lm_head is left out when tied to the embedding (llama.cpp reuses it);
  * Llama only: the rows of q and k are permuted, because llama.cpp's "llama" rotates adjacent pairs of
    dimensions and transformers rotates the two halves (Qwen2/Qwen3 use the halves in llama.cpp too);
  * Llama 3.x RoPE scaling: a rope_freqs tensor holds, per pair of dimensions, how much slower it turns;
  * norms stay float32 (llama.cpp wants them so); `outtype` applies to the matrices;
  * the vocabulary (gguf_vocab.py): the model's real tokenizer where it has a GPT-2-style one (the course's default
    and draft models: llama-server then takes text), else a placeholder of the model's size (synthetic shapes:
    the benchmarks feed token ids, and llama.cpp needs a vocabulary of the right size to load the file).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from minimal_engine.model.llama import rope_inv_freq
from minimal_engine.model.loader import hf_state_dict
from minimal_engine.tools.gguf_vocab import tokenizer_from_gguf, write_vocab

ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
LAYER_NAMES = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
               "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
               "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
               "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
               "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
               "self_attn.k_norm.weight": "attn_k_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
               "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
OUTTYPES = ("f32", "f16", "bf16", "q8_0")
VOCAB_CHECK_TEXTS = ("吾輩は猫である。名前はまだ無い。", "どこで生れたかとんと見当がつかぬ。", "Hello, world! 123 + 456 = 579",
                     "「坊っちゃん」は夏目漱石の小説です。\n改行と  空白、　全角空白。", "ｱｲｳ ①② 😀 é ß",
                     "def f(x):\n    return x * 2  # コメント")


def permute_for_llama_cpp(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Reorder each head's rows from (first half, second half) to interleaved pairs (convert_hf_to_gguf.permute)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(model) -> dict[str, torch.Tensor]:
    """GGUF name -> float32 tensor (already permuted where llama.cpp needs it)."""
    cfg = model.config
    out = {}
    for name, t in hf_state_dict(model).items():
        t = t.detach().float().cpu()
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = t
        elif name == "model.norm.weight":
            out["output_norm.weight"] = t
        elif name == "lm_head.weight":
            if not cfg.tie_word_embeddings:
                out["output.weight"] = t
        else:
            _, _, layer, rest = name.split(".", 3)             # model.layers.N.rest
            if cfg.variant == "llama" and rest == "self_attn.q_proj.weight":
                t = permute_for_llama_cpp(t, cfg.num_heads)
            elif cfg.variant == "llama" and rest == "self_attn.k_proj.weight":
                t = permute_for_llama_cpp(t, cfg.num_kv_heads)
            out[f"blk.{layer}.{LAYER_NAMES[rest]}"] = t
    if cfg.rope_scaling is not None and cfg.variant == "llama":
        plain = rope_inv_freq(type(cfg)(**{**cfg.__dict__, "rope_scaling": None}))
        out["rope_freqs.weight"] = plain / rope_inv_freq(cfg)      # llama.cpp divides the frequencies by these
    return out


def export_gguf(llm, path: str | Path, outtype: str = "bf16") -> Path:
    """Write llm's model (an LLM) to a GGUF file of `outtype`; returns the path."""
    import gguf
    if outtype not in OUTTYPES:
        raise ValueError(f"outtype must be one of {', '.join(OUTTYPES)}, got {outtype!r}")
    model, cfg = llm.model, llm.model_config
    qtype = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
             "bf16": gguf.GGMLQuantizationType.BF16, "q8_0": gguf.GGMLQuantizationType.Q8_0}[outtype]
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
             "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[outtype]
    path = Path(path)
    w = gguf.GGUFWriter(str(path), ARCH[cfg.variant])
    w.add_name(llm.model_name)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_heads)
    w.add_head_count_kv(cfg.num_kv_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(ftype)
    write_vocab(w, llm.tokenizer.hf if llm.model_path else None, cfg.vocab_size)   # synthetic: placeholder
    for name, t in gguf_tensors(model).items():
        data = t.numpy()
        if data.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:     # norms, biases, rope_freqs: float32
            w.add_tensor(name, data.astype(np.float32))
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, data.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def read_gguf(path: str | Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(metadata {key: value}, tensors {name: float32 array in PyTorch's [out, in] order}) of a GGUF file."""
    import gguf
    reader = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    tensors = {}
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type) if t.tensor_type not in (0, 1) else t.data
        tensors[t.name] = np.asarray(data, dtype=np.float32).reshape([int(n) for n in reversed(t.shape)])
    return meta, tensors


def verify_gguf(llm, path: str | Path) -> dict:
    """Read the file back: every expected tensor present, equal to the model's (to the file's precision), and the
    shape keys right. Raises AssertionError on a mismatch; returns {"tensors": n, "max_abs_error": e}."""
    meta, tensors = read_gguf(path)
    cfg, arch = llm.model_config, ARCH[llm.model_config.variant]
    expected = {f"{arch}.block_count": cfg.num_layers, f"{arch}.embedding_length": cfg.hidden_size,
                f"{arch}.attention.head_count": cfg.num_heads, f"{arch}.attention.head_count_kv": cfg.num_kv_heads,
                f"{arch}.feed_forward_length": cfg.intermediate_size, "general.architecture": arch}
    for key, value in expected.items():
        assert meta.get(key) == value, f"{key}: {meta.get(key)!r} != {value!r}"
    assert len(meta["tokenizer.ggml.tokens"]) == cfg.vocab_size
    tokenized = 0
    if meta.get("tokenizer.ggml.model") == "gpt2":    # the real tokenizer: it must tokenize as the model's own
        rebuilt = tokenizer_from_gguf(meta)
        for text in VOCAB_CHECK_TEXTS:
            ids = llm.tokenizer.encode(text)
            assert rebuilt.encode(text).ids == ids, f"the file's vocabulary tokenizes {text!r} differently"
            assert rebuilt.decode(ids) == text
            tokenized += 1
    ours = gguf_tensors(llm.model)
    assert set(ours) == set(tensors), f"tensor names differ: {sorted(set(ours) ^ set(tensors))[:5]}"
    worst = 0.0
    for name, t in ours.items():
        got = torch.from_numpy(np.array(tensors[name]))
        assert got.shape == t.shape, f"{name}: shape {tuple(got.shape)} != {tuple(t.shape)}"
        scale = t.abs().max().item() or 1.0
        err = (got - t).abs().max().item()
        assert err <= 1e-2 * scale, f"{name}: max error {err} (largest weight {scale})"
        worst = max(worst, err)
    return {"tensors": len(ours), "max_abs_error": worst, "texts_tokenized_alike": tokenized}
