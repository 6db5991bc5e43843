"""Plots for the lessons and labs, with Japanese labels.

A plot is a function of data: the numbers come from
``minimal_engine.calculators``; these helpers only draw them. Call
``setup_japanese_font()`` once per notebook (each helper also calls it).
"""
from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
from matplotlib import font_manager

from minimal_engine import calculators as calc

JAPANESE_FONT = "IPAexGothic"   # bundled with the matplotlib-fontja package


def setup_japanese_font() -> str:
    """Make matplotlib draw Japanese text with the IPAexGothic font from ``matplotlib-fontja``.

    The font ships inside the pip package, so this works on a fresh machine
    or Colab without system fonts or downloads. Returns the font file path.
    """
    import matplotlib_fontja  # noqa: F401  (importing it registers the font)

    path = matplotlib_fontja.get_font_ttf_path()
    if JAPANESE_FONT not in {f.name for f in font_manager.fontManager.ttflist}:
        font_manager.fontManager.addfont(path)
    matplotlib.rcParams["font.family"] = [JAPANESE_FONT, "DejaVu Sans"]
    matplotlib.rcParams["axes.unicode_minus"] = False   # ASCII '-' for negative ticks
    return path


def _new_axes(ax, figsize):
    setup_japanese_font()
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def plot_kv_bytes_per_token(models=None, dtype: str = "bf16", ax=None):
    """Horizontal bars: KV cache KB per token for each model (MLA counted with its own formula)."""
    models = list(models or calc.MODEL_SHAPES)
    values_kb = [calc.kv_bytes_per_token(m, dtype) / 1e3 for m in models]
    ax = _new_axes(ax, (7, 0.5 * len(models) + 1.5))
    bars = ax.barh(models, values_kb, color="tab:blue")
    ax.bar_label(bars, labels=[f"{v:,.1f} KB" for v in values_kb], padding=3)
    ax.invert_yaxis()
    ax.set_xlabel(f"1トークンあたりの KV キャッシュ [KB] ({dtype})")
    ax.set_title("モデルごとの KV キャッシュ (1トークンあたり)")
    ax.set_xlim(0, max(values_kb) * 1.25)
    return ax


def plot_kv_cache_vs_tokens(models=None, max_tokens: int = 131_072, dtype: str = "bf16",
                            gpu: str | None = None, ax=None):
    """Lines: KV cache GB of one request against its length; optionally a GPU's HBM as a line."""
    models = list(models or calc.MODEL_SHAPES)
    tokens = [max_tokens * i // 64 for i in range(65)]
    ax = _new_axes(ax, (7, 4))
    for m in models:
        ax.plot(tokens, [calc.kv_cache_bytes(m, t, dtype) / 1e9 for t in tokens], label=m)
    if gpu is not None:
        ax.axhline(calc.get_gpu_spec(gpu).memory_gb, color="gray", linestyle="--",
                   label=f"{gpu} の HBM 容量")
    ax.set_xlabel("系列長 [トークン]")
    ax.set_ylabel(f"KV キャッシュ [GB] ({dtype})")
    ax.set_title("1リクエストの KV キャッシュと系列長")
    ax.legend()
    return ax


def plot_sweep_medians(rows, ax=None):
    """Output tok/s (y) against tok/s/user (x), one point per concurrency, with min-max bars over repeats.

    ``rows``: dicts with ``concurrency`` and, for ``tok_s`` and ``tok_s_per_user``, the median under the
    plain key and the spread under ``<key>_min`` / ``<key>_max`` (as the lesson's repeat helper returns).
    The bars show how much a point moved between repeats: a difference smaller than them is noise.
    """
    ax = _new_axes(ax, (7, 4.5))
    xs = [r["tok_s_per_user"] for r in rows]
    ys = [r["tok_s"] for r in rows]
    xerr = [[x - r["tok_s_per_user_min"] for x, r in zip(xs, rows)],
            [r["tok_s_per_user_max"] - x for x, r in zip(xs, rows)]]
    yerr = [[y - r["tok_s_min"] for y, r in zip(ys, rows)], [r["tok_s_max"] - y for y, r in zip(ys, rows)]]
    ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="o-", color="tab:blue", ecolor="0.6", capsize=3,
                label="中央値（線は最小〜最大）")
    for r, x, y in zip(rows, xs, ys):
        ax.annotate(f"同時 {r['concurrency']}", (x, y), textcoords="offset points", xytext=(6, 4), fontsize=9)
    ax.set_xlabel("tok/s/user（1リクエストあたりの速さ・インタラクティビティ）")
    ax.set_ylabel("出力 tok/s（システム全体・スループット）")
    ax.set_title("同時リクエスト数のスイープ（繰り返しの中央値）")
    ax.set_xlim(0, max(r["tok_s_per_user_max"] for r in rows) * 1.2)
    ax.set_ylim(0, max(r["tok_s_max"] for r in rows) * 1.2)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    return ax
