"""Lab 10's control panel: the shared slider panel of lab 4 (``course.lab4_panel.SliderLabApp``) wired to
``course.lab10.run_pareto_lab``. Stable names for the browser test: 「実行」, ``lab-readout``,
``lab-history``, the slider 「プロンプト長」 (the history shows the prompt length of each run)."""
from __future__ import annotations

from course.lab4_panel import SliderLabApp


def Lab10App(prompt_len=None, output_len=None, max_concurrency=None, repeats=None,
             csv_name="lab10_history.csv") -> SliderLabApp:
    from course import lab10
    d = lab10.defaults()
    sliders = [("prompt_len", "プロンプト長", prompt_len or d["prompt_len"], lab10.PROMPT_LEN_RANGE),
               ("output_len", "出力長", output_len or d["output_len"], lab10.OUTPUT_LEN_RANGE),
               ("max_concurrency", "最大同時リクエスト数", max_concurrency or d["max_concurrency"],
                lab10.MAX_CONCURRENCY_RANGE)]
    return SliderLabApp(lab10, lab10.run_pareto_lab, sliders, "plot_run",
                        lab10.default_repeats() if repeats is None else repeats, csv_name,
                        "実行中…（同時リクエスト数のスイープを測り、シミュレーターで予測します）")


__all__ = ["Lab10App"]
