"""`python -m minimal_engine.bench --profile`: the top operators of a decode step and where its time goes."""
import json

from minimal_engine import LLM
from minimal_engine.bench.__main__ import main as bench_main
from minimal_engine.bench.profile import profile_decode_steps


def test_profile_breakdown_adds_up(llama_dir):
    llm = LLM(llama_dir, dtype="float32", device="cpu")
    p = profile_decode_steps(llm, batch_size=2, prompt_len=20, num_steps=3)
    b = p["breakdown"]
    assert b["linear_ms"] > 0 and b["linear_GBps"] > 0 and b["operators_per_step"] > 10
    parts = b["linear_ms"] + b["attention_ms"] + b["kv_copies_ms"] + b["other_ops_ms"] + b["outside_ops_ms"]
    assert abs(parts - b["step_ms"]) <= max(0.05 * b["step_ms"], b["step_ms"] - parts)   # nothing counted twice
    assert "aten::" in p["table"] and "Self CPU" in p["table"]
    assert not llm.engine.has_unfinished_requests()       # the profiled requests are cleaned up


def test_cli_profile_prints_top_operators(llama_dir, tmp_path, capsys):
    rc = bench_main(["--model", str(llama_dir), "--dtype", "float32", "--device", "cpu", "--profile",
                     "--decode-step-batch", "1", "4", "--decode-step-prompt", "16", "--out", str(tmp_path),
                     "--name", "prof"])
    assert rc == 0
    out = capsys.readouterr().out
    assert out.count("decode step profile: batch") == 2 and "linear layers" in out and "aten::" in out
    assert "minimal_engine" not in out.split("decode step profile")[0]   # no workload table: profile only
    saved = json.loads((tmp_path / "prof_profile.json").read_text())
    assert [p["batch_size"] for p in saved["profiles"]] == [1, 4]
