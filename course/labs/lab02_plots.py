"""Plots of chapter 2's lab (``course.labs.lab02``'s results; Japanese labels; each returns a matplotlib Figure).

- ``plot_roofline(res)``: the measured machine's roofline (log-log: FLOPs per byte vs FLOP/s) with every
  measured engine step as a point (achieved FLOP/s = FLOPs / measured time), and next to it predicted vs
  measured step time. ``gpu`` adds a datasheet GPU's roofline and the same steps predicted on it (予測).
- ``plot_gpu_rooflines(gpus, machine)``: the datasheet GPUs and, optionally, this machine on one roofline.
- ``plot_threads(rows)``: GFLOP/s and GB/s against the thread count.
"""
from __future__ import annotations

from course.labkit.charts import figure
from course.labs.lab02 import predict_on_gpu
from minimal_engine.bench import roofline

DECODE, PREFILL = "tab:blue", "tab:orange"
GPU_COLORS = {"A100": "tab:gray", "H100": "tab:green", "H200": "tab:olive", "B200": "tab:purple",
              "MI300X": "tab:red", "MI355X": "tab:brown", "GB200": "tab:pink"}


def draw_roof(ax, machine: dict, flops_key: str, label: str, color="black", x_range=(0.05, 5000), style="-"):
    """One roofline: the sloped part (bandwidth x intensity) up to the ridge point, then flat at the peak."""
    import numpy as np
    xs = np.logspace(np.log10(x_range[0]), np.log10(x_range[1]), 200)
    ys = [roofline.attainable_flops(x, machine, flops_key) for x in xs]
    ax.plot(xs, ys, style, color=color, linewidth=1.6, label=label)
    ridge = roofline.ridge_point(machine, flops_key)
    ax.plot([ridge], [machine[flops_key]], marker="|", markersize=12, color=color)
    return ridge


def _points(ax, pts, key_flops: str, filled: bool, label_prefix: str = ""):
    for kind, color, marker in (("decode", DECODE, "o"), ("prefill", PREFILL, "s")):
        sel = [p for p in pts if p["kind"] == kind]
        if not sel:
            continue
        name = "Decode（バッチ B）" if kind == "decode" else "Prefill（N トークン）"
        ax.scatter([p["intensity"] for p in sel], [p[key_flops] for p in sel], marker=marker, s=36, zorder=3,
                   color=color if filled else "none", edgecolors=color, label=f"{label_prefix}{name}")
        for p in sel:
            ax.annotate(f"{'B' if kind == 'decode' else 'N'}={p['size']}", (p["intensity"], p[key_flops]),
                        textcoords="offset points", xytext=(4, -10 if kind == "decode" else 5), fontsize=7,
                        color=color)


def plot_roofline(res: dict, gpu: str | None = None):
    """Left: the roofline with the measured steps. Right: predicted vs measured time per step."""
    fig, (ax, bx) = figure(13, 5.2, 1, 2)
    m, key = res["machine"], res["flops_key"]
    ridge = draw_roof(ax, m, key, f"このマシン（{key.split('_')[1]}・実測ピーク）")
    _points(ax, res["points"], "achieved_flops", True, "実測 ")
    if gpu:
        gm = roofline.gpu_machine(gpu)
        g_ridge = draw_roof(ax, gm, "flops_bf16", f"{gpu}（データシート・予測）", GPU_COLORS.get(gpu, "gray"),
                            style="--")
        pred = predict_on_gpu(res, gpu)
        for p in pred:
            p["attainable"] = roofline.attainable_flops(p["intensity"], gm, "flops_bf16")
        _points(ax, pred, "attainable", False, f"{gpu} 予測・BF16 ")
        ax.set_title(f"ルーフライン: このマシン（リッジ {ridge:.1f} FLOP/B）と {gpu}（予測、リッジ {g_ridge:.1f} FLOP/B）",
                     fontsize=10)
    else:
        ax.set_title(f"このマシンのルーフライン（リッジポイント {ridge:.1f} FLOP/B）と実測したステップ", fontsize=10)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("演算強度 [FLOP/バイト]")
    ax.set_ylabel("演算性能 [FLOP/s]（点は FLOPs ÷ 実測時間）")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")

    pts = res["points"]
    lo = min(min(p["predicted_ms"], p["measured_ms_min"]) for p in pts)
    hi = max(max(p["predicted_ms"], p["measured_ms_max"]) for p in pts)
    bx.plot([lo * 0.8, hi * 1.2], [lo * 0.8, hi * 1.2], color="gray", linestyle=":", label="実測 = 予測")
    for kind, color, marker in (("decode", DECODE, "o"), ("prefill", PREFILL, "s")):
        sel = [p for p in pts if p["kind"] == kind]
        if sel:
            bx.errorbar([p["predicted_ms"] for p in sel], [p["measured_ms"] for p in sel],
                        yerr=[[p["measured_ms"] - p["measured_ms_min"] for p in sel],
                              [p["measured_ms_max"] - p["measured_ms"] for p in sel]],
                        fmt=marker, color=color, capsize=3, label="Decode" if kind == "decode" else "Prefill")
            for p in sel:
                bx.annotate(f"{'B' if kind == 'decode' else 'N'}={p['size']}", (p["predicted_ms"], p["measured_ms"]),
                            textcoords="offset points", xytext=(4, 3), fontsize=7, color=color)
    bx.set_xscale("log")
    bx.set_yscale("log")
    bx.set_xlabel("予測時間 [ms]（max(FLOPs ÷ ピーク, バイト ÷ 帯域)）")
    bx.set_ylabel("実測時間 [ms]（中央値、縦線は最小〜最大）")
    bx.set_title("予測と実測: 点線より上は、ルーフラインの上限より遅い分", fontsize=10)
    bx.grid(True, which="both", alpha=0.3)
    bx.legend(fontsize=8)
    return fig


def plot_gpu_rooflines(gpus, machine: dict | None = None, flops_key: str = "flops_bf16", marks=()):
    """Datasheet GPUs (dense BF16, HBM) on one roofline; ``machine`` adds this machine's measured roof.
    ``marks``: (label, intensity) vertical lines, e.g. decode at batch 1 or a prefill chunk."""
    fig, ax = figure(9, 5.2)
    for g in gpus:
        gm = roofline.gpu_machine(g)
        draw_roof(ax, gm, "flops_bf16", f"{g}（リッジ {roofline.ridge_point(gm):.1f} FLOP/B）", GPU_COLORS.get(g, "gray"))
    if machine is not None:
        draw_roof(ax, machine, flops_key, f"このマシン（実測、リッジ {roofline.ridge_point(machine, flops_key):.1f} FLOP/B）",
                  "black", style="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for label, x in marks:   # labels in axes-fraction height, so they stay on the log axis (review_ch1_3 #25)
        ax.axvline(x, color="0.5", linestyle=":", linewidth=1)
        ax.text(x, 0.02, f" {label}", transform=ax.get_xaxis_transform(), fontsize=8, rotation=90,
                color="0.3", va="bottom", ha="left")
    ax.set_xlabel("演算強度 [FLOP/バイト]")
    ax.set_ylabel("到達できる演算性能 [FLOP/s]")
    ax.set_title("ルーフライン: 左の斜めの部分は帯域律速、右の平らな部分は演算律速（縦の印がリッジポイント）", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def plot_threads(rows: list[dict]):
    """GFLOP/s (fp32 and bf16 matmul) and GB/s against the thread count."""
    fig, (ax, bx) = figure(10, 3.8, 1, 2)
    t = [r["threads"] for r in rows]
    ax.plot(t, [r["flops_fp32"] / 1e9 for r in rows], "o-", label="行列積 fp32")
    ax.plot(t, [r["flops_bf16"] / 1e9 for r in rows], "s-", label="行列積 bf16")
    ax.set_xlabel("スレッド数")
    ax.set_ylabel("GFLOP/s")
    ax.set_title("演算性能とスレッド数", fontsize=10)
    ax.legend(fontsize=8)
    bx.plot(t, [r["bandwidth"] / 1e9 for r in rows], "o-", color="tab:green", label="帯域（コピー・和・行列ベクトル積の最大）")
    bx.set_xlabel("スレッド数")
    bx.set_ylabel("GB/s")
    bx.set_title("メモリ帯域とスレッド数", fontsize=10)
    bx.legend(fontsize=8)
    for a in (ax, bx):
        a.set_xticks(t)
        a.set_ylim(bottom=0)
        a.grid(True, alpha=0.3)
    return fig


__all__ = ["draw_roof", "plot_gpu_rooflines", "plot_roofline", "plot_threads"]
