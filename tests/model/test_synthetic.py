"""Synthetic shapes: random weights of real model shapes build and generate, with no download."""
import pytest
import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.model.synthetic import SHAPES, num_parameters, synthetic_config


@pytest.mark.parametrize("name", list(SHAPES))
def test_shape_builds_and_generates(name):
    llm = LLM(f"synthetic:{name}", device="cpu", num_kv_blocks=8, max_model_len=128)
    cfg = llm.model_config
    n = sum(p.numel() for p in llm.engine.runner.model.parameters())
    assert n == num_parameters(cfg)
    out = llm.generate(["吾輩は"], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)[0]
    assert len(out.token_ids) == 3 and out.finish_reason == "length"   # no EOS: always max_tokens
    assert isinstance(out.text, str)
    assert llm.dtype == torch.bfloat16
    del llm


def test_known_parameter_counts():
    # published sizes: SmolLM2-135M has 134.5M parameters, Qwen3-0.6B 596M (0.44B without embeddings),
    # Llama-3.2-1B 1.24B
    assert num_parameters(synthetic_config("smollm2-135m")) == pytest.approx(134.5e6, rel=0.01)
    assert num_parameters(synthetic_config("qwen3-0.6b")) == pytest.approx(596e6, rel=0.01)
    assert num_parameters(synthetic_config("llama-3.2-1b")) == pytest.approx(1.236e9, rel=0.01)


def test_unknown_shape_lists_known_ones():
    with pytest.raises(ValueError, match="unknown synthetic shape 'gpt-5'.*llama-125m"):
        LLM("synthetic:gpt-5", device="cpu")


def test_synthetic_parts_are_built_whole():
    """Given at construction, not set afterwards: the tokenizer wraps ids past its vocabulary
    (Tokenizer(wrap_ids=True)), lm_head shares the embedding's weight after the meta build, and
    the rotary speeds (meta in that build) are remade on the device on first use."""
    from minimal_engine.config import DEFAULT_MODEL
    from minimal_engine.model.llama import rope_inv_freq
    from minimal_engine.model.synthetic import build_synthetic
    from minimal_engine.model.tokenizer import Tokenizer
    cfg, model, tok, _ = build_synthetic("smollm2-135m", None, torch.device("cpu"))
    assert model.lm_head.weight is model.embed_tokens.weight
    assert tok.id_modulo == len(tok) and tok.decode([len(tok) + 300]) == tok.decode([300])
    assert Tokenizer(DEFAULT_MODEL).id_modulo is None
    assert model.inv_freq.is_meta
    model.rope(torch.arange(4), torch.float32)
    assert torch.equal(model.inv_freq, rope_inv_freq(cfg))
