"""Lab 6's control panel: the shared slider panel of lab 4 (``course.lab4_panel.SliderLabApp``) wired to
``course.lab6.run_quant_lab``. Stable names for the browser test: 「実行」, ``lab-readout``,
``lab-history``, the slider 「プロンプト長」 (the history shows the prompt length of each run)."""
from __future__ import annotations

from course.lab4_panel import SliderLabApp


def Lab6App(prompt_len=None, output_len=None, batch=None, repeats=None, csv_name="lab6_history.csv") -> SliderLabApp:
    from course import lab6
    d = lab6.defaults()
    sliders = [("prompt_len", "プロンプト長", prompt_len or d["prompt_len"], lab6.PROMPT_LEN_RANGE),
               ("output_len", "出力長", output_len or d["output_len"], lab6.OUTPUT_LEN_RANGE),
               ("batch", "バッチサイズ", batch or d["batch"], lab6.BATCH_RANGE)]
    return SliderLabApp(lab6, lab6.run_quant_lab, sliders, "plot_run",
                        lab6.default_repeats() if repeats is None else repeats, csv_name,
                        "実行中…（BF16 と INT8 を交互に、バッチ 1 とバッチ B で測ります）")


__all__ = ["Lab6App"]
