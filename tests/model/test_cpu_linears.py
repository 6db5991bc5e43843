"""The CPU Linear kernels (minimal_engine/model/cpu_linears.py): each fast path is probed at load and the engine falls
back to plain F.linear when the probe fails, whatever this machine's CPU is.

Forced-fallback tests make each probe fail (the op raises as on an AVX2-only CPU, the op is missing as on some
ARM builds, the op returns different numbers) and check that the engine still loads, takes the plain path and
gives the greedy tokens of plain nn.Linear. Without the probe they would fail: the load would raise, or the
tokens would change. Fast-path tests skip, naming the missing CPU feature, where this CPU cannot run the path.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import minimal_engine.model.cpu_linears as cl
from minimal_engine import LLM, SamplingParams

PROMPTS = [[5, 17, 33, 100, 7, 9, 200, 45, 3, 80, 81, 82, 90], [11, 12], list(range(40, 90))]
GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
ONEDNN_BF16 = "oneDNN's bf16 pre-packing needs AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT"


@pytest.fixture(autouse=True)
def probing(monkeypatch):
    """These tests drive the probes themselves: MINIMAL_ENGINE_CPU_KERNELS=plain (the whole suite on the fallback)
    must not turn them off; the tests of the switch set it."""
    monkeypatch.delenv(cl.ENV_SWITCH, raising=False)


def tokens(llm) -> list:
    """Greedy tokens batched (several rows per step) and alone (one row per step: batch-1 decode)."""
    batched = [o.token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]
    return batched + [llm.generate([p], GREEDY, use_tqdm=False)[0].token_ids for p in PROMPTS]


@pytest.fixture(scope="module")
def plain_tokens(llama_dir):
    """Plain nn.Linear everywhere (no CpuLinear at all), per dtype."""
    out = {}
    for dtype in ("bfloat16", "float32"):
        llm = LLM(llama_dir, dtype=dtype, device="cpu")
        model = llm.engine.runner.model
        for parent in list(model.modules()):
            for name, child in parent.named_children():
                if isinstance(child, cl.CpuLinear):
                    lin = nn.Linear(child.in_features, child.out_features, bias=child.bias is not None)
                    lin.weight, lin.bias = child.weight, child.bias
                    setattr(parent, name, lin)
        assert not any(isinstance(m, cl.CpuLinear) for m in model.modules())
        out[dtype] = tokens(llm)
    return out


def raising(*args, **kwargs):
    raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert or avx512bw, "
                       "avx512vl and avx512dq")


def break_prepacking(monkeypatch, how: str) -> None:
    """Make oneDNN's pre-packing fail its probe: it raises, it is missing, or it computes something else."""
    real = cl.find_op
    if how == "raises":
        monkeypatch.setattr(cl, "find_op", lambda ns, name: raising if name == "_reorder_linear_weight" else real(ns, name))
    elif how == "missing":
        monkeypatch.setattr(cl, "find_op", lambda ns, name: None if ns == "mkldnn" else real(ns, name))
    else:
        op = real("mkldnn", "_linear_pointwise")
        wrong = lambda x, p, b, *rest: op(x, p, b, *rest) * 1.5           # noqa: E731
        monkeypatch.setattr(cl, "find_op", lambda ns, name: wrong if name == "_linear_pointwise" else real(ns, name))


@pytest.mark.parametrize("how", ["raises", "missing", "wrong numbers"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_prepacking_that_fails_its_probe_falls_back(llama_dir, plain_tokens, monkeypatch, dtype, how):
    break_prepacking(monkeypatch, how)
    llm = LLM(llama_dir, dtype=dtype, device="cpu")                  # no crash at load
    k = cl.cpu_kernels(llm.model)
    assert k.more_rows == cl.PLAIN and cl.PREPACKED in k.not_taken and not k.prepacked
    assert k.one_row == (cl.MV if dtype == "bfloat16" else cl.PLAIN)
    assert "not taken: oneDNN pre-packed" in k.describe()
    assert all(m.packed is None for m in llm.engine.runner.model.modules() if isinstance(m, cl.CpuLinear))
    assert tokens(llm) == plain_tokens[dtype]


@pytest.mark.parametrize("how", ["raises", "wrong numbers"])
def test_matvec_that_fails_its_probe_falls_back(llama_dir, plain_tokens, monkeypatch, how):
    real_mv = torch.mv
    monkeypatch.setattr(torch, "mv", raising if how == "raises" else (lambda w, x: real_mv(w, x) + 1))
    llm = LLM(llama_dir, dtype="bfloat16", device="cpu")
    k = cl.cpu_kernels(llm.model)
    assert k.one_row == cl.PLAIN and cl.MV in k.not_taken
    monkeypatch.setattr(torch, "mv", real_mv)
    assert tokens(llm) == plain_tokens["bfloat16"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_environment_switch_takes_the_plain_path(llama_dir, plain_tokens, monkeypatch, dtype):
    monkeypatch.setenv(cl.ENV_SWITCH, "plain")
    llm = LLM(llama_dir, dtype=dtype, device="cpu")
    k = cl.cpu_kernels(llm.model)
    assert (k.one_row, k.more_rows) == (cl.PLAIN, cl.PLAIN) and "MINIMAL_ENGINE_CPU_KERNELS=plain" in k.describe()
    assert tokens(llm) == plain_tokens[dtype]
    monkeypatch.setenv(cl.ENV_SWITCH, "fastest")
    with pytest.raises(ValueError, match="MINIMAL_ENGINE_CPU_KERNELS must be 'auto'"):
        LLM(llama_dir, dtype=dtype, device="cpu")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_fast_kernels_give_the_plain_tokens(llama_dir, plain_tokens, dtype):
    """What the probe chose on this CPU gives the tokens of plain nn.Linear, alone and batched."""
    want = cl.PREPACKED if dtype == "float32" else cl.MV
    why = cl.probe(cl.PREPACKED if dtype == "float32" else cl.MV, getattr(torch, dtype))
    if why:
        pytest.skip(f"the {want} kernel does not run on this CPU: {why}")
    llm = LLM(llama_dir, dtype=dtype, device="cpu")
    k = cl.cpu_kernels(llm.model)
    assert k.one_row == want
    if dtype == "bfloat16":
        why = cl.probe(cl.PREPACKED, torch.bfloat16)
        assert k.more_rows == (cl.PLAIN if why else cl.PREPACKED)
    assert tokens(llm) == plain_tokens[dtype]


def test_prepacked_bf16_kernel_where_the_cpu_has_it(llama_dir, plain_tokens):
    why = cl.probe(cl.PREPACKED, torch.bfloat16)
    if why:
        pytest.skip(f"{ONEDNN_BF16}; this CPU ({torch.backends.cpu.get_cpu_capability()}): {why}")
    llm = LLM(llama_dir, dtype="bfloat16", device="cpu")
    lin = llm.engine.runner.model.layers[0].mlp.down_proj
    assert isinstance(lin, cl.CpuLinear) and lin.packed is not None and lin.more_rows == cl.PREPACKED
    assert tokens(llm) == plain_tokens["bfloat16"]


def test_cpu_linear_keeps_the_parameters_and_the_state_dict():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 8, bias=False))
    before = {k: v.clone() for k, v in net.state_dict().items()}
    w0 = net[0].weight
    k = cl.use_cpu_linears(net)
    assert isinstance(net[0], cl.CpuLinear) and net[0].weight is w0 and isinstance(net[0], nn.Linear)
    assert net.state_dict().keys() == before.keys()
    assert all(torch.equal(net.state_dict()[n], v) for n, v in before.items())
    x = torch.randn(5, 16)
    ref = F.linear(F.relu(F.linear(x, before["0.weight"], before["0.bias"])), before["2.weight"])
    torch.testing.assert_close(net(x), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(net(x[:1]), ref[:1], atol=1e-5, rtol=1e-5)      # one row
    assert "1 row:" in repr(net) and k.dtype == torch.float32
    assert cl.use_cpu_linears(nn.Sequential(nn.ReLU())) is None                 # nothing to replace
    assert cl.use_cpu_linears(nn.Sequential(nn.Linear(4, 4).to(torch.float64))) is None   # not a CPU dtype here


def test_matvec_equals_linear():
    """One row through ATen's matrix-vector kernel: F.linear's numbers within bf16 rounding, any leading dims;
    the process-wide oneDNN switch is as it was afterwards."""
    torch.manual_seed(0)
    w, b = torch.randn(96, 64).bfloat16(), torch.randn(96).bfloat16()
    before = torch._C._get_mkldnn_enabled()
    for x in (torch.randn(1, 64).bfloat16(), torch.randn(1, 1, 64).bfloat16()):
        got = cl.matvec(x, w, b)
        assert got.shape == (*x.shape[:-1], 96)
        torch.testing.assert_close(got.float(), x.float() @ w.float().T + b.float(), atol=0.06, rtol=0.02)
    with pytest.raises(RuntimeError):
        cl.matvec(torch.randn(1, 65).bfloat16(), w, b)                           # wrong width
    assert torch._C._get_mkldnn_enabled() == before


def test_matvec_keeps_onednn_off_for_its_call_only(monkeypatch):
    """torch.mv runs with oneDNN switched off (else it may take oneDNN's slower bf16 gemv), and the
    process-wide switch is back as it was afterwards, also when the product raises."""
    seen, real_mv = [], torch.mv
    monkeypatch.setattr(torch, "mv", lambda w, v: seen.append(torch._C._get_mkldnn_enabled()) or real_mv(w, v))
    w = torch.randn(8, 4).bfloat16()
    for enabled in (True, False):
        torch._C._set_mkldnn_enabled(enabled)
        try:
            cl.matvec(torch.randn(1, 4).bfloat16(), w, None)
            with pytest.raises(RuntimeError):
                cl.matvec(torch.randn(1, 5).bfloat16(), w, None)
            assert torch._C._get_mkldnn_enabled() == enabled
        finally:
            torch._C._set_mkldnn_enabled(True)
    assert seen == [False] * 4


def test_probes_report_why():
    assert cl.probe(cl.MV, torch.float32) is None                              # ATen's kernel runs everywhere
    k = cl.probe_kernels(torch.float32, weight_bytes=cl.PACK_LIMIT_BYTES + 1)  # too big to keep a second copy
    assert k.more_rows == cl.PLAIN and "GiB" in k.not_taken[cl.PREPACKED]
    assert cl.probe_kernels(torch.float16) == cl.CpuKernels(torch.float16)      # never fp16 on the CPU: plain
    assert torch.backends.cpu.get_cpu_capability() in cl.probe_kernels(torch.bfloat16).describe()


@pytest.mark.parametrize("how", ["raises", "missing", "wrong numbers"])
def test_int8pack_that_fails_its_probe_falls_back(llama_dir, monkeypatch, how):
    """INT8 weights: `_weight_int8pack_mm` failing its probe leaves the dequantize path, same tokens."""
    from minimal_engine.features.quantization import Int8Linear, int8pack_supported
    want_llm = LLM(llama_dir, dtype="bfloat16", device="cpu", quantization="int8")
    real = cl.find_op
    op = real("aten", "_weight_int8pack_mm")
    bad = {"raises": raising, "missing": None, "wrong numbers": lambda x, w, s: op(x, w, s) * 2}[how]
    monkeypatch.setattr(cl, "find_op", lambda ns, name: bad if name == "_weight_int8pack_mm" else real(ns, name))
    assert not int8pack_supported(torch.device("cpu"), torch.bfloat16)
    llm = LLM(llama_dir, dtype="bfloat16", device="cpu", quantization="int8")
    lins = [m for m in llm.engine.runner.model.modules() if isinstance(m, Int8Linear)]
    assert lins and not any(m.use_int8pack for m in lins)
    want_lins = [m for m in want_llm.engine.runner.model.modules() if isinstance(m, Int8Linear)]
    for m in want_lins:                      # the reference: the same int8 weights on the dequantize path
        m.use_int8pack = False
    monkeypatch.setattr(cl, "find_op", real)
    assert tokens(llm) == tokens(want_llm)
