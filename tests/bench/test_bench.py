"""Benchmarks: workloads, the offline sweep and its files, transformers baselines on the same requests,
the roofline readout, the CLI. Tiny models only."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
import torch

from conftest import load_benchmark
from minimal_engine import LLM, SamplingParams
from minimal_engine.bench import (dataset_requests, decode_step_time, format_median_ratios, hf_model_for,
                                  median_ratios, plot_throughput_vs_interactivity, random_requests, ratios,
                                  run_hf_static, run_offline, run_sweep, save_results)
from minimal_engine.bench.__main__ import main as bench_main
from minimal_engine.bench.roofline import measure_machine, step_cost, weight_counts

VLLM_FIELDS = ["completed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
               "output_throughput", "total_token_throughput"] + [
    f"{s}_{m}_ms" for s in ("mean", "median", "p99") for m in ("ttft", "tpot", "itl", "e2el")]


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(llama_dir, dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def machine():
    return measure_machine(quick=True)


def test_input_and_output_lengths_respect_the_range():
    reqs = random_requests(300, 100, 40, vocab_size=500, range_ratio=0.8, output_range_ratio=0.25, seed=3)
    ins, outs = [r.input_len for r in reqs], [r.output_len for r in reqs]
    assert min(ins) >= 80 and max(ins) <= 100 and min(ins) < 84 and max(ins) > 96
    assert min(outs) >= 10 and max(outs) <= 40
    assert all(0 <= t < 500 for r in reqs for t in r.prompt_ids)
    assert [r.prompt_ids for r in random_requests(5, 20, 4, 500, 0.5, seed=3)] == \
           [r.prompt_ids for r in random_requests(5, 20, 4, 500, 0.5, seed=3)]      # same seed, same requests
    with pytest.raises(ValueError, match="range ratio"):
        random_requests(2, 10, 4, 500, range_ratio=0)


def test_sweep_writes_json_csv_and_plot(llm, machine, tmp_path):
    rows = run_sweep(llm, [1, 2], input_len=24, output_len=6, range_ratio=0.5, num_prompts=4, machine=machine,
                     use_tqdm=False)
    assert [r["max_concurrency"] for r in rows] == [1, 2]
    for r in rows:
        assert all(r[k] == r[k] for k in VLLM_FIELDS)           # present and not NaN
        assert r["completed"] == 4 and r["bound_tpot_ms"] > 0 and r["bound_ttft_ms"] > 0
    paths = save_results(rows, tmp_path, "sweep", {"note": "test"})
    data = json.loads(paths["json"].read_text())
    assert data["meta"]["note"] == "test" and set(VLLM_FIELDS) <= set(data["results"][0])
    header = next(csv.reader(paths["csv"].open()))
    assert "output_throughput" in header and "median_tpot_ms" in header
    png = tmp_path / "sweep.png"
    plot_throughput_vs_interactivity(rows, png)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_max_concurrency_is_honoured(llm):
    reqs = random_requests(6, 16, 5, llm.model_config.vocab_size, seed=1)
    peak = 0
    original = llm.engine.step

    def spy():
        nonlocal peak
        peak = max(peak, len(llm.engine.seqs))
        return original()
    llm.engine.step = spy
    try:
        res = run_offline(llm, reqs, 2, use_tqdm=False, warmup=False)
    finally:
        del llm.engine.step
    assert peak == 2 and res["completed"] == 6 and res["total_output_tokens"] == 30
    with pytest.raises(ValueError, match="max_num_seqs"):
        run_offline(llm, reqs, 10_000, use_tqdm=False)


def test_hf_static_baseline_runs_the_same_requests(llm):
    reqs = random_requests(5, 20, 6, llm.model_config.vocab_size, range_ratio=0.5, output_range_ratio=0.5, seed=2)
    ours = run_offline(llm, reqs, 2, use_tqdm=False)
    theirs = run_hf_static(hf_model_for(llm), reqs, 2, use_tqdm=False)
    for k in ("completed", "total_input_tokens", "total_output_tokens"):
        assert ours[k] == theirs[k]
    assert theirs["backend"] == "hf_generate_static" and theirs["median_tpot_ms"] > 0
    rs = ratios([ours, theirs])
    assert rs[0]["baseline"] == "hf_generate_static" and rs[0]["output_throughput_ratio"] > 0


def test_synthetic_weights_are_copied_into_transformers(llama_dir, monkeypatch):
    monkeypatch.setattr("minimal_engine.llm.DEFAULT_MODEL", llama_dir)     # any tokenizer will do here
    small = LLM("synthetic:smollm2-135m", dtype="float32", device="cpu", max_model_len=64, num_kv_blocks=8)
    ids = [5, 77, 1234, 999, 42]
    ours = small.generate([ids], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    hf = hf_model_for(small)
    out = hf.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert out[0, len(ids):].tolist() == ours[0].token_ids


def test_dataset_requests(llm, tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "吾輩は猫である。"}\n\n{"prompt": "東京の空は", "output_len": 3}\n', encoding="utf-8")
    reqs = dataset_requests(f, 3, llm.tokenizer, output_len=5)
    assert [r.prompt_text for r in reqs] == ["吾輩は猫である。", "東京の空は", "吾輩は猫である。"]
    assert reqs[1].output_len == 3 and reqs[0].prompt_ids == llm.tokenizer.encode("吾輩は猫である。")
    f.write_text('{"text": "x"}\n')
    with pytest.raises(ValueError, match="prompt"):
        dataset_requests(f, 1, llm.tokenizer, 5)


def test_roofline_readout(llm, machine):
    assert machine["flops_fp32"] > 1e8 and machine["bandwidth"] > 1e8
    cfg = llm.model_config
    w = weight_counts(cfg)
    one = step_cost(cfg, 4, decode_contexts=[100], machine=machine)
    many = step_cost(cfg, 4, decode_contexts=[100] * 8, machine=machine)
    assert one["weight_bytes"] >= (w["layers"] + w["lm_head"]) * 4
    assert many["weight_bytes"] - one["weight_bytes"] == 7 * cfg.hidden_size * 4      # weights read once per step
    assert many["kv_bytes"] == 8 * one["kv_bytes"] and many["flops"] == pytest.approx(8 * one["flops"])
    assert one["t_bound"] == max(one["t_compute"], one["t_memory"])
    prefill = step_cost(cfg, 4, prefill_lens=[64], machine=machine)
    assert prefill["tokens"] == 64 and prefill["flops"] > 10 * one["flops"]
    d = decode_step_time(llm, 2, 16, num_steps=3)
    assert d["median_step_ms"] > 0 and not llm.engine.has_unfinished_requests()


def test_cli_with_hf_baseline(llama_dir, tmp_path, capsys):
    rc = bench_main(["--model", str(llama_dir), "--dtype", "float32", "--device", "cpu", "--input-len", "16",
                     "--output-len", "4", "--max-concurrency", "2", "--num-prompts", "4", "--compare", "hf",
                     "--repeats", "2", "--decode-step-batch", "2", "--no-tqdm", "--out", str(tmp_path),
                     "--name", "cli"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "hf_generate_static" in text and "engine / baseline" in text and "decode step" in text
    assert "median over repeats" in text
    data = json.loads((tmp_path / "cli.json").read_text())
    assert [(r["backend"], r["repeat"]) for r in data["results"]] == [   # alternating: engine, baseline, ...
        ("minimal_engine", 0), ("hf_generate_static", 0), ("minimal_engine", 1), ("hf_generate_static", 1)]
    assert [r["repeat"] for r in data["meta"]["ratios"]] == [0, 1]
    assert data["meta"]["median_ratios"][0]["runs"] == 2
    assert (tmp_path / "cli.csv").exists() and (tmp_path / "cli.png").exists()


def test_median_ratios_pair_runs_of_the_same_repeat(capsys):
    rows = []
    for rep, (ours, theirs) in enumerate([(300, 100), (200, 100), (250, 50)]):   # ratios 3, 2, 5
        for backend, tput in (("minimal_engine", ours), ("hf_generate_static", theirs)):
            rows.append({"backend": backend, "max_concurrency": 32, "repeat": rep, "output_throughput": tput,
                         "median_ttft_ms": 10.0, "median_tpot_ms": 1000 / tput})
    rs = ratios(rows)
    assert [r["output_throughput_ratio"] for r in rs] == [3.0, 2.0, 5.0]   # not 300 / 50 across repeats
    (med,) = median_ratios(rs)
    assert med["runs"] == 3 and med["output_throughput_ratio"] == 3.0
    assert (med["output_throughput_min"], med["output_throughput_max"]) == (2.0, 5.0)
    assert abs(med["median_tpot_ratio"] - 1 / 3) < 1e-12
    assert median_ratios(rs[:2])[0]["output_throughput_ratio"] == 2.5      # even count: mean of the middle two
    assert "3.00x (2.00-5.00)" in format_median_ratios([med])
    assert bench_main(["--model", "x", "--repeats", "0"]) == 2
    assert "--repeats must be >= 1, got 0" in capsys.readouterr().err


def test_engine_modules_do_not_import_matplotlib():
    code = ("import sys, minimal_engine, minimal_engine.bench, minimal_engine.bench.roofline, minimal_engine.serve.app; "
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("against", ["earlier", "plain"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_matvec_ab_switches_every_linear_and_keeps_the_tokens(llama_dir, dtype, against):
    """benchmarks/matvec_ab.py's baselines (the Linear paths the engine took before; plain F.linear) change the
    kernel, not the model: every Linear switched, greedy tokens unchanged. 'earlier' in bf16 needs oneDNN's
    pre-packed bf16 kernel and is refused with the reason where this CPU cannot run it."""
    from minimal_engine.model.cpu_linears import PLAIN, PREPACKED, CpuLinear, probe
    ab = load_benchmark("matvec_ab")
    now, before = (LLM(llama_dir, dtype=dtype, device="cpu") for _ in range(2))
    lins = [m for m in before.engine.runner.model.modules() if isinstance(m, torch.nn.Linear)]
    assert lins and all(isinstance(m, CpuLinear) for m in lins)          # the engine's kernels are in
    if against == "earlier" and dtype == "bfloat16" and probe(PREPACKED, torch.bfloat16):
        with pytest.raises(SystemExit, match="does not run here"):
            ab.use_baseline(before, against)
        pytest.skip(f"oneDNN's bf16 pre-packing does not run on this CPU: {probe(PREPACKED, torch.bfloat16)}")
    assert ab.use_baseline(before, against) == len(lins)
    lins = [m for m in before.engine.runner.model.modules() if isinstance(m, torch.nn.Linear)]
    want = PLAIN if against == "plain" or dtype == "float32" else PREPACKED
    assert all(m.one_row == m.more_rows == want for m in lins)
    p = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    prompt = [5, 17, 33, 100, 7, 9]
    assert now.generate([prompt], p, use_tqdm=False)[0].token_ids == before.generate([prompt], p, use_tqdm=False)[0].token_ids


def test_batch1_breakdown_restores_every_part(llama_dir):
    """benchmarks/batch1_breakdown.py takes parts out for a measurement and puts them back: the model's greedy
    tokens after a breakdown are those from before, and every part's stand-in changes the output while it is in."""
    bd = load_benchmark("batch1_breakdown")
    llm = LLM(llama_dir, dtype="float32", device="cpu")
    p = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    prompt = [5, 17, 33, 100, 7, 9]
    before = llm.generate([prompt], p, use_tqdm=False)[0].token_ids
    for part in bd.PARTS:
        with bd.without(part, llm.engine.runner.model):
            assert llm.generate([prompt], p, use_tqdm=False)[0].token_ids != before, part
    out = bd.breakdown(llm, steps=2, rounds=1)
    assert set(out) == {"step_ms", *bd.PARTS} and out["step_ms"] > 0
    assert llm.generate([prompt], p, use_tqdm=False)[0].token_ids == before
    assert llm.engine.block_manager.num_free_blocks == llm.engine.block_manager.num_blocks
    with pytest.raises(ValueError, match="unknown part"):
        with bd.without("lm_head", llm.engine.runner.model):
            pass


def test_matvec_kernels_measures_every_kernel():
    mk = load_benchmark("matvec_kernels")
    assert mk.layer_shapes(dict(hidden_size=8, intermediate_size=12, head_dim=2, num_heads=4, num_kv_heads=2)) == \
        [(16, 8), (8, 8), (24, 8), (8, 12)]
    from minimal_engine.model.cpu_linears import PREPACKED, probe, probe_int8pack
    r = mk.kernel_speeds([(32, 16), (16, 32)], layers=2, reps=2)
    assert r.pop("weight_bytes") == 2 * 2 * (32 * 16 * 2)
    want = {"plain_f_linear", "aten_mv", "f_linear_onednn_off", "sum_of_one_buffer"}
    want |= {"onednn_prepacked"} if probe(PREPACKED, torch.bfloat16) is None else set()   # only where it runs
    want |= {"int8pack_mm"} if probe_int8pack(torch.bfloat16) is None else set()
    assert set(r) == want and all(v > 0 for v in r.values())
    r = mk.kernel_speeds([(32, 16)], layers=1, reps=2, dtype=torch.float32)
    assert r.pop("weight_bytes") == 32 * 16 * 4
    want = {"plain_f_linear", "sum_of_one_buffer"} | ({"onednn_prepacked"} if probe(PREPACKED, torch.float32) is None
                                                      else set())
    assert set(r) == want and all(v > 0 for v in r.values())


def test_lone_decode_ab_forces_each_path(llama_dir):
    ab = load_benchmark("lone_decode_ab")
    from minimal_engine.model import decode_groups
    e = ab.engines(str(llama_dir), "float32")
    p = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    prompt = [5, 17, 33, 100, 7, 9]
    tokens = {}
    for name, llm in e.items():
        with ab.forced(name):
            assert decode_groups.lone_decode_sdpa(False, 10 ** 6) == (name == "sdpa")
            tokens[name] = llm.generate([prompt], p, use_tqdm=False)[0].token_ids
    assert decode_groups.lone_decode_sdpa(False, 1) is False          # the rule is back afterwards (no GQA here)
    assert tokens["sdpa"] == tokens["masked"]


def test_cpu_dtypes_measures_both_dtypes_with_their_kernels(llama_dir, capsys):
    """benchmarks/cpu_dtypes.py: bf16 and fp32 in one process, the kernels each took and the CPU's capability
    printed next to the figures (what a learner needs to read a BF16 row that differs from the saved one)."""
    cd = load_benchmark("cpu_dtypes")
    assert cd.main(["--model", str(llama_dir), "--rounds", "1", "--prefill-len", "16", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert f"CPU capability {torch.backends.cpu.get_cpu_capability()}" in out
    assert "bfloat16: bf16: 1 row" in out and "float32: fp32: 1 row" in out
    assert "bf16 / fp32: TPOT" in out and out.count("batch-1 TPOT median") == 2
    assert cd.cpu_flags() != ""


def test_mixed_profile_sorts_steps_by_kind(llama_dir):
    """benchmarks/mixed_profile.py: every forward is logged; prompt tokens land in the steps with prefill, the other
    tokens in decode rows; the log unhooks cleanly; transformers' static batches are counted with their padding."""
    from minimal_engine.bench.offline import run_offline
    from minimal_engine.bench.workload import BenchRequest
    mp = load_benchmark("mixed_profile")
    llm = LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=4)
    reqs = [BenchRequest(list(range(10, 50)), 6), BenchRequest(list(range(60, 70)), 4),
            BenchRequest(list(range(80, 105)), 5)]
    model = llm.engine.runner.model
    p = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    before = llm.generate([reqs[0].prompt_ids], p, use_tqdm=False)[0].token_ids
    with mp.StepLog(model) as log:
        run_offline(llm, reqs, 3, use_tqdm=False, warmup=False)
    assert "forward" not in vars(model)                                 # unhooked
    assert llm.generate([reqs[0].prompt_ids], p, use_tqdm=False)[0].token_ids == before
    s = mp.summarize(log.rows)
    assert s["with_prefill"]["prefill_tokens"] == 40 + 10 + 25
    assert s["decode_only"]["rows"] + s["with_prefill"]["decode_rows"] == (6 - 1) + (4 - 1) + (5 - 1)
    assert s["steps"] == len(log.rows) == s["decode_only"]["steps"] + s["with_prefill"]["steps"]
    assert s["decode_only"]["padded_over_real_context"] >= 1 and s["forward_s"] > 0
    assert mp.static_batches(reqs, 2) == {"prompt_tokens": 2 * 40 + 25, "decode_rows": 2 * 6 + 5,
                                          "useful_prompt_tokens": 75, "useful_output_tokens": 15}
    assert llm.engine.block_manager.num_free_blocks == llm.engine.block_manager.num_blocks


def test_quick_bandwidth_buffers_exceed_the_last_level_cache(tmp_path, monkeypatch):
    """Blind reading 2026-12-07b ch02 second #6: quick mode's 64 MB sum and 8 MB matvec fit (or nearly fit) a 32 MiB
    L3 and measured the cache; the buffers are now at least 128 MB and 4x the largest cache sysfs reports."""
    from minimal_engine.bench import roofline
    for i, (level, size) in enumerate((("1", "32K"), ("2", "1024K"), ("3", "32768K"))):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    assert roofline.last_level_cache_bytes(str(tmp_path)) == 32 << 20
    assert roofline.last_level_cache_bytes(str(tmp_path / "none")) is None
    monkeypatch.setattr(roofline, "last_level_cache_bytes", lambda: 32 << 20)
    assert roofline.bandwidth_buffer_mb(True) == 128 and roofline.bandwidth_buffer_mb(False) == 128
    monkeypatch.setattr(roofline, "last_level_cache_bytes", lambda: 256 << 20)     # a large L3 (EPYC with 3D V-Cache)
    assert roofline.bandwidth_buffer_mb(True) == 1024
    monkeypatch.setattr(roofline, "last_level_cache_bytes", lambda: None)          # no sysfs: the floor
    assert roofline.bandwidth_buffer_mb(True) == roofline.QUICK_MIN_MB
    n = roofline.matvec_size(128)
    assert n % 256 == 0 and n * n * 2 >= 128 << 20 and (n - 256) ** 2 * 2 < 128 << 20
