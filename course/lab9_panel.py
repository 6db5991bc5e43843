"""Lab 9's control panel: the shared slider panel of lab 4 (``course.lab4_panel.SliderLabApp``) wired to
``course.lab9.run_interference_lab``. Stable names for the browser test: 「実行」, ``lab-readout``,
``lab-history``, the slider 「プロンプト長」 (here the long prompt's length; the history shows it per run)."""
from __future__ import annotations

from course.lab4_panel import SliderLabApp


def Lab9App(prompt_len=None, num_decodes=None, output_len=None, num_long=None, repeats=None,
            csv_name="lab9_history.csv") -> SliderLabApp:
    from course import lab9
    d = lab9.defaults()
    sliders = [("prompt_len", "プロンプト長", prompt_len or d["prompt_len"], (lab9.PROMPT_LEN_RANGE[0], 448)),
               ("num_decodes", "デコード中の件数", num_decodes or d["num_decodes"], lab9.NUM_DECODES_RANGE),
               ("output_len", "出力長", output_len or d["output_len"], lab9.OUTPUT_LEN_RANGE),
               ("num_long", "長いプロンプトの数", num_long or d["num_long"], lab9.NUM_LONG_RANGE)]
    return SliderLabApp(lab9, lab9.run_interference_lab, sliders, "plot_run",
                        lab9.default_repeats() if repeats is None else repeats, csv_name,
                        "実行中…（チャンク予算ごとの1エンジンと、Disaggregation の2プロセスで同じ流れを処理します）")


__all__ = ["Lab9App"]
