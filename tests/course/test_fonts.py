"""Japanese text in matplotlib: the bundled font is used and no glyph is missing."""
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager  # noqa: E402

from course import plots  # noqa: E402
from minimal_engine import calculators as calc  # noqa: E402

JAPANESE = "推論のスループットとレイテンシ"


def test_resolved_font_is_the_bundled_japanese_font():
    path = plots.setup_japanese_font()
    resolved = font_manager.findfont(font_manager.FontProperties(family=matplotlib.rcParams["font.family"]),
                                     fallback_to_default=False)
    assert resolved == path
    assert resolved.endswith("ipaexg.ttf")
    font = font_manager.get_font(resolved)
    cmap = font.get_charmap()
    for ch in JAPANESE + "デコード KVキャッシュ トークン 秒":
        assert ord(ch) in cmap or ch == " ", f"{ch!r} has no glyph in {resolved}"


def test_japanese_figure_draws_without_missing_glyph_warnings():
    plots.setup_japanese_font()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig, ax = plt.subplots()
        ax.plot([0, 1, 2], [-1, 0, 1])
        ax.set_title(JAPANESE)
        ax.set_xlabel("プロンプト長 [トークン]")
        ax.set_ylabel("TTFT [ミリ秒]")
        ax.set_xticks([0, 1, 2], ["短い", "中くらい", "長い"])
        fig.canvas.draw()
        plt.close(fig)


def test_plot_helpers_draw_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ax = plots.plot_kv_bytes_per_token()
        ax.figure.canvas.draw()
        assert len(ax.patches) == len(calc.MODEL_SHAPES)     # one bar per model in the table
        ax2 = plots.plot_kv_cache_vs_tokens(["Llama 3.1 8B", "DeepSeek R1"], gpu="H100")
        ax2.figure.canvas.draw()
        assert len(ax2.get_lines()) == 3
    plt.close("all")
