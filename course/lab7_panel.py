"""Lab 7's control panel: the shared slider panel of lab 4 (``course.lab4_panel.SliderLabApp``) wired to
``course.lab7.run_tp_lab``. Stable names for the browser test: 「実行」, ``lab-readout``, ``lab-history``, the
slider 「プロンプト長」 (the history shows the prompt length of each run)."""
from __future__ import annotations

from course.lab4_panel import SliderLabApp


def Lab7App(prompt_len=None, batch_size=None, tp=None, repeats=None, csv_name="lab7_history.csv") -> SliderLabApp:
    from course import lab7
    d = lab7.defaults()
    sliders = [("prompt_len", "プロンプト長", prompt_len or d["prompt_len"], lab7.PROMPT_LEN_RANGE),
               ("batch_size", "バッチサイズ（デコード）", batch_size or d["batch_size"], lab7.BATCH_RANGE),
               ("tp", "TP の並列数", tp or d["tp"], lab7.TP_RANGE)]
    return SliderLabApp(lab7, lab7.run_tp_lab, sliders, "plot_run",
                        lab7.default_repeats() if repeats is None else repeats, csv_name,
                        "実行中…（TP=1 と TP=N を交互に測ります。初回はワーカーの起動に数秒かかります）")


__all__ = ["Lab7App"]
