"""CPU kernels for the Linear layers: probed at load on this CPU, with a plain fallback.

Which matrix-product kernel is fastest on a CPU depends on the CPU and on the PyTorch build, and some of them do
not run everywhere: oneDNN's pre-packed bf16 weights need AVX-512 (BW/VL/DQ) or AVX-NE-CONVERT on x86, so on most
laptops (AVX2 only) `torch.ops.mkldnn._reorder_linear_weight` raises, and on ARM the `mkldnn` ops may be missing.
So nothing here is assumed: at load each fast path is tried once on a tiny tensor, compared with plain F.linear
(float32 arithmetic) on that tensor, and used only when it runs and agrees (`probe_kernels`). What was chosen is
kept in a `CpuKernels` (`cpu_kernels(llm.model)`; `describe()` gives the line the bench and labs
print).

Kernels (GB/s of weights read at one row when they stream from memory: benchmarks/matvec_kernels.py):
  * "aten mv": `torch.mv`, ATen's matrix-vector kernel (bf16 with fp32 accumulation). The bf16 path for one row
    (batch-1 decode). oneDNN is switched off for the call only (`matvec`), or torch.mv takes oneDNN's slower gemv.
  * "oneDNN pre-packed": the weight re-laid once into oneDNN's blocked layout, multiplied with
    `mkldnn._linear_pointwise`. bf16 with more than one row (plain bf16 F.linear re-lays the weight on every
    call: about half the speed), float32 at every row count (plain fp32 F.linear, MKL's matrix-vector product,
    reads about half as fast at one row).
  * "plain": `F.linear`, whatever PyTorch does on this CPU. Always there; what every fast path falls back to.

`CpuLinear` is the Linear layer that runs them: an nn.Linear (same weight and bias Parameters, so the state dict
and tied embeddings are unchanged) whose forward takes the chosen kernel. `use_cpu_linears(model)` replaces the
model's nn.Linear layers by CpuLinear ones, visibly (print the model), before an engine holds the
model (`LLM` calls it after quantization and tensor parallelism). Environment switch:
MINIMAL_ENGINE_CPU_KERNELS=plain takes no fast path at all (what a CPU where every probe fails runs); the tests
use it to run the suite on the fallback on any machine.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

ENV_SWITCH = "MINIMAL_ENGINE_CPU_KERNELS"   # "plain": no fast path; unset or "auto": probe
PACK_LIMIT_BYTES = 2 << 30                  # pre-packing keeps a second copy of the weights: not for big models
MV, PREPACKED, PLAIN = "aten mv", "oneDNN pre-packed", "plain"
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}   # relative to the output's largest value
# oneDNN lays the packed weight out for a batch-size hint. For float32 a hint of 1 picks a slow layout: with 16 the
# engine's decode step of the 125M shape took 8.70 ms instead of 12.46 at batch 1 and 33.2 instead of 42.6 at batch
# 32 (2 threads, AVX-512); on AVX2 batch 1 stayed within noise and batch 32 went 60.5 -> 45.1 ms
# (benchmarks/pack_hint.py; benchmarks/README.md, "float32 packing hint"). bf16: within 5 % either way.
PACK_HINT = {torch.float32: 16, torch.bfloat16: 1}


def find_op(namespace: str, name: str):
    """torch.ops.<namespace>.<name>, or None where this PyTorch build lacks it."""
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return None


def matvec(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] with one row @ weight.T [in, out] -> [..., out]: ATen's matrix-vector kernel (torch.mv).

    With oneDNN enabled, torch.mv hands bf16 to oneDNN's gemv on CPUs that pass PyTorch's oneDNN bf16 check, and
    on this project's AVX-512 machine that gemv read weights at 13.5 GB/s against 45-49 GB/s for ATen's own kernel
    (benchmarks/matvec_kernels.py, AMD EPYC, 2 threads). So oneDNN is switched off for this one call and switched
    back at once: the switch is process-wide, and the engine's forward runs on one thread, so nothing else runs in
    between. (Where the check fails, e.g. AVX2 laptops, torch.mv takes ATen's kernel either way.)
    """
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        y = torch.mv(weight, x.reshape(-1))                       # [out]
    finally:
        torch._C._set_mkldnn_enabled(enabled)
    if bias is not None:
        y = y + bias
    return y.view(*x.shape[:-1], weight.shape[0])


def prepack(weight: torch.Tensor) -> torch.Tensor:
    """weight [out, in] -> an opaque oneDNN tensor in its blocked layout (batch-size hint PACK_HINT)."""
    return find_op("mkldnn", "_reorder_linear_weight")(weight.detach(), PACK_HINT.get(weight.dtype, 1))


def prepacked_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] @ the pre-packed weight -> [..., out]."""
    return find_op("mkldnn", "_linear_pointwise")(x, packed, bias, "none", [], "")


def agrees(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> bool:
    scale = want.abs().max().item() or 1.0
    return got.shape == want.shape and bool(((got.float() - want).abs() <= TOLERANCE[dtype] * scale).all())


def probe(kernel: str, dtype: torch.dtype) -> str | None:
    """Try one kernel on tiny tensors against float32 F.linear: None if it runs and agrees, else why not."""
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(24, 40, generator=g).to(dtype), torch.randn(24, generator=g).to(dtype)
    rows = (1,) if kernel == MV else (1, 3)
    try:
        if kernel == PREPACKED:
            if not torch.backends.mkldnn.is_available():
                return "oneDNN (mkldnn) is not available in this PyTorch build"
            if find_op("mkldnn", "_reorder_linear_weight") is None or find_op("mkldnn", "_linear_pointwise") is None:
                return "torch.ops.mkldnn._reorder_linear_weight / _linear_pointwise are missing in this PyTorch build"
            packed = prepack(w)
        for n in rows:
            x = torch.randn(n, 40, generator=g).to(dtype)
            want = F.linear(x.float(), w.float(), b.float())
            got = matvec(x, w, b) if kernel == MV else prepacked_linear(x, packed, b)
            if not agrees(got, want, dtype):
                return f"gives different numbers from F.linear ({n} row(s))"
    except Exception as e:                                        # noqa: BLE001 - any failure means: not here
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
    return None


def probe_int8pack(dtype: torch.dtype) -> str | None:
    """The same for `aten._weight_int8pack_mm` (chapter 6's CPU int8 kernel), against dequantize-and-matmul."""
    op = find_op("aten", "_weight_int8pack_mm")
    if op is None:
        return "torch.ops.aten._weight_int8pack_mm is missing in this PyTorch build"
    g = torch.Generator().manual_seed(0)
    w_q = torch.randint(-127, 128, (24, 64), generator=g, dtype=torch.int8)
    scale = (torch.rand(24, generator=g) / 100 + 1e-3).to(dtype)
    try:
        for n in (1, 3):
            x = torch.randn(n, 64, generator=g).to(dtype)
            want = F.linear(x.float(), w_q.float()) * scale.float()
            if not agrees(op(x, w_q, scale), want, dtype):
                return f"gives different numbers from dequantize-and-matmul ({n} row(s))"
    except Exception as e:                                        # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
    return None


def fast_paths_allowed() -> bool:
    value = os.environ.get(ENV_SWITCH, "auto").strip().lower()
    if value not in ("auto", "plain", ""):
        raise ValueError(f"{ENV_SWITCH} must be 'auto' (probe the fast CPU kernels) or 'plain' (none), got {value!r}")
    return value != "plain"


@dataclass(frozen=True)
class CpuKernels:
    """The kernels the Linear layers of one model take on this CPU, and why a fast one was not taken."""
    dtype: torch.dtype
    one_row: str = PLAIN                       # a step with one row of features (batch-1 decode)
    more_rows: str = PLAIN                     # prefill and batched decode
    not_taken: dict = field(default_factory=dict)   # kernel -> reason

    @property
    def prepacked(self) -> bool:
        return PREPACKED in (self.one_row, self.more_rows)

    def describe(self) -> str:
        name = {torch.bfloat16: "bf16", torch.float32: "fp32"}.get(self.dtype, str(self.dtype))
        text = f"{name}: 1 row {self.one_row}, more rows {self.more_rows}"
        reasons = "; ".join(f"{k}: {v}" for k, v in self.not_taken.items())
        return f"{text} (CPU {torch.backends.cpu.get_cpu_capability()}" + (f"; not taken: {reasons})" if reasons else ")")


def probe_kernels(dtype: torch.dtype, weight_bytes: int = 0) -> CpuKernels:
    """Choose the Linear kernels for `dtype` on this CPU (see the module docstring for the order of preference)."""
    if dtype not in (torch.bfloat16, torch.float32):
        return CpuKernels(dtype)
    if not fast_paths_allowed():
        return CpuKernels(dtype, not_taken={"fast paths": f"{ENV_SWITCH}=plain"})
    not_taken = {}
    pack = None if weight_bytes <= PACK_LIMIT_BYTES else f"weights over {PACK_LIMIT_BYTES >> 30} GiB (a second copy)"
    pack = pack or probe(PREPACKED, dtype)
    if pack:
        not_taken[PREPACKED] = pack
    if dtype == torch.float32:                 # MKL's fp32 matrix-vector product is slower than pre-packed here
        choice = PLAIN if pack else PREPACKED
        return CpuKernels(dtype, choice, choice, not_taken)
    mv = probe(MV, dtype)
    if mv:
        not_taken[MV] = mv
    return CpuKernels(dtype, PLAIN if mv else MV, PLAIN if pack else PREPACKED, not_taken)


class CpuLinear(nn.Linear):
    """nn.Linear on the CPU with the kernels of a CpuKernels: the same weight and bias Parameters, plus (when a
    kernel needs it) the weight pre-packed for oneDNN, a plain attribute: not in the state dict, never moved."""

    def __init__(self, linear: nn.Linear, kernels: CpuKernels):
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias   # shared: state_dict, tied embeddings unchanged
        self.kernels, self.one_row, self.more_rows = kernels, kernels.one_row, kernels.more_rows
        self.packed = prepack(self.weight) if kernels.prepacked else None
        self.bias_detached = None if self.bias is None else self.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:           # x: [..., in] -> [..., out]
        kernel = self.one_row if x.numel() == x.shape[-1] else self.more_rows
        if kernel == MV:
            return matvec(x, self.weight, self.bias)
        if kernel == PREPACKED:
            return prepacked_linear(x, self.packed, self.bias_detached)
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, 1 row: {self.one_row}, more rows: {self.more_rows}"


def use_cpu_linears(model: nn.Module, kernels: CpuKernels | None = None) -> CpuKernels | None:
    """Replace every nn.Linear of a CPU model in bf16/fp32 by a CpuLinear (kernels probed here unless given), in
    place; returns the kernels, or None where nothing applies (another device or dtype, every Linear int8)."""
    linears = [(parent, name, child) for parent in list(model.modules()) for name, child in parent.named_children()
               if isinstance(child, nn.Linear)]
    if not linears:
        return None
    w0 = linears[0][2].weight
    if w0.device.type != "cpu" or w0.dtype not in (torch.bfloat16, torch.float32):
        return None
    if kernels is None:
        kernels = probe_kernels(w0.dtype, sum(c.weight.numel() * c.weight.element_size() for _, _, c in linears))
    for parent, name, child in linears:
        setattr(parent, name, CpuLinear(child, kernels))
    return kernels


def cpu_kernels(model: nn.Module) -> CpuKernels | None:
    """The CpuKernels that use_cpu_linears gave the model's Linears (None: it has no CpuLinear)."""
    return next((m.kernels for m in model.modules() if isinstance(m, CpuLinear)), None)


def describe_linears(model: nn.Module, dtype: torch.dtype, device: torch.device) -> str:
    """One line: the Linear kernels this model takes here (ModelRunner.describe_kernels; the bench
    and the labs print it next to their figures)."""
    kernels = cpu_kernels(model)
    if kernels is not None:
        return kernels.describe()
    int8 = next((m for m in model.modules() if hasattr(m, "use_int8pack")), None)   # quantization
    if int8 is not None:
        kernel = "_weight_int8pack_mm for short steps" if int8.use_int8pack else "dequantize+matmul"
        cpu = torch.device(device).type == "cpu"
        where = f"CPU {torch.backends.cpu.get_cpu_capability()}" if cpu else str(device)
        return f"int8 weights: {kernel} ({where})"
    return f"{str(dtype).removeprefix('torch.')}: plain ({device})"
