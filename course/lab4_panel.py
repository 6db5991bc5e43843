"""Lab 4's control panel (and the small panel lab 5 reuses): sliders, repeats, threads, readout, history, CSV.

Widgets only call the lab module's plain functions. Stable names for the browser test: the run button
「実行」, the readout's DOM class ``lab-readout``, the history's ``lab-history``, the first slider described
「…プロンプト長」.
"""
from __future__ import annotations

import html

from course.labkit.measure import REPEATS_RANGE
from course.labkit.panel import HistoryExport
from course.notebooks import PANEL_PLACEHOLDER, widget_bundle
from course.runtime import available_devices, course_threads


class SliderLabApp(HistoryExport):
    """``sliders``: (keyword, label, value, (lo, hi)); ``run(**values, device=, repeats=, threads=)`` returns a
    result; the module ``lab`` supplies add_run, readout_html, history_html, history_csv and ``plot_name``."""

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


def Lab4App(shared_len=None, num_requests=None, repeats=None, csv_name="lab4_history.csv") -> SliderLabApp:
    """The shared-system-prompt experiment: 共有プロンプト長 and リクエスト数 -> TTFT with caching off / on."""
    from course import lab4
    d = lab4.defaults()
    sliders = [("shared_len", "共有プロンプト長", shared_len or d["shared_len"], lab4.SHARED_LEN_RANGE),
               ("num_requests", "リクエスト数", num_requests or d["num_requests"], lab4.NUM_REQUESTS_RANGE)]
    return SliderLabApp(lab4, lab4.run_prefix_lab, sliders, "plot_prefix",
                        lab4.default_repeats() if repeats is None else repeats, csv_name,
                        "実行中…（同じ共有プロンプトのリクエストを1件ずつ送ります）")


__all__ = ["Lab4App", "SliderLabApp"]
