"""The slider panel of the labs of chapters 4-10: sliders, device, repeats, threads, readout, history, CSV.

Which sliders each lab has is data (``course.panels.slider_labs``); widgets only call the lab module's plain
functions. Stable names for the browser test: the run button 「実行」, the readout's DOM class
``lab-readout``, the history's ``lab-history``, the first slider described 「…プロンプト長」.
"""
from __future__ import annotations

import html

from course.labkit.measure import REPEATS_RANGE
from course.panels.controls import HistoryExport
from course.tooling.notebooks import PANEL_PLACEHOLDER, widget_bundle
from course.runtime import available_devices, course_threads


class SliderLabApp(HistoryExport):
    """``sliders``: (keyword, label, value, (lo, hi)); ``run(**values, device=, repeats=, threads=)`` returns a
    result; the lab module ``lab`` supplies add_run, readout_html, history_html, history_csv and ``plot_name``."""

    def __init__(self, lab, run, sliders, plot_name: str, repeats: int, csv_name: str, busy: str):
        import os

        import ipywidgets as w
        style, layout = {"description_width": "10em"}, w.Layout(width="34em")
        self.lab, self.run, self.plot_fn, self.busy = lab, run, getattr(lab, plot_name), busy
        self.sliders = {}
        for key, label, value, (lo, hi) in sliders:
            self.sliders[key] = w.IntSlider(value=value, min=lo, max=hi, description=label, style=style,
                                            layout=layout, continuous_update=False)
        self.repeats = w.IntSlider(value=repeats, min=REPEATS_RANGE[0], max=REPEATS_RANGE[1], description="繰り返し",
                                   style=style, layout=layout, continuous_update=False)
        cores = os.cpu_count() or 1
        self.threads = w.IntSlider(value=min(course_threads(), cores), min=1, max=max(cores, course_threads()),
                                   description="スレッド数", style=style, layout=layout, continuous_update=False)
        devices = available_devices()
        self.device = w.Dropdown(options=devices, value=devices[-1], description="デバイス", style=style, layout=layout)
        self.run_button = w.Button(description="実行", button_style="primary", icon="play")
        self.status = w.HTML("")
        export = self.build_history(lab.history_html, lab.history_csv, csv_name, style, layout)
        self.plot = w.Output()
        self.last_result = self.last_figure = None
        self.run_button.on_click(self.on_run)
        self.ui = w.VBox([*self.sliders.values(), self.device, self.repeats, self.threads, export, self.run_button,
                          self.status, self.readout, self.history_view, self.plot])

    def _repr_mimebundle_(self, **kwargs):
        return widget_bundle(self.ui, PANEL_PLACEHOLDER, **kwargs)

    def on_run(self, _button=None):
        from IPython.display import display
        self.run_button.disabled = True
        self.status.value = self.busy
        try:
            res = self.run(**{k: s.value for k, s in self.sliders.items()}, device=self.device.value,
                           repeats=self.repeats.value, threads=self.threads.value)
        except ValueError as e:
            self.status.value = f"<span style='color:#c00'>⚠ {html.escape(str(e))}</span>"
            return None
        finally:
            self.run_button.disabled = False
        self.last_result = res
        self.lab.add_run(self.history, res)
        self.readout.value = self.lab.readout_html(res)
        self.history_view.value = self.lab.history_html(self.history)
        self.last_figure = self.plot_fn(res)
        self.plot.clear_output(wait=True)
        with self.plot:
            display(self.last_figure)
        self.status.value = "完了"
        return res


__all__ = ["SliderLabApp"]
