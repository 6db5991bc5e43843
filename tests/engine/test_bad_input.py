"""Every bad input gets an error that names the problem and what is allowed; the LLM stays usable."""
import shutil

import pytest
import torch

from minimal_engine import LLM, SamplingParams

OK = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(llama_dir, dtype="float32", device="cpu", max_model_len=64)


def still_works(llm):
    out = llm.generate(["吾輩は"], OK, use_tqdm=False)[0]
    assert len(out.token_ids) == 4
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks and not llm.engine.has_unfinished_requests()


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_tokens=0), "max_tokens must be an integer >= 1"),
    (dict(temperature=-0.5), "temperature must be >= 0"),
    (dict(top_p=0.0), r"top_p must be in \(0, 1\]"),
    (dict(top_p=1.5), r"top_p must be in \(0, 1\]"),
    (dict(top_k=-2), "top_k must be -1"),   # 0 reads as all tokens, as vLLM (round 3 L11)
    (dict(top_k=2.5), "top_k must be -1"),
])
def test_bad_sampling_params(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("prompts, match", [
    ([""], "prompt is empty"),
    ([[]], "prompt is empty"),
    ([list(range(1, 70))], "max_model_len is 64"),
    ([[1, 2, 10**6]], r"token ids must be integers in \[0, "),
    ([[1, -1]], r"token ids must be integers in \[0, "),
    ([], "prompts is empty"),
])
def test_bad_prompts_fail_before_anything_starts(llm, prompts, match):
    good_then_bad = ["吾輩は"] + prompts if prompts else prompts
    with pytest.raises(ValueError, match=match):
        llm.generate(good_then_bad, OK, use_tqdm=False)
    assert not llm.engine.has_unfinished_requests()   # the good prompt was not started either
    still_works(llm)


def test_params_list_length_must_match(llm):
    with pytest.raises(ValueError, match="2 prompts but 3 SamplingParams"):
        llm.generate(["a", "b"], [OK, OK, OK], use_tqdm=False)
    still_works(llm)


def test_missing_folder_and_missing_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LLM(str(tmp_path / "nowhere"), device="cpu")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        LLM(str(tmp_path), device="cpu")


def test_unsupported_architecture(tmp_path, llama_dir):
    import json
    shutil.copytree(llama_dir, tmp_path / "m")
    cfg = json.loads((tmp_path / "m/config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (tmp_path / "m/config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="unsupported architecture.*LlamaForCausalLM.*Qwen3ForCausalLM"):
        LLM(str(tmp_path / "m"), device="cpu")


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupted_safetensors(tmp_path, llama_dir, damage):
    shutil.copytree(llama_dir, tmp_path / "m")
    f = tmp_path / "m/model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(ValueError, match="cannot read weights from .*model.safetensors.*truncated or corrupted"):
        LLM(str(tmp_path / "m"), device="cpu")


def test_float16_on_cpu_is_refused(llama_dir):
    with pytest.raises(ValueError, match="float16 is not allowed on the CPU.*bfloat16"):
        LLM(llama_dir, dtype="float16", device="cpu")
    with pytest.raises(ValueError, match="dtype must be one of"):
        LLM(llama_dir, dtype="int8", device="cpu")


def test_kv_pool_too_small_for_one_request(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu", block_size=4, num_kv_blocks=2)
    with pytest.raises(ValueError, match="the KV pool holds 8 tokens .* needs up to 13"):
        llm.generate([list(range(1, 11))], OK, use_tqdm=False)
    out = llm.generate([[1, 2]], OK, use_tqdm=False)[0]       # a request that fits still runs
    assert len(out.token_ids) == 4


def test_bad_engine_settings(llama_dir):
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        LLM(llama_dir, device="cpu", block_size=0)
    with pytest.raises(ValueError, match="exceeds the model's limit of 256"):
        LLM(llama_dir, device="cpu", max_model_len=10_000)
    with pytest.raises(ValueError, match=r"device must be .* \(available here: cpu"):
        LLM(llama_dir, device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"'cuda' was asked for but (this PyTorch is a CPU build|no CUDA GPU was "
                                             r"found); available here: cpu"):
            LLM(llama_dir, device="cuda")
    if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        with pytest.raises(ValueError, match="Apple's MPS is not available; available here: cpu"):
            LLM(llama_dir, device="mps")


def test_seed_at_the_int64_edge_with_n_greater_than_one_offline(llm):
    """Issue 29 #10: the per-choice seeds (seed + i) left int64 and failed deep in torch."""
    from minimal_engine.engine.requests import child_seed
    assert child_seed(2 ** 63 - 1, 1) == -(2 ** 63) and child_seed(5, 2) == 7 and child_seed(None, 3) is None
    out = llm.generate(["吾輩は"], SamplingParams(max_tokens=2, n=3, seed=2 ** 63 - 1))
    assert len(out[0].outputs) == 3


@pytest.mark.parametrize("stop", [123, {"a": 1}, {"a"}])
def test_stop_of_the_wrong_type_is_a_clear_error(stop):
    """Issue 29 #13: stop=123 raised a TypeError from list(); a dict was silently read as its keys."""
    with pytest.raises(ValueError, match="stop must be a string or a list"):
        SamplingParams(stop=stop)


def test_chat_and_generate_refuse_the_wrong_container(llm):
    """Issue 29 #13: llm.chat("hello") templated each character; llm.generate(None) raised from list(None)."""
    with pytest.raises(ValueError, match="messages must be a conversation"):
        llm.chat("hello")
    with pytest.raises(ValueError, match="prompts must be"):
        llm.generate(None)


def test_engine_config_is_frozen():
    """An engine's settings are fixed when it is built: a lab that wants another chunk budget builds another
    engine (course/labs/lab09.py), instead of rewriting a live config under the scheduler."""
    import dataclasses

    from minimal_engine.config import EngineConfig
    cfg = EngineConfig(max_num_batched_tokens=64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_num_batched_tokens = 16
    assert dataclasses.replace(cfg, max_num_batched_tokens=16).max_num_batched_tokens == 16
    with pytest.raises(ValueError, match="attention_backend"):
        EngineConfig(attention_backend="flash")
