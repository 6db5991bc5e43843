"""Shared fixtures: tiny randomly initialised transformers models of each supported architecture, saved to
temporary folders in Hugging Face format, with a small byte-level BPE tokenizer trained on the fly."""
from __future__ import annotations

import pytest
import torch

TEXT = ("吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"
        "東京の空は青く、推論とは学習済みのモデルで答えを作ることだ。Hello, world! 1234 ＡＢＣ ｶﾀｶﾅ\n") * 20

ARCHS = {
    "llama": dict(cls="LlamaConfig", tie_word_embeddings=False),
    "llama3_rope": dict(cls="LlamaConfig", tie_word_embeddings=True, rope_theta=500000.0,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
    "qwen2": dict(cls="Qwen2Config", tie_word_embeddings=False),
    "qwen3": dict(cls="Qwen3Config", tie_word_embeddings=True, head_dim=16),
}


def make_tokenizer(folder):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT], trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    hf.save_pretrained(folder)
    return hf


def save_tiny_model(folder, arch: str, seed: int = 0, dtype=torch.float32):
    import transformers
    spec = dict(ARCHS[arch])
    cls = getattr(transformers, spec.pop("cls"))
    tok = make_tokenizer(folder)
    cfg = cls(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=len(tok), max_position_embeddings=256,
              eos_token_id=tok.eos_token_id, bos_token_id=None, initializer_range=0.1, **spec)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session", params=list(ARCHS))
def tiny_model(request, tmp_path_factory):
    """(arch name, folder) for each supported architecture."""
    folder = tmp_path_factory.mktemp(f"tiny_{request.param}")
    return request.param, save_tiny_model(folder, request.param)


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny_llama"), "llama")


def hf_greedy(folder, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """Greedy continuation by transformers' generate, for comparison."""
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    ids = torch.tensor([prompt_ids])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                         do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt_ids):].tolist()


def pytest_terminal_summary(terminalreporter):
    """Say plainly at the end of `make test` when the real-browser test (tests/browser/test_browser.py) was skipped."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "test_browser.py" in r.nodeid]
    if skipped:
        reason = skipped[0].longrepr[2] if isinstance(skipped[0].longrepr, tuple) else str(skipped[0].longrepr)
        terminalreporter.write_sep("=", f"ブラウザテストをスキップしました / browser test SKIPPED ({len(skipped)})",
                                   yellow=True, bold=True)
        terminalreporter.write_line(reason.removeprefix("Skipped: "))
        terminalreporter.write_line("Chromium を入れると実行されます（Debian/Ubuntu: apt-get install chromium）。")


def wait_idle(url: str, timeout_s: float = 30.0) -> dict:
    """Poll a server's /health until no request is unfinished and every KV block is free (bounded)."""
    import time

    import httpx
    deadline = time.monotonic() + timeout_s
    while True:
        h = httpx.get(url + "/health", timeout=5).json()
        if (h["unfinished_requests"] == 0 and h["running"] == 0 and h["waiting"] == 0
                and h["free_blocks"] == h["total_blocks"]) or time.monotonic() > deadline:
            return h
        time.sleep(0.05)


def fail_rows_with_top_k(monkeypatch, top_k: int = 7) -> None:
    """Make the sampler raise (as torch.multinomial does on a nan row) for requests with this top_k only."""
    import minimal_engine.engine.sampler as sampler_mod
    real = sampler_mod.sample_row

    def flaky(row, p, gen):
        if p.top_k == top_k:
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        return real(row, p, gen)

    monkeypatch.setattr(sampler_mod, "sample_row", flaky)


def load_benchmark(name: str):
    """A script of benchmarks/ as a module (the folder is not a package)."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def _progress_file(tmp_path, monkeypatch):
    """Exercise grading records progress (course/exercises/progress.py): tests never touch a learner's file."""
    monkeypatch.setenv("COURSE_PROGRESS_FILE", str(tmp_path / "progress.json"))
