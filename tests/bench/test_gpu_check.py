"""`make gpu-check` in its tiny CPU mode: the script runs end to end and its JSON says what it checked."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_tiny_mode(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--tiny", "--out", str(tmp_path)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["mode"] == "tiny" and report["device"] == "cpu" and report["ok"] and report["stopped_at"] is None
    est = report["estimates"]                  # the H200 time estimate (gpu_check_budget.py) beside the wall time
    assert est["gpu"] == "H200" and est["total_estimate_s"] > 0 and len(est["sections"]) == 7
    assert all(s["steps"] > 0 and 0 < s["roofline_s"] < s["estimate_s"] for s in est["sections"].values())

    # 1. correctness: every architecture, both dtypes, every case, and the default model; all equal
    cases = report["correctness"]["cases"]
    seen = {(c["model"], c["dtype"], c["case"]) for c in cases}
    for model in ("llama-tiny", "qwen2-tiny", "qwen3-tiny"):
        for dtype in ("float32", "bfloat16"):
            for case in ("alone", "mixed_batch", "chunked_prefill", "preemption", "no_cuda_graphs",
                         "gather_attention"):
                assert (model, dtype, case) in seen
    assert {c["case"] for c in cases if c["model"] == "default_model"} >= {"alone", "mixed_batch"}
    assert all(c["ok"] for c in cases)
    assert all(c["exact_sequences"] == c["sequences"] for c in cases if c["dtype"] == "float32")
    assert all(c["preemptions"] > 0 for c in cases if c["case"] == "preemption")

    # 2. speed: both shapes at batch 1 with a bound, decode steps, nano-vllm's workload with three backends
    speed = report["speed"]
    assert [r["shape"] for r in speed["batch1"]] == ["llama-3.2-1b", "qwen3-0.6b"]
    for r in speed["batch1"]:
        assert r["engine_tpot_ms"] > 0 and r["hf_tpot_ms"] > 0 and r["bound_ms"] > 0
        assert abs(r["tpot_over_bound"] - r["engine_tpot_ms"] / r["bound_ms"]) < 1e-9
    assert {(d["shape"], d["batch_size"]) for d in speed["decode_steps"]} == \
        {(s, b) for s in ("llama-3.2-1b", "qwen3-0.6b") for b in (1, 4)}
    assert all(d["median_step_ms"] > 0 and d["bound_ms"] > 0 for d in speed["decode_steps"])
    nano = speed["nano_vllm"]
    assert nano["requests"] == 8 and nano["engine"]["output_tok_s"] > 0
    assert nano["output_tokens"] > 0 and nano["input_tokens"] > 0
    assert "output_tok_s" in nano["hf_generate_static"] and "engine_over_hf_generate_static" in nano
    assert "output_tok_s" in nano["hf_generate_batch"] or "error" in nano["hf_generate_batch"]
    assert report["machine"]["bw_copy"] > 0
    assert {t["target"].split(" ")[0] for t in report["targets"]} >= {"batch-1", "nano-vllm"}

    # 3. memory: the pool's size and the budget it came from
    mem = report["memory"]
    assert mem["ok"] and mem["num_blocks"] > 0 and 0 < mem["kv_pool_GB"] <= mem["budget_GB"]

    md = (tmp_path / "gpu_check.md").read_text()
    for heading in ("## 1. Correctness", "## 2. Speed", "## 3. Memory"):
        assert heading in md


def test_gpu_check_budget_counts_the_steps_gpu_check_runs():
    """Continuous batching decodes every request until its own end; static batches run to the batch's longest."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check_budget as b
    from minimal_engine.bench import random_requests
    reqs = random_requests(4, 8, 8, 100, 0.5, 0.5, seed=0)
    steps, prefills = b.continuous(reqs)
    assert sum(map(len, steps)) == sum(r.output_len - 1 for r in reqs) and prefills == [r.input_len for r in reqs]
    steps, prefills = b.static(reqs, 2)
    assert len(steps) == sum(max(r.output_len for r in reqs[i:i + 2]) - 1 for i in (0, 2))
    assert b.main(["--overhead-ms", "0"]) == 0


def test_gpu_check_refuses_without_a_gpu(tmp_path):
    import torch
    if torch.cuda.is_available():
        return
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--out", str(tmp_path)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--tiny" in r.stderr


def test_gpu_check_stops_at_the_first_failed_section(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check
    bad = {"model": "x", "dtype": "float32", "case": "alone", "ok": False, "exact_sequences": 0, "sequences": 1,
           "max_tie_gap": 1.0}
    monkeypatch.setattr(gpu_check, "check_correctness",
                        lambda *a: {"ok": False, "cases": [bad], "bf16_tie_atol": gpu_check.BF16_TIE_ATOL})
    monkeypatch.setattr(gpu_check, "check_speed", lambda *a: pytest.fail("speed must not run after a failure"))
    assert gpu_check.main(["--tiny", "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert not report["ok"] and report["stopped_at"] == "correctness" and "speed" not in report
    assert "FAILED at correctness" in (tmp_path / "gpu_check.md").read_text()


def test_bf16_tie_tolerance_accepts_ties_only(llama_dir):
    """A differing bf16 sequence passes only when transformers itself scores the engine's tokens as near ties."""
    import torch
    import transformers
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check
    hf = transformers.AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).eval()
    prompt = [5, 17, 33, 100]
    ref = gpu_check.hf_greedy(hf, prompt, 8)
    case = {"model": "m", "dtype": "bfloat16", "case": "alone"}
    assert gpu_check.compare(case, [ref], [ref], hf, [prompt], "bfloat16")["ok"]
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + ref])).logits[0, len(prompt) - 1]
    worst = int(logits.argmin())                      # the least likely token: far from a tie
    wrong = [worst] + ref[1:]
    r = gpu_check.compare(case, [wrong], [ref], hf, [prompt], "bfloat16")
    assert not r["ok"] and r["max_tie_gap"] > 1 and r["exact_sequences"] == 0
    assert not gpu_check.compare(dict(case, dtype="float32"), [wrong], [ref], hf, [prompt], "float32")["ok"]
