"""The shipped default model in this engine: loads offline with no arguments, and its greedy tokens equal
transformers' on the same weights."""
import pytest
import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.llm import DEFAULT_MODEL

PROMPTS = ["吾輩は", "東京の空は", "推論とは", "その夜、私は"]


@pytest.fixture(scope="module")
def llm():
    return LLM(dtype="float32", device="cpu")          # no model argument: the shipped default


def test_default_llm_loads_the_shipped_model(llm):
    assert llm.model_path == DEFAULT_MODEL
    out = llm.generate(["吾輩は"], SamplingParams(temperature=0, max_tokens=16), use_tqdm=False)[0]
    assert out.token_ids and out.text.strip()
    assert "\ufffd" not in out.text


def test_greedy_tokens_equal_transformers(llm):
    import transformers
    hf = transformers.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(DEFAULT_MODEL)
    p = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    ours = llm.generate(PROMPTS, p, use_tqdm=False)                   # one mixed batch
    for prompt, out in zip(PROMPTS, ours):
        ids = tok(prompt, return_tensors="pt").input_ids
        assert out.prompt_token_ids == ids[0].tolist()
        ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                          eos_token_id=None, pad_token_id=tok.eos_token_id)[0, ids.shape[1]:].tolist()
        assert out.token_ids == ref, prompt


def test_default_model_in_bfloat16_writes_japanese():
    llm = LLM(dtype="bfloat16", device="cpu")
    out = llm.generate(["東京の空は"], SamplingParams(temperature=0.8, top_p=0.95, seed=0, max_tokens=32),
                       use_tqdm=False)[0]
    japanese = sum("\u3040" <= ch <= "\u9fff" for ch in out.text)
    assert japanese >= len(out.text.strip()) // 2
