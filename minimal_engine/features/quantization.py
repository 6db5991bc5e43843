"""Weight-only INT8 quantization: `LLM(..., quantization="int8")`.

Every linear layer's weight W [N, K] (N output channels, K inputs) is stored as int8 with one scale per
output channel ("symmetric, per output channel", as gpt-fast's WeightOnlyInt8Linear):

    scale[n] = max_k |W[n, k]| / 127          W_q[n, k] = round(W[n, k] / scale[n])  in [-127, 127]
    y = x @ W^T  ~=  (x @ W_q^T) * scale       (the scale factors out of the sum over k)

so each weight is rounded to within scale[n] / 2 of the float32 scale. The layer then keeps the scale in the model
dtype (gpt-fast stores `scales.to(mod.weight.dtype)` the same way): a bfloat16 scale is off by up to 2^-8 of itself
(half a unit in the last of its 8 significant bits), times |W_q| <= 127, so a dequantized weight is within
scale[n] / 2 + 127 x 2^-8 x scale[n] (about 1.0 x scale[n]) of W; layer 2's down_proj: at most 0.77 x, relative
error 0.835 % against 0.823 % with the float32 scale. The layer reads 1 byte per weight instead of 2
(bf16) or 4 (float32). Activations stay in the model dtype ("weight-only"): only the weights shrink. Decoding one
token is bound by how fast the weights stream from memory, so fewer bytes per weight can make it faster; whether
it does depends on the kernel (the lesson and lab of chapter 6 measure it).

Kernels: on the CPU, PyTorch's `torch.ops.aten._weight_int8pack_mm(x, W_q, scale)` (the op torchchat and torchao
use on the CPU; gpt-fast dequantizes and matmuls, fused by torch.compile) for float32 and bfloat16
activations, for steps of at most INT8PACK_MAX_ROWS rows (decode); elsewhere (more rows,
CUDA, other dtypes, a CPU or PyTorch where the op fails its probe) a plain dequantize-and-matmul: `F.linear(x, W_q.to(x.dtype)) * scale`.
Both compute the same product. (On the course's CPU, one thread, `_weight_int8pack_mm`'s time grew about in
proportion to the rows: from ~16 rows up the dequantize path was faster; course/labs/lab06.py's kernel_times measures it.)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from minimal_engine.hooks import quantizer as run_quantizer
from minimal_engine.checks import QUANTIZATION_METHODS, check_quantization  # noqa: F401 (the vocabulary: checks.py)
from minimal_engine.model.cpu_linears import fast_paths_allowed, probe_int8pack

INT8PACK_MAX_ROWS = 16     # rows (tokens) of a step up to which the CPU int8 kernel is used


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """W [N, K] float -> (W_q [N, K] int8, scale [N] float32): symmetric, one scale per output channel."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127.0                      # [N]
    w_q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)  # [N, K]
    return w_q, scale


def check_quantized(weight: torch.Tensor, w_q, scale) -> tuple[torch.Tensor, torch.Tensor]:
    """A quantizer's answer for weight [N, K] checked: w_q int8 [N, K] and scale [N], finite and positive;
    a clear ValueError otherwise (the chapter 6 exercise passes a learner's quantizer here)."""
    n, k = weight.shape
    if not (isinstance(w_q, torch.Tensor) and w_q.dtype == torch.int8 and tuple(w_q.shape) == (n, k)):
        got = f"{getattr(w_q, 'dtype', type(w_q).__name__)} {tuple(getattr(w_q, 'shape', ()))}"
        raise ValueError(f"quantizer must return w_q as an int8 tensor of shape {(n, k)}, got {got}")
    scale = torch.as_tensor(scale).float().reshape(-1) if isinstance(scale, torch.Tensor) else None
    if scale is None or scale.numel() != n or not bool(torch.isfinite(scale).all() and (scale > 0).all()):
        raise ValueError(f"quantizer must return scale as a tensor of {n} finite positive values (one per output "
                         "channel)")
    return w_q, scale


def int8pack_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """The CPU int8 weight kernel runs on this CPU and agrees with dequantize-and-matmul for this activation dtype
    (float32, bfloat16; float16 is never used on the CPU in this project): probed on tiny tensors
    (cpu_linears.probe_int8pack); MINIMAL_ENGINE_CPU_KERNELS=plain turns it off like every CPU fast path."""
    return (torch.device(device).type == "cpu" and dtype in (torch.float32, torch.bfloat16)
            and fast_paths_allowed() and probe_int8pack(dtype) is None)


class Int8Linear(nn.Module):
    """A drop-in for nn.Linear with an int8 weight [N, K] and a scale per output channel [N] (model dtype)."""

    def __init__(self, linear: nn.Linear, use_int8pack: bool | None = None, quantizer=None):
        super().__init__()
        w = linear.weight
        self.in_features, self.out_features = w.shape[1], w.shape[0]
        answer = run_quantizer(quantizer, w) if quantizer else quantize_int8(w)   # on a copy
        w_q, scale = check_quantized(w, *answer)
        self.register_buffer("weight_int8", w_q.to(w.device).contiguous())       # [N, K] int8
        self.register_buffer("scales", scale.to(device=w.device, dtype=w.dtype))  # [N]
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self.use_int8pack = int8pack_supported(w.device, w.dtype) if use_int8pack is None else use_int8pack

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)                                  # [M, K]
        if self.use_int8pack and x2.shape[0] <= INT8PACK_MAX_ROWS:
            y = torch.ops.aten._weight_int8pack_mm(x2.contiguous(), self.weight_int8, self.scales)  # [M, N]
        else:
            y = F.linear(x2, self.weight_int8.to(x.dtype)) * self.scales   # dequantize, then matmul
        if self.bias is not None:
            y = y + self.bias
        return y.view(*lead, self.out_features)

    def extra_repr(self) -> str:
        kernel = "_weight_int8pack_mm" if self.use_int8pack else "dequantize+matmul"
        return f"in={self.in_features}, out={self.out_features}, int8 per output channel, kernel={kernel}"


def quantize_model(model: nn.Module, method: str | None = "int8", lm_head: bool = True,
                   use_int8pack: bool | None = None, quantizer=None) -> nn.Module:
    """Replace every nn.Linear of the model (lm_head too unless lm_head=False) by an Int8Linear, in place.
    A tied lm_head keeps its float embedding table (the input side still looks tokens up in it).
    quantizer: W [N, K] -> (W_q int8 [N, K], scale [N]); None is quantize_int8 (chapter 6's exercise passes its own)."""
    check_quantization(method)
    if method is None:
        if quantizer is not None:
            raise ValueError("a quantizer was given with quantization=None: pass quantization='int8' to use it")
        return model
    if use_int8pack is None:                       # probe once for the whole model
        w = next((m.weight for m in model.modules() if isinstance(m, nn.Linear)), None)
        use_int8pack = w is not None and int8pack_supported(w.device, w.dtype)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and (lm_head or name != "lm_head"):
                setattr(parent, name, Int8Linear(child, use_int8pack, quantizer))
    return model


def weight_bytes(model: nn.Module) -> dict:
    """Bytes of the model's tensors: linear weights (int8 + scales when quantized), embeddings and the rest."""
    seen, out = set(), {"linear": 0, "other": 0}
    for mod in model.modules():
        tensors = list(mod.named_parameters(recurse=False)) + list(mod.named_buffers(recurse=False))
        for name, t in tensors:
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            linear = isinstance(mod, (nn.Linear, Int8Linear)) and name in ("weight", "weight_int8", "scales")
            out["linear" if linear else "other"] += t.numel() * t.element_size()
    out["total"] = out["linear"] + out["other"]
    return out
