"""Chapter 9's engine feature: disaggregated prefill/decode (minimal_engine/disagg/: llm.py, kv_connector.py).

Greedy (and seeded) tokens identical to one engine on the default model and a synthetic GQA model; the KV
moved per request is whole blocks of every layer's K and V; no blocks leak on either side; the prefill process
goes away on close, on its own failure (a clear error, not a hang) and when the parent dies. Every wait bounded."""
import math
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine import calculators as calc
from minimal_engine.disagg.llm import DisaggMetrics, DisaggregatedLLM
from minimal_engine.disagg.kv_connector import PipeKVConnector, extract_kv_blocks, inject_kv_blocks, transfer_summary
from minimal_engine.calculators.transfer import kv_transfer_bytes, transfer_seconds

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
ENGINE = dict(max_num_seqs=4, num_kv_blocks=48, max_num_batched_tokens=64)   # chunked prefills, a small pool


def _gone(pid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:                                   # a zombie child of ours counts as gone once reaped
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.2)
    return False


def _prompts(llm, lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(5, llm.model_config.vocab_size, (n,), generator=g).tolist() for n in lens]


@pytest.fixture(scope="module")
def pair():
    with DisaggregatedLLM(**ENGINE) as d:
        yield d


@pytest.fixture(scope="module")
def single():
    return LLM(**ENGINE)


def test_greedy_tokens_match_the_single_engine_and_no_blocks_leak(pair, single):
    prompts = _prompts(single, [5, 16, 17, 90, 150, 3])      # under, at and over a block; chunked prefills
    params = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for m in (12, 1, 7, 12, 20, 12)]
    ref = single.generate(prompts, params, use_tqdm=False)
    outs = pair.generate(prompts, params, timeout=120)
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref]
    assert all(o.finished and o.finish_reason == "length" for o in outs)
    per_token = single.model_config.kv_bytes_per_token(torch.finfo(single.dtype).bits // 8)
    for o, p in zip(outs, prompts):
        m = o.metrics
        assert isinstance(m, DisaggMetrics)
        assert m.kv_transfer_bytes == math.ceil(len(p) / 16) * 16 * per_token     # whole blocks, all layers, K+V
        assert m.kv_transfer_s > 0 and m.ttft > 0 and m.prefill_done_time <= m.first_token_time
        assert len(m.token_times) == len(o.token_ids)
    assert transfer_summary(outs)["requests"] == len(prompts)
    stats = pair.prefill_stats()
    assert stats["free_blocks"] == stats["num_blocks"] == ENGINE["num_kv_blocks"] and not stats["unfinished"]
    assert pair.engine.block_manager.num_free_blocks == ENGINE["num_kv_blocks"]


def test_text_prompts_stop_strings_and_seeded_sampling(pair, single):
    prompts = ["吾輩は猫である。", "山路を登りながら"]
    ref = single.generate(prompts, GREEDY, use_tqdm=False)
    assert [o.text for o in pair.generate(prompts, GREEDY, timeout=60)] == [r.text for r in ref]
    seeded = SamplingParams(temperature=1.0, top_p=0.9, seed=7, max_tokens=10)
    assert pair.generate(prompts, seeded, timeout=60)[0].token_ids == single.generate(prompts, seeded, use_tqdm=False)[0].token_ids


def test_step_interface_streams_every_token_once(pair):
    rid = pair.add_request([10, 11, 12, 13], SamplingParams(temperature=0, max_tokens=5, ignore_eos=True))
    got, deadline = [], time.monotonic() + 60
    while pair.has_unfinished_requests() and time.monotonic() < deadline:
        got += [o for o in pair.step() if o.request_id == rid]
    assert [len(o.new_token_ids) for o in got] == [1] * 5 and got[-1].finished


def test_an_id_added_again_after_abort_never_takes_the_old_requests_kv(pair, single):
    """Issue 29 #11: abort "x" while its KV hand-off is already on its way, add "x" again with another prompt:
    the new "x" gets its own prefill (the old hand-off is dropped), its tokens are the single engine's for the new
    prompt, and no block leaks on either side."""
    old, new = _prompts(single, [40, 9], seed=3)
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    pair.add_request(old, params, request_id="x")
    deadline = time.monotonic() + 30
    while pair._inbox.empty() and time.monotonic() < deadline:   # the old prefill's KV has arrived (unread)
        time.sleep(0.01)
    assert not pair._inbox.empty(), "the old request's hand-off did not arrive"
    pair.abort_request("x")
    pair.add_request(new, params, request_id="x")
    got, deadline = [], time.monotonic() + 60
    while pair.has_unfinished_requests() and time.monotonic() < deadline:
        got += [o for o in pair.step() if o.request_id == "x"]
    assert got and got[-1].finished
    assert got[-1].token_ids == single.generate([new], params, use_tqdm=False)[0].token_ids
    assert pair.engine.block_manager.num_free_blocks == ENGINE["num_kv_blocks"]
    stats = pair.prefill_stats()
    assert stats["free_blocks"] == stats["num_blocks"] and not stats["unfinished"]


def test_synthetic_gqa_model_matches():
    kw = dict(dtype="float32", device="cpu", max_num_seqs=4, num_kv_blocks=24, max_model_len=256,
              max_num_batched_tokens=48)
    single = LLM("synthetic:llama-125m", **kw)
    prompts = _prompts(single, [9, 40], seed=1)
    short = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    ref = single.generate(prompts, short, use_tqdm=False)
    with DisaggregatedLLM("synthetic:llama-125m", **kw) as d:
        outs = d.generate(prompts, short, timeout=120)
        assert [o.token_ids for o in outs] == [r.token_ids for r in ref]
        assert d.prefill_stats()["free_blocks"] == 24 and d.engine.block_manager.num_free_blocks == 24
        pid = d.pid
    assert _gone(pid)


def test_bad_input_is_refused_before_anything_is_sent(pair):
    with pytest.raises(ValueError, match="logprobs"):
        pair.add_request([1, 2, 3], SamplingParams(logprobs=2))
    with pytest.raises(ValueError, match="vocabulary"):
        pair.add_request([10 ** 9], GREEDY)
    with pytest.raises(ValueError, match="does not take"):
        DisaggregatedLLM(enable_prefix_caching=True)
    assert not pair.has_unfinished_requests()


def test_a_failing_prefill_process_gives_an_error_not_a_hang():
    d = DisaggregatedLLM(max_num_seqs=2, num_kv_blocks=8)
    try:
        d._inflight["x"] = ([1], GREEDY, time.perf_counter())
        d._control.send(("add", "x", [10 ** 9], GREEDY, time.perf_counter()))   # unchecked: it fails over there
        with pytest.raises(RuntimeError, match="prefill engine"):
            d.generate([[1, 2, 3]], GREEDY, timeout=60)
        assert _gone(d.pid)
    finally:
        d.close()


def test_the_prefill_process_exits_when_the_parent_dies(tmp_path):
    script = textwrap.dedent("""
        import os, sys, time
        from minimal_engine.disagg.llm import DisaggregatedLLM
        if __name__ == "__main__":
            d = DisaggregatedLLM(max_num_seqs=2, num_kv_blocks=8)
            print(d.pid, flush=True)
            time.sleep(120)
    """)
    (tmp_path / "parent.py").write_text(script)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")], stdout=subprocess.PIPE, text=True, env=env)
    try:
        child = int(proc.stdout.readline())
        proc.send_signal(signal.SIGKILL)                       # no cleanup code runs in the parent
        proc.wait(30)
        assert _gone(child, 30)
    finally:
        proc.kill()


# ---------------------------------------------------------------- the connector's pieces, one process
def test_blocks_round_trip_through_the_pipe_in_bf16():
    a = LLM(dtype="bfloat16", num_kv_blocks=8, max_num_seqs=2)
    b = LLM(dtype="bfloat16", num_kv_blocks=8, max_num_seqs=2)
    for k, v in a.engine.runner.kv_caches:
        k.normal_()
        v.normal_()
    recv, send = mp.Pipe(duplex=False)
    sent = []                                   # a sender thread: the payload is larger than the pipe's buffer
    t = threading.Thread(target=lambda: sent.append(
        PipeKVConnector(send).send_kv("r", extract_kv_blocks(a.engine.runner, [5, 2]), {"first_token": 3})))
    t.start()
    rid, kv, meta = PipeKVConnector(recv).recv_kv(30)
    t.join(30)
    sent = sent[0]
    assert rid == "r" and meta["first_token"] == 3 and sent == kv.nbytes and kv.dtype == torch.bfloat16
    inject_kv_blocks(b.engine.runner, [0, 7], kv)
    bs = 16
    for (ka, va), (kb, vb) in zip(a.engine.runner.kv_caches, b.engine.runner.kv_caches):
        assert torch.equal(ka[:, 5 * bs:6 * bs], kb[:, 0:bs]) and torch.equal(va[:, 2 * bs:3 * bs], vb[:, 7 * bs:8 * bs])
    with pytest.raises(ValueError, match="does not fit"):
        inject_kv_blocks(b.engine.runner, [0], kv)


def test_admit_prefilled_needs_room():
    engine = LLM(num_kv_blocks=4, max_num_seqs=2).engine
    engine.add_request(list(range(1, 31)), GREEDY, "a")
    assert engine.scheduler.admit_prefilled(engine.seqs["a"], 30)            # 2 blocks, running, nothing to prefill
    assert engine.seqs["a"].num_computed_tokens == 30 and engine.block_manager.num_free_blocks == 2
    engine.add_request(list(range(1, 40)), GREEDY, "big")
    assert not engine.scheduler.admit_prefilled(engine.seqs["big"], 39)     # 3 blocks > 2 free: stays waiting
    assert engine.scheduler.running == [engine.seqs["a"]] and list(engine.scheduler.waiting) == [engine.seqs["big"]]


def test_transfer_calculators_by_hand():
    assert kv_transfer_bytes("Llama 3.1 8B", 8192) == 8192 * 131_072 == 2 ** 30
    assert kv_transfer_bytes("Llama 3.1 8B", 8193) == 8208 * 131_072                    # rounded up to a block
    assert kv_transfer_bytes("DeepSeek R1", 1024, "fp8", block_size=64) == 1024 * calc.kv_bytes_per_token("DeepSeek R1", "fp8")
    assert transfer_seconds(2 ** 30, "InfiniBand NDR (400 Gb/s)") == pytest.approx(2 ** 30 / 50e9)
    assert transfer_seconds(1e9, 100) == pytest.approx(0.01)
    assert calc.chunked_prefill_steps(1000, 256, 16) == 5 and calc.chunked_prefill_steps(1000, 2048, 16) == 1
    assert calc.kv_transfer_bytes is kv_transfer_bytes                                   # the quiz's calculators
    for bad in (lambda: kv_transfer_bytes("Llama 3.1 8B", 0), lambda: transfer_seconds(1, "carrier pigeon"),
                lambda: transfer_seconds(1, -5), lambda: calc.chunked_prefill_steps(100, 8, 8)):
        with pytest.raises(ValueError):
            bad()


def test_a_prefill_process_dying_while_generate_sends_is_a_runtime_error(monkeypatch):
    """Issue 29 #12: the prefill process died while generate() was still sending: a bare BrokenPipeError,
    and the cleanup wrote to the dead pipe again."""
    d = DisaggregatedLLM(max_num_seqs=2, num_kv_blocks=8)
    try:
        os.kill(d.pid, signal.SIGKILL)
        assert _gone(d.pid)
        monkeypatch.setattr(d._proc, "is_alive", lambda: True)   # it died after add_request's liveness check
        with pytest.raises(RuntimeError, match="prefill engine"):
            d.generate([[1, 2, 3], [4, 5, 6]], GREEDY, timeout=60)
    finally:
        monkeypatch.undo()
        d.close()
