"""Streaming engine API, abort, CLI, metrics summary, hub loading from a local cache."""
import json
import shutil
import subprocess
import sys

import pytest

from minimal_engine import LLM, SamplingParams
from minimal_engine.engine.metrics import percentile, summarize


def test_streaming_engine_and_abort(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu")
    engine = llm.engine
    p = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    a = engine.add_request("吾輩は", p)
    b = engine.add_request("東京の空は", p)
    streamed = {a: "", b: ""}
    steps = 0
    final = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            streamed[out.request_id] += out.new_text
            if out.finished:
                final[out.request_id] = out
        steps += 1
        if steps == 5:
            engine.abort_request(b)
    assert final[a].text == streamed[a] and len(final[a].token_ids) == 20
    assert b not in final
    bm = engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks


def test_summary_uses_vllm_formulas(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu")
    outs = llm.generate(["吾輩は", "東京の空は", "推論とは"], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True),
                        use_tqdm=False)
    res = summarize(outs, duration=2.0)
    assert res["completed"] == 3 and res["total_output_tokens"] == 18
    assert res["output_throughput"] == pytest.approx(9.0)
    assert res["total_token_throughput"] == pytest.approx((18 + res["total_input_tokens"]) / 2.0)
    tpots = sorted(o.metrics.tpot * 1000 for o in outs)
    assert res["median_tpot_ms"] == pytest.approx(tpots[1])
    assert res["tok_s_per_user"] == pytest.approx(1000 / tpots[1])
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)


def test_cli_generate_streams_and_prints_timings(llama_dir):
    r = subprocess.run([sys.executable, "-m", "minimal_engine", "generate", "--model", str(llama_dir),
                        "--max-tokens", "5", "吾輩は"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("吾輩は") and "TTFT" in r.stdout and "TPOT" in r.stdout and "tok/s" in r.stdout
    bad = subprocess.run([sys.executable, "-m", "minimal_engine", "generate", "--model", "/nonexistent/x", "a"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "does not exist" in bad.stderr


def test_hub_id_loads_from_local_hub_cache(tmp_path, llama_dir, monkeypatch):
    """The hub path, offline: a hub cache laid out as huggingface_hub writes it, HF_HUB_OFFLINE=1."""
    snap = tmp_path / "hub" / "models--course--tiny-llama" / "snapshots" / ("a" * 40)
    shutil.copytree(llama_dir, snap)
    (tmp_path / "hub" / "models--course--tiny-llama" / "refs").mkdir()
    (tmp_path / "hub" / "models--course--tiny-llama" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as c
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    llm = LLM("course/tiny-llama", dtype="float32", device="cpu")
    local = LLM(llama_dir, dtype="float32", device="cpu")
    p = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    assert llm.generate(["吾輩は"], p, use_tqdm=False)[0].token_ids == local.generate(["吾輩は"], p, use_tqdm=False)[0].token_ids
    with pytest.raises(FileNotFoundError, match="could not get model 'course/not-there'"):
        LLM("course/not-there", device="cpu")


def test_sharded_checkpoint(tmp_path, llama_dir):
    """A sharded checkpoint (model.safetensors.index.json) loads the same weights."""
    from safetensors.torch import load_file, save_file
    src = load_file(str(llama_dir / "model.safetensors"))
    shutil.copytree(llama_dir, tmp_path / "m")
    (tmp_path / "m/model.safetensors").unlink()
    names = sorted(src)
    half = len(names) // 2
    save_file({n: src[n] for n in names[:half]}, str(tmp_path / "m/model-00001-of-00002.safetensors"))
    save_file({n: src[n] for n in names[half:]}, str(tmp_path / "m/model-00002-of-00002.safetensors"))
    index = {"weight_map": {n: f"model-0000{1 if i < half else 2}-of-00002.safetensors" for i, n in enumerate(names)}}
    (tmp_path / "m/model.safetensors.index.json").write_text(json.dumps(index))
    p = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    a = LLM(str(tmp_path / "m"), dtype="float32", device="cpu").generate(["吾輩は"], p, use_tqdm=False)[0]
    b = LLM(llama_dir, dtype="float32", device="cpu").generate(["吾輩は"], p, use_tqdm=False)[0]
    assert a.token_ids == b.token_ids


def test_llm_stream_yields_pieces_that_add_up(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu")
    p = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    pieces = list(llm.stream("吾輩は", p))
    assert pieces[-1].finished and "".join(o.new_text for o in pieces) == pieces[-1].text
    assert pieces[-1].token_ids == llm.generate(["吾輩は"], p, use_tqdm=False)[0].token_ids
    gen = llm.stream("東京の空は", p)
    next(gen)
    gen.close()                                # the caller stops early: the request is aborted
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks and not llm.engine.has_unfinished_requests()


@pytest.mark.parametrize("command, usage", [("serve", "python -m minimal_engine.serve"),
                                            ("bench", "python -m minimal_engine.bench")])
def test_the_top_level_command_reaches_serve_and_bench(command, usage, capsys):
    """python -m minimal_engine serve|bench ... is the same as python -m minimal_engine.serve|bench ..."""
    from minimal_engine.__main__ import main
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0 and usage in capsys.readouterr().out
