"""Lab 3's control panel: sliders, the kit's repeats and threads, readout, history and CSV export.

It only wires widgets to ``course.labs.lab03``'s functions. Stable names for the browser test: the run button
「実行」, the readout's DOM class ``lab-readout``, the history's ``lab-history``, the slider 「プロンプト長」.
"""
from __future__ import annotations

import html

from course.labs import lab03
from course.labkit.measure import REPEATS_RANGE
from course.panels.controls import HistoryExport
from course.tooling.notebooks import PANEL_PLACEHOLDER, widget_bundle
from course.runtime import course_threads


class Lab3App(HistoryExport):
    """``run_button.click()`` (``on_run()``) runs ``lab03.run_kv_lab``; ``last_result``, ``last_figure`` and
    ``history`` keep what was shown; ``on_save()`` writes the history as CSV."""

    def __init__(self, model="default", device=None, prompt_len=None, output_len=None, repeats=None,
                 csv_name="lab3_history.csv"):
        import os

        import ipywidgets as w
        d = lab03.defaults()
        style, layout = {"description_width": "9em"}, w.Layout(width="32em")

        def slider(value, rng, label):
            return w.IntSlider(value=value, min=rng[0], max=rng[1], description=label, style=style, layout=layout,
                               continuous_update=False)
        self.prompt_len = slider(prompt_len or d["prompt_len"], lab03.PROMPT_LEN_RANGE, "プロンプト長")
        self.output_len = slider(output_len or d["output_len"], lab03.OUTPUT_LEN_RANGE, "出力長")
        self.repeats = slider(lab03.default_repeats() if repeats is None else repeats, REPEATS_RANGE, "繰り返し")
        cores = os.cpu_count() or 1
        self.threads = slider(min(course_threads(), cores), (1, max(cores, course_threads())), "スレッド数")
        choices = list(lab03.MODEL_CHOICES.items())
        self.model = w.Dropdown(options=choices, value=model, description="モデル", style=style, layout=layout)
        devices = lab03.available_devices()
        self.device = w.Dropdown(options=devices, value=device or devices[-1], description="デバイス", style=style,
                                 layout=layout)
        self.run_button = w.Button(description="実行", button_style="primary", icon="play")
        self.progress = w.IntProgress(value=0, min=0, max=1, description="進行", style=style)
        self.status = w.HTML("")
        export = self.build_history(lab03.history_html, lab03.history_csv, csv_name, style, layout)
        self.plot = w.Output()
        self.last_result = self.last_figure = None
        self.run_button.on_click(self.on_run)
        self.ui = w.VBox([self.prompt_len, self.output_len, self.model, self.device, self.repeats, self.threads,
                          export, self.run_button, self.progress, self.status, self.readout, self.history_view,
                          self.plot])

    def _repr_mimebundle_(self, **kwargs):
        return widget_bundle(self.ui, PANEL_PLACEHOLDER, **kwargs)

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.max = max(total, 1)
        self.progress.value = done

    def on_run(self, _button=None):
        """The run button: one ``run_kv_lab`` with the current settings; a history row, readout and plot."""
        from IPython.display import display
        self.run_button.disabled = True
        self.progress.value = 0
        self.status.value = "実行中…（キャッシュなしの生成は長さの2乗で遅くなります）"
        try:
            res = lab03.run_kv_lab(self.model.value, self.prompt_len.value, self.output_len.value, self.device.value,
                                  self.repeats.value, self.threads.value, progress=self._on_progress)
        except ValueError as e:
            self.status.value = f"<span style='color:#c00'>⚠ {html.escape(str(e))}</span>"
            return None
        finally:
            self.run_button.disabled = False
        self.last_result = res
        lab03.add_run(self.history, res)
        self.readout.value = lab03.readout_html(res)
        self.history_view.value = lab03.history_html(self.history)
        self.last_figure = lab03.plot_steps(res)
        self.plot.clear_output(wait=True)
        with self.plot:
            display(self.last_figure)
        self.status.value = "完了"
        return res


__all__ = ["Lab3App"]
