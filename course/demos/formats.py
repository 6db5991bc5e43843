"""第6章: 数値フォーマットの値の格子（グリッド）と、実際の重み行列での丸め誤差。

Plain functions used by lesson 6, lab 6 and the quiz (tests/course/test_lab06.py checks the grids)::

    grid("fp8_e4m3")          # every finite value of float8 e4m3fn (from torch's own dtype): max 448
    grid("fp8_e5m2")          # float8 e5m2 (torch's dtype): max 57344
    grid("e2m1")              # FP4 E2M1, emulated: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}
    grid("int4"), grid("int8")
    fake_quantize(w, "mxfp4")  # w [N, K] -> the values the format can store (same shape), and bits per value
    rounding_table(w)          # every format on one matrix: relative error, bits per weight (scales included)

Formats and their scales (what `fake_quantize` emulates, along the last dimension K, the inputs of a row):
  * "int8_tensor": INT8, one float32 scale for the whole matrix (amax / 127), kept and applied in float32.
  * "int8_channel": INT8, one scale per output row, as quantization.py and gpt-fast: rounded with the float32
            scale, stored (and dequantized) with it in BF16.
  * "fp8_e4m3_tensor": FP8 e4m3, one float32 scale for the whole matrix (amax / 448); torch's float8 cast rounds.
  The bits per weight count every scale the same way: a float32 scale for the whole tensor adds 32 / numel.
  * "int4_channel" / "int4_g32": INT4 in [-7, 7] (symmetric: the type's -8 is not used), one scale per output row /
            per group of 32 values (amax / 7), the scale in bf16 (gpt-fast's int4 uses groups of 32 with a scale and a zero point: asymmetric).
  * "mxfp4": OCP Microscaling MXFP4: E2M1 values, one E8M0 scale (a power of two) per block of 32;
            scale = 2^(floor(log2(amax)) - 2) (2 = the largest exponent of E2M1), values beyond 6 clip.
  * "nvfp4": NVIDIA NVFP4: E2M1 values, one FP8 e4m3 scale per block of 16 (amax / 6, rounded to e4m3), and
            one float32 scale for the whole tensor so that the block scales fit e4m3's range.
FP4 (E2M1) has no torch arithmetic on the CPU: its grid is built here from the bit layout (1 sign, 2 exponent,
1 mantissa bit, bias 1) and values round to the nearest grid point; the same builder reproduces torch's FP8 grids
(a test compares them), which is what makes the emulation trustworthy.
"""
from __future__ import annotations

from pathlib import Path

import torch

FORMATS = {  # name -> (label, bits per stored value)
    "bf16": ("BF16（基準）", 16),
    "int8_tensor": ("INT8・テンソル全体で1つのスケール", 8),
    "int8_channel": ("INT8・出力チャネルごとのスケール", 8),
    "fp8_e4m3_tensor": ("FP8 e4m3・テンソル全体で1つのスケール", 8),
    "int4_channel": ("INT4・出力チャネルごとのスケール", 4),
    "int4_g32": ("INT4・32 個ごとのスケール", 4),
    "mxfp4": ("MXFP4（E2M1 + 32 個ごとの E8M0 スケール）", 4),
    "nvfp4": ("NVFP4（E2M1 + 16 個ごとの FP8 スケール）", 4),
}
GRIDS = ("fp8_e4m3", "fp8_e5m2", "e2m1", "int8", "int4")


def minifloat_grid(exp_bits: int, man_bits: int, bias: int, max_value: float | None = None) -> torch.Tensor:
    """All finite values of a sign + exp_bits + man_bits float (IEEE-style subnormals at exponent 0), sorted.
    `max_value` cuts codes the format reserves (e4m3fn: 448; e5m2 reserves its top exponent for inf/NaN)."""
    vals = set()
    for e in range(2 ** exp_bits):
        for m in range(2 ** man_bits):
            frac = m / 2 ** man_bits
            v = frac * 2.0 ** (1 - bias) if e == 0 else (1 + frac) * 2.0 ** (e - bias)
            if max_value is None or v <= max_value:
                vals.update((v, -v))
    return torch.tensor(sorted(vals), dtype=torch.float64)


def torch_float8_grid(dtype: torch.dtype) -> torch.Tensor:
    """Every finite value of a torch float8 dtype, from its 256 bit patterns (NaN and inf dropped), sorted."""
    v = torch.arange(256, dtype=torch.uint8).view(dtype).to(torch.float64)
    return torch.unique(v[torch.isfinite(v)])          # +0 and -0 are one value


def grid(name: str) -> torch.Tensor:
    """The values a format can hold (without its scale), sorted."""
    if name == "fp8_e4m3":
        return torch_float8_grid(torch.float8_e4m3fn)
    if name == "fp8_e5m2":
        return torch_float8_grid(torch.float8_e5m2)
    if name == "e2m1":
        return minifloat_grid(2, 1, 1)
    if name == "int8":
        return torch.arange(-127, 128, dtype=torch.float64)
    if name == "int4":
        return torch.arange(-7, 8, dtype=torch.float64)        # symmetric, as INT8's [-127, 127]: -8 is not used
    raise ValueError(f"未知のフォーマット {name!r}（{', '.join(GRIDS)}） / unknown grid {name!r}")


def round_to_grid(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Each value of x -> the nearest value of the sorted grid g (values beyond the ends clip to them)."""
    xd = x.double().clamp(g[0], g[-1])
    hi = torch.searchsorted(g, xd.contiguous()).clamp(1, len(g) - 1)
    lo_v, hi_v = g[hi - 1], g[hi]
    return torch.where(xd - lo_v <= hi_v - xd, lo_v, hi_v).to(x.dtype)


def _blocks(w: torch.Tensor, size: int) -> torch.Tensor:
    n, k = w.shape
    if k % size:
        raise ValueError(f"K={k} は {size} で割り切れません / K must be a multiple of the block size {size}")
    return w.reshape(n, k // size, size)


def fake_quantize(w: torch.Tensor, fmt: str) -> tuple[torch.Tensor, float]:
    """w [N, K] float -> (the stored values, dequantized [N, K] float32; bits per weight including scales)."""
    w = w.float()
    k = w.shape[1]
    if fmt == "bf16":
        return w.to(torch.bfloat16).float(), 16.0
    if fmt == "int8_tensor":                                           # one float32 scale
        s = w.abs().max().clamp_min(1e-12) / 127
        return (w / s).round().clamp(-127, 127) * s, 8 + 32 / w.numel()
    if fmt == "int8_channel":             # as the engine's Int8Linear and gpt-fast: round with the float32 scale,
        s = w.abs().amax(1, keepdim=True).clamp_min(1e-12) / 127          # keep the scale in BF16
        return (w / s).round().clamp(-127, 127) * s.to(torch.bfloat16).float(), 8 + 16 / k
    if fmt == "fp8_e4m3_tensor":
        s = w.abs().max().clamp_min(1e-12) / 448
        return (w / s).to(torch.float8_e4m3fn).float() * s, 8 + 32 / w.numel()   # one float32 scale, as int8_tensor
    if fmt in ("int4_g32", "int4_channel"):
        g = 32 if fmt == "int4_g32" else k
        b = _blocks(w, g)
        s = (b.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 7).to(torch.bfloat16).float()
        return ((b / s).round().clamp(-7, 7) * s).reshape_as(w), 4 + 16 / g
    if fmt == "mxfp4":
        b = _blocks(w, 32)
        amax = b.abs().amax(-1, keepdim=True).clamp_min(2.0 ** -126)
        s = 2.0 ** (torch.floor(torch.log2(amax)) - 2)                     # E8M0: a power of two
        return (round_to_grid(b / s, grid("e2m1")) * s).reshape_as(w), 4 + 8 / 32
    if fmt == "nvfp4":
        b = _blocks(w, 16)
        g = w.abs().max().clamp_min(1e-12) / (6 * 448)                    # float32 scale of the tensor
        s = (b.abs().amax(-1, keepdim=True) / 6 / g).to(torch.float8_e4m3fn).float().clamp_min(2.0 ** -9) * g
        return (round_to_grid(b / s, grid("e2m1")) * s).reshape_as(w), 4 + 8 / 16
    raise ValueError(f"未知のフォーマット {fmt!r}（{', '.join(FORMATS)}） / unknown format {fmt!r}")


def relative_error(w: torch.Tensor, wq: torch.Tensor) -> float:
    """||wq - w|| / ||w|| (Frobenius): the share of the matrix the rounding changes."""
    return float((wq - w.float()).norm() / w.float().norm())


def rounding_table(w: torch.Tensor, formats=tuple(FORMATS)) -> list[dict]:
    """For each format: bits per weight (scales included), relative error, largest error of one weight."""
    rows = []
    for f in formats:
        wq, bits = fake_quantize(w, f)
        rows.append(dict(format=f, label=FORMATS[f][0], bits=bits, rel_error=relative_error(w, wq),
                         max_abs_error=float((wq - w.float()).abs().max())))
    return rows


def default_weight(name: str = "model.layers.2.mlp.down_proj.weight") -> torch.Tensor:
    """A weight matrix of the default model (float32 as saved), e.g. layer 2's down_proj [320, 864]."""
    from safetensors.torch import load_file
    from minimal_engine.llm import DEFAULT_MODEL
    tensors = load_file(str(Path(DEFAULT_MODEL) / "model.safetensors"))
    if name not in tensors:
        raise ValueError(f"{name!r} はありません。例: {sorted(tensors)[:4]} / no such tensor")
    return tensors[name]


def weight_names() -> list[str]:
    from safetensors import safe_open
    from minimal_engine.llm import DEFAULT_MODEL
    with safe_open(str(Path(DEFAULT_MODEL) / "model.safetensors"), "pt") as f:
        return sorted(n for n in f.keys() if f.get_slice(n).get_shape().__len__() == 2)


def plot_grid(names=("fp8_e4m3", "e2m1", "int4"), xlim: float | None = 8.0):
    """Number lines of the grids (positive half), one row per format: where the representable values lie."""
    from course.labkit.charts import figure
    fig, ax = figure(9, 0.9 + 0.6 * len(names))
    for i, n in enumerate(names):
        g = grid(n)
        g = g[g >= 0]
        if xlim is not None:
            g = g[g <= xlim]
        ax.scatter(g.numpy(), [i] * len(g), s=12, marker="|" if len(g) > 40 else "o")
    ax.set_yticks(range(len(names)), list(names))
    ax.set_xlabel("値（スケールをかける前）")
    ax.grid(alpha=0.3, axis="x")
    ax.set_ylim(-0.7, len(names) - 0.3)
    return fig


__all__ = ["FORMATS", "GRIDS", "default_weight", "fake_quantize", "grid", "minifloat_grid", "plot_grid",
           "relative_error", "round_to_grid", "rounding_table", "torch_float8_grid", "weight_names"]
