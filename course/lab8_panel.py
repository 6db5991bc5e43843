"""Lab 8's control panel: the shared slider panel of lab 4 (``course.lab4_panel.SliderLabApp``) wired to
``course.lab8.run_spec_lab``. Stable names for the browser test: 「実行」, ``lab-readout``,
``lab-history``, the slider 「プロンプト長」 (the history shows the prompt length of each run)."""
from __future__ import annotations

from functools import partial

from course.lab4_panel import SliderLabApp


def Lab8App(prompt_len=None, k=None, concurrency=None, output_len=None, text="repetitive", repeats=None,
            csv_name="lab8_history.csv") -> SliderLabApp:
    from course import lab8
    d = lab8.defaults()
    sliders = [("prompt_len", "プロンプト長", prompt_len or d["prompt_len"], lab8.PROMPT_LEN_RANGE),
               ("k", "投機トークン数 k", k or d["k"], lab8.K_RANGE),
               ("concurrency", "同時リクエスト数", concurrency or d["concurrency"], lab8.CONCURRENCY_RANGE),
               ("output_len", "出力長", output_len or d["output_len"], lab8.OUTPUT_LEN_RANGE)]
    return SliderLabApp(lab8, partial(lab8.run_spec_lab, text=text), sliders, "plot_run",
                        lab8.default_repeats() if repeats is None else repeats, csv_name,
                        "実行中…（投機なし・n-gram・ドラフトモデルで同じリクエストを処理します）")


__all__ = ["Lab8App"]
