"""Issue 19, engine side: one request cannot fail the others, the engine API's streams and threads, models
the engine does not compute are refused, and vLLM's small behaviours (stop text, partial characters,
arrival_time=0, the KV admission bound). Every wait is bounded: a hang fails the test instead."""
from __future__ import annotations

import json
import math
import shutil
import threading

import pytest
import torch
from safetensors.torch import load_file, save_file

from minimal_engine import LLM, SamplingParams
from minimal_engine.config import ModelConfig
from tests.conftest import fail_rows_with_top_k

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
PROMPTS = ["吾輩は猫である。", "東京の空は", "Hello, world!"]


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(llama_dir, dtype="float32", device="cpu", max_model_len=128)


@pytest.fixture(scope="module")
def alone(llm):
    return {p: llm.generate([p], GREEDY, use_tqdm=False)[0] for p in PROMPTS}


def assert_idle(llm):
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks and not llm.engine.has_unfinished_requests()


def bounded(fn, timeout_s: float = 60.0):
    """Run fn in a daemon thread; fail (instead of hanging) if it does not return in time."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:          # noqa: BLE001 - re-raised below
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), f"did not finish within {timeout_s} s (spinning or deadlocked)"
    if "error" in box:
        raise box["error"]
    return box["value"]


# ---- 1. one request's parameters cannot fail the others -------------------------------------------
@pytest.mark.parametrize("t", [1e-38, 1e-300, 5e-324, 0.0])
def test_tiny_temperature_is_greedy(llm, alone, t):
    out = llm.generate([PROMPTS[0]], SamplingParams(temperature=t, max_tokens=12, ignore_eos=True), use_tqdm=False)[0]
    assert out.token_ids == alone[PROMPTS[0]].token_ids and out.finish_reason == "length"


@pytest.mark.parametrize("field, value", [("temperature", math.nan), ("temperature", math.inf),
                                          ("top_p", math.nan), ("seed", 1 << 64), ("seed", True),
                                          ("stop_token_ids", "abc"), ("stop_token_ids", 5), ("stop_token_ids", [True]),
                                          ("ignore_eos", "false"), ("include_stop_str_in_output", 1)])
def test_bad_values_are_refused_when_built(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_a_failing_row_fails_its_request_alone(llm, alone, monkeypatch):
    fail_rows_with_top_k(monkeypatch, top_k=7)
    bad = SamplingParams(temperature=1.0, top_k=7, max_tokens=12, ignore_eos=True)
    outs = llm.generate(PROMPTS, [GREEDY, bad, GREEDY], use_tqdm=False)
    assert outs[1].finish_reason == "error" and "sampling failed" in outs[1].error
    assert outs[0].token_ids == alone[PROMPTS[0]].token_ids and outs[2].token_ids == alone[PROMPTS[2]].token_ids
    assert outs[0].error is None
    assert_idle(llm)


def test_a_failed_add_takes_back_the_earlier_prompts(llm, monkeypatch):
    real, calls = llm.engine.add_request, []

    def second_fails(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("boom")
        return real(*a, **k)

    monkeypatch.setattr(llm.engine, "add_request", second_fails)
    with pytest.raises(ValueError, match="boom"):
        llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert_idle(llm)                          # the first prompt is not left to run in the next call


# ---- 4. streams and threads on one LLM -----------------------------------------------------------------
def test_two_interleaved_streams_each_get_their_own_text(llm, alone):
    def run():
        a, b = llm.stream(PROMPTS[0], GREEDY), llm.stream(PROMPTS[1], GREEDY)
        texts, live = {0: "", 1: ""}, {0: a, 1: b}
        for _ in range(200):
            for k, s in list(live.items()):
                out = next(s)
                texts[k] += out.new_text
                if out.finished:
                    del live[k]
            if not live:
                return texts
        raise AssertionError("streams did not finish within 200 rounds")

    texts = bounded(run)
    assert texts[0] == alone[PROMPTS[0]].text and texts[1] == alone[PROMPTS[1]].text
    assert_idle(llm)


def test_stream_resumed_after_generate(llm, alone):
    def run():
        s = llm.stream(PROMPTS[0], GREEDY)
        text = next(s).new_text
        other = llm.generate([PROMPTS[1]], GREEDY, use_tqdm=False)[0]
        text += "".join(o.new_text for o in s)
        return text, other

    text, other = bounded(run)
    assert text == alone[PROMPTS[0]].text and other.token_ids == alone[PROMPTS[1]].token_ids
    assert_idle(llm)


def test_two_threads_generate_on_one_llm(llm, alone):
    results, errors = {}, []

    def worker(p):
        try:
            results[p] = llm.generate([p] * 3, GREEDY, use_tqdm=False)
        except Exception as e:                # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(p,), daemon=True) for p in PROMPTS[:2]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads) and not errors
    for p in PROMPTS[:2]:
        assert [o.token_ids for o in results[p]] == [alone[p].token_ids] * 3
    assert_idle(llm)


# ---- 5. models this engine does not compute are refused -----------------------------------------------
def edited_copy(src, dst, **changes):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("changes, field", [(dict(mlp_bias=True), "mlp_bias"), (dict(hidden_act="gelu"), "hidden_act")])
def test_unimplemented_config_fields_are_refused(tmp_path, llama_dir, changes, field):
    with pytest.raises(ValueError, match=f"config.json: {field}="):
        LLM(str(edited_copy(llama_dir, tmp_path / "m", **changes)), device="cpu")


def test_active_sliding_window_bounds_max_model_len(tmp_path, llama_dir):
    folder = edited_copy(llama_dir, tmp_path / "m", architectures=["MistralForCausalLM"], sliding_window=64)
    with pytest.raises(ValueError, match="sliding_window=64 is active.*max_model_len<=64"):
        LLM(str(folder), device="cpu")
    ok = LLM(str(folder), device="cpu", dtype="float32", max_model_len=64)    # within the window: exact
    assert len(ok.generate(["吾輩は"], GREEDY, use_tqdm=False)[0].token_ids) == 12


def test_sliding_window_rules():
    base = dict(architectures=["Qwen2ForCausalLM"], vocab_size=10, hidden_size=8, intermediate_size=16,
                num_hidden_layers=4, num_attention_heads=2, sliding_window=4096, max_window_layers=2)
    assert ModelConfig.from_dict({**base, "use_sliding_window": False}).sliding_window is None
    assert ModelConfig.from_dict({**base, "use_sliding_window": True}).sliding_window == 4096
    assert ModelConfig.from_dict({**base, "use_sliding_window": True, "max_window_layers": 4}).sliding_window is None
    mistral = {**base, "architectures": ["MistralForCausalLM"], "max_window_layers": None}
    assert ModelConfig.from_dict(mistral).sliding_window == 4096
    assert ModelConfig.from_dict({**mistral, "sliding_window": None}).sliding_window is None


def test_unexpected_checkpoint_tensors_are_refused(tmp_path, llama_dir):
    folder = edited_copy(llama_dir, tmp_path / "m")
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.0.mlp.down_proj.bias"] = torch.randn(64)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"tensors this engine does not compute: \['layers.0.mlp.down_proj.bias'\]"):
        LLM(str(folder), device="cpu")


def test_generation_config_adds_eos_ids(tmp_path, llama_dir, alone):
    folder = edited_copy(llama_dir, tmp_path / "m")
    first = alone[PROMPTS[0]].token_ids[2]
    eos = json.loads((folder / "config.json").read_text())["eos_token_id"]
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos, first]}))
    llm = LLM(str(folder), device="cpu", dtype="float32", max_model_len=128)
    out = llm.generate([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=12), use_tqdm=False)[0]
    k = alone[PROMPTS[0]].token_ids.index(first)
    assert out.finish_reason == "stop" and out.token_ids == alone[PROMPTS[0]].token_ids[:k + 1]


# ---- 9. smaller correctness points ------------------------------------------------------------------
def scripted(llm, monkeypatch, tokens: list[int]):
    """Make the model 'sample' exactly these tokens, in order (the runner is replaced; the engine is real)."""
    from minimal_engine.engine.outputs import ModelRunnerOutput
    it = iter(tokens)
    monkeypatch.setattr(llm.engine.runner, "run", lambda sched: ModelRunnerOutput(
        sampled={s.seq.request_id: [next(it)] for s in sched.scheduled if s.samples}))


def test_arrival_time_zero_is_kept(llm):
    rid = llm.engine.add_request("吾輩は", GREEDY, arrival_time=0.0)
    assert llm.engine.seqs[rid].metrics.arrival_time == 0.0
    llm.engine.abort_request(rid)


def test_kv_admission_counts_the_last_token_out(llama_dir):
    small = LLM(llama_dir, dtype="float32", device="cpu", block_size=4, num_kv_blocks=2)   # 8 slots
    out = small.generate([[1, 2, 3, 4]], SamplingParams(temperature=0, max_tokens=5, ignore_eos=True),
                         use_tqdm=False)[0]      # 9 tokens, the 9th never cached: fits
    assert len(out.token_ids) == 5
    with pytest.raises(ValueError, match="needs up to 9"):
        small.generate([[1, 2, 3, 4]], SamplingParams(temperature=0, max_tokens=6), use_tqdm=False)


def test_stop_token_text_is_left_out_unless_asked(llm, monkeypatch):
    tok = llm.tokenizer
    body, stop = tok.encode("Hello, world"), tok.encode("!")[-1]
    for include, expected in [(False, tok.decode(body)), (True, tok.decode(body + [stop]))]:
        scripted(llm, monkeypatch, body + [stop])
        p = SamplingParams(temperature=0, max_tokens=50, stop_token_ids=[stop], include_stop_str_in_output=include)
        out = llm.generate([[5, 6]], p, use_tqdm=False)[0]
        assert out.finish_reason == "stop" and out.token_ids == body + [stop]
        assert out.text == expected
    assert "!" not in tok.decode(body) and tok.decode(body + [stop]).endswith("!")


def test_character_cut_by_max_tokens_is_dropped(llm, monkeypatch):
    tok = llm.tokenizer
    ids = tok.encode("猫鬱")
    cut = next(n for n in range(1, len(ids)) if tok.decode(ids[:n]).endswith("\ufffd"))   # "鬱" is split
    scripted(llm, monkeypatch, ids[:cut])
    out = llm.generate([[5, 6]], SamplingParams(temperature=0, max_tokens=cut, ignore_eos=True), use_tqdm=False)[0]
    assert out.finish_reason == "length" and out.token_ids == ids[:cut]
    assert out.text == tok.decode(ids[:cut]).rstrip("\ufffd") and "\ufffd" not in out.text
    assert_idle(llm)
