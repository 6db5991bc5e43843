"""Lab 5's control panel: the shared slider panel of lab 4 (``course.lab4_panel.SliderLabApp``) wired to
``course.lab5.run_batching_lab``. Stable names for the browser test: 「実行」, ``lab-readout``,
``lab-history``, the slider 「プロンプト長」 (the history shows the prompt length of each run)."""
from __future__ import annotations

from course.lab4_panel import SliderLabApp


def Lab5App(prompt_len=None, concurrency=None, num_requests=None, output_len=None, repeats=None,
            csv_name="lab5_history.csv") -> SliderLabApp:
    from course import lab5
    d = lab5.defaults()
    sliders = [("prompt_len", "プロンプト長", prompt_len or d["prompt_len"], lab5.PROMPT_LEN_RANGE),
               ("concurrency", "同時リクエスト数", concurrency or d["concurrency"], lab5.CONCURRENCY_RANGE),
               ("num_requests", "リクエスト数", num_requests or d["num_requests"], lab5.NUM_REQUESTS_RANGE),
               ("output_len", "出力長（最大）", output_len or d["output_len"], lab5.OUTPUT_LEN_RANGE)]
    return SliderLabApp(lab5, lab5.run_batching_lab, sliders, "plot_run",
                        lab5.default_repeats() if repeats is None else repeats, csv_name,
                        "実行中…（3つの方式で同じリクエストを処理します）")


__all__ = ["Lab5App"]
