"""Lab 1's control panel: sliders and menus of the lab plus the kit's shared controls (course.panels.controls).

It only wires widgets to ``course.labs.lab01``'s functions (``measure_lab``, ``sweep_lab``, plots) and the kit's
history; every button has a method (``on_run``, ``on_sweep``) that tests call. Stable names for the
browser test: the run button 「実行」, the sweep button starting with 「同時リクエスト数スイープ」, the
readout's DOM class ``lab-readout``, the history's ``lab-history``, the slider 「プロンプト長」.
"""
from __future__ import annotations

import html

from course.labs import lab01
from course.labkit.charts import plot_history_sweeps
from course.labkit.history import add_measurement, add_sweep
from course.panels.controls import KitControls
from course.labkit.tables import readout_html
from course.tooling.notebooks import PANEL_PLACEHOLDER, widget_bundle


class Lab1App:
    """The lab's panel. ``run_button.click()`` (``on_run()``) and ``sweep_button.click()`` (``on_sweep()``) are
    what the buttons do; ``last_result`` (a ``measure_lab`` dict), ``last_sweep`` (its rows), ``last_figure``
    and ``kit.history`` (one row per run or sweep point) keep what was shown."""

    def __init__(self, model="default", device=None, prompt_len=lab01.DEFAULTS["prompt_len"],
                 output_len=lab01.DEFAULTS["output_len"], concurrency=lab01.DEFAULTS["concurrency"], concurrencies=None,
                 repeats=None, model_choices=None):
        import ipywidgets as w
        choices = list((model_choices or lab01.MODEL_CHOICES).items())
        if model not in [v for _, v in choices]:
            choices.append((str(model), lab01.check_model(model)))
        devices = lab01.available_devices()
        sweep = lab01.check_concurrencies(lab01.sweep_concurrencies() if concurrencies is None else concurrencies)
        self.kit = KitControls(", ".join(map(str, sweep)), lab01.default_repeats() if repeats is None else repeats,
                               csv_name="lab1_history.csv")
        style, layout = {"description_width": "9em"}, w.Layout(width="32em")
        self.prompt_len = w.IntSlider(value=prompt_len, min=lab01.PROMPT_LEN_RANGE[0], max=lab01.PROMPT_LEN_RANGE[1],
                                      description="プロンプト長", style=style, layout=layout, continuous_update=False)
        self.output_len = w.IntSlider(value=output_len, min=lab01.OUTPUT_LEN_RANGE[0], max=lab01.OUTPUT_LEN_RANGE[1],
                                      description="出力長", style=style, layout=layout, continuous_update=False)
        self.concurrency = w.IntSlider(value=concurrency, min=lab01.CONCURRENCY_RANGE[0],
                                       max=lab01.CONCURRENCY_RANGE[1], description="同時リクエスト数", style=style,
                                       layout=layout, continuous_update=False)
        self.model = w.Dropdown(options=choices, value=model, description="モデル", style=style, layout=layout)
        self.device = w.Dropdown(options=devices, value=device or devices[-1], description="デバイス",
                                 style=style, layout=layout)
        self.run_button = w.Button(description="実行", button_style="primary", icon="play")
        self.sweep_button = w.Button(icon="line-chart", layout=w.Layout(width="auto"))
        self.progress = w.IntProgress(value=0, min=0, max=1, description="進行", style=style)
        self.status = w.HTML("")
        self.plot = w.Output()
        self.model.observe(self._fit_sliders_to_model, names="value")
        self.kit.sweep_list.observe(self._label_sweep_button, names="value")
        self._fit_sliders_to_model()
        self._label_sweep_button()
        self.run_button.on_click(self.on_run)
        self.sweep_button.on_click(self.on_sweep)
        self.last_result = self.last_sweep = self.last_figure = None
        box = self.kit.boxes()
        more = w.Accordion(children=[box["backend"], box["cost"], box["export"]],
                           titles=("サーバーで測る（OpenAI 互換）", "コスト（$/時間・全込み電力）", "履歴を CSV に保存"))
        self.ui = w.VBox([self.prompt_len, self.output_len, self.concurrency, self.model, self.device,
                          box["measurement"], box["arrivals"], more,
                          w.HBox([self.run_button, self.sweep_button]), self.progress, self.status,
                          box["results"], self.plot])

    @property
    def readout(self):
        return self.kit.readout

    @property
    def history(self) -> list[dict]:
        return self.kit.history

    def _repr_mimebundle_(self, **kwargs):
        return widget_bundle(self.ui, PANEL_PLACEHOLDER, **kwargs)

    def _label_sweep_button(self, _change=None) -> None:
        try:
            label = str(lab01.check_concurrencies(self.kit.sweep_list.value))
        except ValueError:
            label = "（一覧を直してください）"
        self.sweep_button.description = f"同時リクエスト数スイープ {label}"

    def _fit_sliders_to_model(self, _change=None) -> None:
        """Keep the length sliders within the chosen model's context length (read from its config.json)."""
        try:
            limit = lab01.max_model_len(self.model.value)
        except (ValueError, OSError):
            return                          # e.g. default model missing: run() will say so
        self.prompt_len.max = min(lab01.PROMPT_LEN_RANGE[1], limit - lab01.OUTPUT_LEN_RANGE[0])
        self.output_len.max = min(lab01.OUTPUT_LEN_RANGE[1], limit - lab01.PROMPT_LEN_RANGE[0])

    def settings(self) -> dict:
        return dict(model=self.model.value, prompt_len=self.prompt_len.value, output_len=self.output_len.value,
                    concurrency=self.concurrency.value, device=self.device.value)

    def _backend(self):
        s = self.settings()
        return None if self.kit.backend.value == "local" else self.kit.make_backend(s["model"], s["device"])

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.max = max(total, 1)
        self.progress.value = done

    def _show(self, fig) -> None:
        from IPython.display import display
        self.last_figure = fig
        self.plot.clear_output(wait=True)
        with self.plot:
            display(fig)

    def _run(self, label: str, work):
        self.run_button.disabled = self.sweep_button.disabled = True
        self.progress.value = 0
        self.status.value = f"{html.escape(label)} 実行中…（初回はモデルの読み込みに数秒かかります）"
        try:
            return work()
        except ValueError as e:
            self.status.value = f"<span style='color:#c00'>⚠ {html.escape(str(e))}</span>"
            return None
        finally:
            self.run_button.disabled = self.sweep_button.disabled = False

    def on_run(self, _button=None):
        """The run button: ``measure_lab`` with the current settings (repeats, arrivals, threads, backend);
        appends a history row, updates the readout and shows the last repeat's timeline."""
        def work():
            m = lab01.measure_lab(**self.settings(), **self.kit.run_kwargs(), backend=self._backend(),
                                 progress=self._on_progress)
            self.last_result = m
            add_measurement(self.kit.history, m)
            self.kit.show_result(readout_html(m), m, m["warnings"])
            self._show(lab01.plot_timeline(lab01.timeline_of(m)))
            self.status.value = "完了"
            return m
        return self._run("実行", work)

    def on_sweep(self, _button=None):
        """The sweep button: ``sweep_lab`` over the sweep list; appends the rows to the history and overlays
        the last 3 sweeps (tok/s vs tok/s/user)."""
        def work():
            s = self.settings()
            res = lab01.sweep_lab(s["model"], s["prompt_len"], s["output_len"], self.kit.sweep_list.value, s["device"],
                                 **self.kit.run_kwargs(), backend=self._backend(), progress=self._on_progress)
            self.last_sweep = res["rows"]
            add_sweep(self.kit.history, res)
            self.kit.show_result(lab01.sweep_html(res["rows"]), res["rows"][-1], res["warnings"])
            self._show(plot_history_sweeps(self.kit.history, last=3))
            self.status.value = "完了"
            return res
        return self._run("スイープ", work)
