"""Chapter 7: tensor parallelism (minimal_engine/features/tensor_parallel/model.py, worker.py, comm.py, sharding.py).

Greedy tokens of tensor_parallel_size=N equal those of N=1 in float32 (default model, random Llama/Qwen
models with GQA, an uneven head split, replicated KV heads); the all-reduce bytes follow the formula; workers
stop on close, at interpreter exit, after an error and when the parent dies; bad sizes are refused. Every
wait is bounded, and the last test checks that no worker process is left."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.features.tensor_parallel import model as distributed
from minimal_engine.calculators import tp_allreduce_bytes
from minimal_engine.features.tensor_parallel.sharding import check_tp_size, head_ranges, split_sizes

ROOT = Path(__file__).resolve().parents[2]
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
PROMPTS = ["吾輩は猫である。", "山路を登りながら、こう考えた。", "今日は"]


def tokens(llm, prompts=PROMPTS, params=GREEDY):
    return [o.token_ids for o in llm.generate(prompts, params, use_tqdm=False)]


def gone(pids, within=20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module", autouse=True)
def no_worker_left():
    """After every test of this file (and its fixtures' teardown): no spawned worker is still running."""
    yield
    import gc
    gc.collect()
    children = [c for c in psutil.Process().children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE]
    left = [c for c in children if "spawn_main" in " ".join(c.cmdline())]   # not the resource tracker
    assert gone([c.pid for c in left]), [(c.pid, c.name(), c.cmdline()) for c in left]


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch):
    monkeypatch.setattr(distributed, "TIMEOUT_S", 60.0)   # a hang becomes a failure within a minute


@pytest.fixture(scope="module")
def default_pair():
    one = LLM(dtype="float32")
    two = LLM(dtype="float32", tensor_parallel_size=2)
    yield one, two
    two.close()


def test_head_split_rules():
    assert split_sizes(5, 2) == [3, 2]
    assert [head_ranges(5, 5, 2, r) for r in (0, 1)] == [(range(0, 3), range(0, 3)), (range(3, 5), range(3, 5))]
    # GQA 8 query / 2 KV heads: whole groups per rank; with 4 ranks each KV head is replicated on two ranks
    assert [head_ranges(8, 2, 2, r) for r in (0, 1)] == [(range(0, 4), range(0, 1)), (range(4, 8), range(1, 2))]
    assert [head_ranges(8, 2, 4, r)[1] for r in range(4)] == [range(0, 1), range(0, 1), range(1, 2), range(1, 2)]
    for bad in (0, -1, 3, 6, 16, 1.5):
        with pytest.raises(ValueError, match="tensor_parallel_size"):
            check_tp_size(8, 2, bad)


def test_default_model_same_greedy_tokens_and_comm_formula(default_pair):
    one, two = default_pair
    assert one.engine.comm_stats is None
    before = two.engine.comm_stats
    assert tokens(two) == tokens(one)
    stats = two.engine.comm_stats
    cfg = one.model_config
    # every token that went through the model: the prompts, then each output token but the last
    computed = sum(len(one.tokenizer.encode(p)) + GREEDY.max_tokens - 1 for p in PROMPTS)
    assert stats["all_reduces"] - before["all_reduces"] == 2 * cfg.num_layers * (stats["steps"] - before["steps"])
    assert stats["bytes"] - before["bytes"] == tp_allreduce_bytes(cfg.num_layers, cfg.hidden_size, computed, 4)
    assert stats["seconds"] > 0


def test_every_rank_records_its_all_reduces_on_one_clock(default_pair):
    """trace_calls (lab 7's per-rank measurement): each rank's (entry, exit, bytes) for the same calls in order."""
    _, two = default_pair
    two.model.trace_calls(True)
    two.generate(["今日は"], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True), use_tqdm=False)
    traces = two.model.trace_calls(False)
    layers = two.model_config.num_layers
    assert len(traces) == 2 and len(traces[0]) == len(traces[1]) == 3 * 2 * layers   # 3 steps
    for r0, r1 in zip(*traces):
        assert r0[2] == r1[2] and r0[0] <= r0[1] and r1[0] <= r1[1]
        assert r0[0] <= r1[1] and r1[0] <= r0[1]          # one call: neither left before the other entered
    assert two.model.comm.trace is None                     # recording stopped


def test_each_rank_holds_its_own_heads(default_pair):
    _, two = default_pair
    pool = two.engine.runner.kv_caches[0][0]                  # rank 0: 3 of the default model's 5 KV heads
    assert pool.shape[0] == 3
    attn = two.engine.runner.model.net.layers[0].self_attn
    assert attn.qkv_proj.weight.shape == ((3 + 2 * 3) * 64, 320)   # 3 query, 3 K and 3 V heads of 64
    assert attn.o_proj.linear.weight.shape == (320, 3 * 64)          # input rows: the same 3 heads


@pytest.mark.parametrize("tp", [2, 4])
def test_random_gqa_models_same_greedy_tokens(tiny_model, tp):
    """Llama, Llama 3 RoPE, Qwen2 (q/k/v bias) and Qwen3 (q/k norms), 4 query and 2 KV heads: TP=2 splits
    the KV heads, TP=4 replicates each on two ranks."""
    arch, folder = tiny_model
    if tp == 4 and arch != "qwen3":
        pytest.skip("one replicated-KV case is enough (each TP=4 start spawns three workers)")
    one = LLM(str(folder), dtype="float32")
    prompts = [[5, 9, 17, 3, 40], [7] * 19, list(range(30, 60))]
    with_tp = LLM(str(folder), dtype="float32", tensor_parallel_size=tp, max_num_batched_tokens=16)
    try:
        assert tokens(with_tp, prompts) == tokens(one, prompts)      # chunked prefill included (budget 16)
    finally:
        with_tp.close()


def test_synthetic_llama_shape_same_greedy_tokens():
    """A real shape (llama-125m: 12 query / 4 KV heads, 12 layers, random weights), TP=2 vs 1, float32."""
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    one = LLM("synthetic:llama-125m", dtype="float32", max_model_len=128, num_kv_blocks=32)
    expected = tokens(one, PROMPTS[:2], params)
    del one
    two = LLM("synthetic:llama-125m", dtype="float32", max_model_len=128, num_kv_blocks=32, tensor_parallel_size=2)
    try:
        assert tokens(two, PROMPTS[:2], params) == expected
    finally:
        two.close()


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="5 query heads and 5 KV heads"):
        LLM(dtype="float32", tensor_parallel_size=6)
    with pytest.raises(ValueError, match="integer >= 1"):
        LLM(dtype="float32", tensor_parallel_size=0)
    for kw in (dict(quantization="int8"), dict(kv_cache_dtype="fp8")):     # chapter 6's formats are TP=1 only
        with pytest.raises(ValueError, match="unquantized weights and KV only"):
            LLM(dtype="float32", tensor_parallel_size=2, **kw)


def test_close_stops_the_workers():
    threads = torch.get_num_threads()
    llm = LLM(dtype="float32", tensor_parallel_size=2)
    assert llm.engine.runner.model.worker_threads == [max(1, threads // 2)]   # the cores are shared, not doubled
    tokens(llm)
    assert torch.get_num_threads() == threads                                # the caller's setting is kept
    pids = llm.engine.runner.model.worker_pids
    assert all(psutil.pid_exists(p) for p in pids)
    llm.close()
    assert gone(pids)
    with pytest.raises(RuntimeError, match="closed"):
        tokens(llm)
    llm.close()                                               # twice is fine


def test_a_failing_worker_raises_a_clear_error():
    llm = LLM(dtype="float32", tensor_parallel_size=2)
    model = llm.engine.runner.model
    pids = model.worker_pids
    model.inject_failure(1)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="(?s)tensor parallelism failed.*worker rank 1.*injected failure"):
        tokens(llm)
    assert time.monotonic() - t0 < 60 and gone(pids)
    with pytest.raises(RuntimeError, match="tensor parallelism failed"):  # later calls say so too
        tokens(llm)
    assert llm.engine.block_manager.num_free_blocks == llm.engine.block_manager.num_blocks   # nothing leaked


def test_a_killed_worker_raises_a_clear_error():
    llm = LLM(dtype="float32", tensor_parallel_size=2)
    pid = llm.engine.runner.model.worker_pids[0]
    os.kill(pid, signal.SIGKILL)
    assert gone([pid])
    with pytest.raises(RuntimeError, match=r"worker rank 1.*exit code -9"):
        tokens(llm)


SCRIPT = """
import sys, time
from minimal_engine import LLM, SamplingParams
if __name__ == "__main__":
    llm = LLM(dtype="float32", tensor_parallel_size=2)
    llm.generate(["今日は"], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    print(*llm.engine.runner.model.worker_pids, flush=True)
    if sys.argv[1] == "sleep":
        time.sleep(120)
"""


def run_script(tmp_path, mode):
    path = tmp_path / "tp_script.py"
    path.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, str(path), mode], stdout=subprocess.PIPE, text=True, env=env)


def test_workers_stop_at_interpreter_exit(tmp_path):
    proc = run_script(tmp_path, "exit")                       # no close(): the finalizer must do it
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert gone([int(p) for p in out.split()])


def test_workers_stop_when_the_parent_dies(tmp_path):
    proc = run_script(tmp_path, "sleep")
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert pids and all(psutil.pid_exists(p) for p in pids)
        proc.kill()                                           # SIGKILL: no finalizer, no atexit
        proc.wait(30)
        assert gone(pids)
    finally:
        proc.kill()
        proc.wait(30)


def test_speculative_decoding_under_tp_keeps_greedy_tokens():
    """Chapter 8 on top of chapter 7: n-gram drafts verified by the TP=2 model give TP=1's greedy tokens."""
    prompts = ["吾輩は猫である。名前はまだ無い。吾輩は猫である。名前は", "山路を登りながら、こう考えた。"]
    params = SamplingParams(temperature=0, max_tokens=24)
    expected = tokens(LLM(dtype="float32"), prompts, params)
    two = LLM(dtype="float32", tensor_parallel_size=2,
              speculative_config={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3,
                                  "prompt_lookup_min": 1})
    try:
        assert tokens(two, prompts, params) == expected
        assert two.engine.speculator.stats()["accepted"] > 0
    finally:
        two.close()


@pytest.mark.parametrize("entry", ["LLM(tensor_parallel_size=2, device='cpu')",
                                   "DisaggregatedLLM(device='cpu', prefill_threads=1)"])
def test_a_script_without_the_main_guard_is_told_what_to_add(tmp_path, entry):
    """A spawned worker re-imports the main script; a script that starts workers at its top level makes the
    worker die while starting. The parent's error must say what to add, not only that a worker exited."""
    script = tmp_path / "no_guard.py"
    script.write_text("from minimal_engine import LLM\nfrom minimal_engine.disagg.llm import DisaggregatedLLM\n"
                      f"llm = {entry}\nprint('started')\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=env)
    assert r.returncode != 0 and "started" not in r.stdout
    assert 'if __name__ == "__main__":' in r.stderr and str(script) in r.stderr
    r = subprocess.run([sys.executable, "-c", f"{script.read_text().split(chr(10) + 'llm')[0]}\nllm = {entry}\n"], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr[-2000:]           # python -c: spawn re-imports nothing, the workers start


def test_main_guard_hint_only_for_a_script_without_the_guard(tmp_path, monkeypatch):
    import types
    from minimal_engine.processes import main_guard_hint
    plain, guarded = tmp_path / "plain.py", tmp_path / "guarded.py"
    plain.write_text("llm = LLM(tensor_parallel_size=2)\n")
    guarded.write_text("if __name__ == '__main__':\n    llm = LLM(tensor_parallel_size=2)\n")
    for path, hinted in ((plain, True), (guarded, False), (None, False)):   # None: a notebook, a REPL
        main = types.ModuleType("__main__")
        if path:
            main.__file__ = str(path)
        monkeypatch.setitem(sys.modules, "__main__", main)
        assert ('if __name__ == "__main__":' in main_guard_hint("LLM(...)")) == hinted, path


def test_a_server_whose_worker_died_says_so_on_health():
    """Issue 29 #6: after a TP worker died, /health said ok and every request got 500 for good.
    Attack round 3 L15: then the first request still failed with a 500 before /health turned 503.
    Now the idle engine loop sees the dead worker: /health is 503 within a second (a supervisor
    restarts the server) and new requests get 503 at once, none a 500."""
    import httpx
    from minimal_engine.serve.app import ServerThread, build_app
    llm = LLM(dtype="float32", tensor_parallel_size=2)
    try:
        with ServerThread(build_app(llm, max_queue=4)) as s:
            body = {"prompt": "今日は", "max_tokens": 2}
            assert httpx.post(s.url + "/v1/completions", json=body, timeout=60).status_code == 200
            assert httpx.get(s.url + "/health", timeout=10).status_code == 200
            pid = llm.engine.runner.model.worker_pids[0]
            os.kill(pid, signal.SIGKILL)
            assert gone([pid])
            deadline = time.monotonic() + 5
            while (h := httpx.get(s.url + "/health", timeout=10)).status_code == 200:
                assert time.monotonic() < deadline, "/health stayed 200 after the worker died"
                time.sleep(0.1)
            assert h.status_code == 503 and "worker rank 1" in h.json()["error"]
            r = httpx.post(s.url + "/v1/completions", json=body, timeout=60)
            assert r.status_code == 503 and "restarted" in r.json()["error"]["message"]
    finally:
        llm.close()
