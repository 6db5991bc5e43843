"""Lab 2's control panel: wires widgets to ``course.labs.lab02``'s functions; the kit's repeats and thread controls.

Stable names for the browser test: the run button 「実行」, the readout's DOM class ``lab-readout``, the
history's ``lab-history``, the slider 「プロンプト長」 (the decoding requests' context). Buttons have methods
(``on_run``, ``on_threads``, ``on_gpu``) that tests call.
"""
from __future__ import annotations

import html

from course.labs import lab02, lab02_plots
from course.panels.controls import KitControls
from course.labkit.tables import warnings_html
from course.tooling.notebooks import PANEL_PLACEHOLDER, widget_bundle


class Lab2App:
    def __init__(self, model="default", device=None, context=lab02.DEFAULT_CONTEXT, batches=None, chunks=None,
                 repeats=None, gpu="H100"):
        import ipywidgets as w
        style, layout = {"description_width": "11em"}, w.Layout(width="36em")
        self.kit = KitControls("1", lab02.default_repeats() if repeats is None else repeats, csv_name="lab2_history.csv")
        devices = lab02.available_devices()
        self.context = w.IntSlider(value=context, min=lab02.CONTEXT_RANGE[0], max=lab02.CONTEXT_RANGE[1],
                                   description="プロンプト長", style=style, layout=layout, continuous_update=False)
        self.batches = w.Text(value=", ".join(map(str, batches or lab02.default_batches())),
                              description="Decode のバッチ", style=style, layout=layout)
        self.chunks = w.Text(value=", ".join(map(str, chunks or lab02.default_chunks())),
                             description="Prefill のトークン数", style=style, layout=layout)
        self.model = w.Dropdown(options=list(lab02.MODEL_CHOICES.items()), value=model, description="モデル",
                                style=style, layout=layout)
        self.device = w.Dropdown(options=devices, value=device or devices[-1], description="デバイス", style=style,
                                 layout=layout)
        self.gpu = w.Dropdown(options=[("（なし）", "")] + [(f"{g}（予測）", g) for g in lab02.GPU_CHOICES], value=gpu,
                              description="同じ形を GPU で予測", style=style, layout=layout)
        self.run_button = w.Button(description="実行", button_style="primary", icon="play")
        self.threads_button = w.Button(description="スレッド数ごとの GFLOP/s と GB/s", icon="line-chart",
                                       layout=w.Layout(width="auto"))
        self.save_button = w.Button(description="履歴を CSV に保存", icon="download", layout=w.Layout(width="auto"))
        self.progress = w.IntProgress(value=0, min=0, max=1, description="進行")
        self.status = w.HTML("")
        self.plot = w.Output()
        self.history: list[dict] = []
        self.last_result = self.last_threads = self.last_figure = None
        self.run_button.on_click(self.on_run)
        self.threads_button.on_click(self.on_threads)
        self.save_button.on_click(self.on_save)
        self.gpu.observe(self.on_gpu, names="value")
        self.model.observe(self._fit_context, names="value")
        self._fit_context()
        self.ui = w.VBox([self.context, self.batches, self.chunks, self.model, self.device, self.kit.repeats,
                          self.kit.threads, self.gpu, w.HBox([self.run_button, self.threads_button, self.save_button]),
                          self.progress, self.status, self.kit.warnings, self.kit.readout, self.kit.history_view,
                          self.plot])

    @property
    def readout(self):
        return self.kit.readout

    def _repr_mimebundle_(self, **kwargs):
        return widget_bundle(self.ui, PANEL_PLACEHOLDER, **kwargs)

    def _fit_context(self, _change=None) -> None:
        try:
            limit = lab02.max_model_len(self.model.value)
        except (ValueError, OSError):
            return
        self.context.max = min(lab02.CONTEXT_RANGE[1], limit - lab02.DECODE_STEPS - 20)

    def _show(self, fig) -> None:
        from IPython.display import display
        self.last_figure = fig
        self.plot.clear_output(wait=True)
        with self.plot:
            display(fig)

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.max, self.progress.value = max(total, 1), done

    def _run(self, label: str, work):
        self.run_button.disabled = self.threads_button.disabled = True
        self.status.value = f"{html.escape(label)} 実行中…（初回はモデルの読み込みに数秒かかります）"
        try:
            out = work()
            self.status.value = "完了"
            return out
        except ValueError as e:
            self.status.value = f"<span style='color:#c00'>⚠ {html.escape(str(e))}</span>"
            return None
        finally:
            self.run_button.disabled = self.threads_button.disabled = False

    def on_run(self, _button=None):
        """Measure the machine and every step; add the run to the history; show the roofline."""
        def work():
            res = lab02.run_roofline(self.model.value, self.device.value, self.context.value, self.batches.value,
                                    self.chunks.value, self.kit.repeats.value, self.kit.threads.value,
                                    progress=self._on_progress)
            self.last_result = res
            run = max((r["run"] for r in self.history), default=0) + 1
            self.history.extend(lab02.history_rows(res, run))
            self.kit.warnings.value = warnings_html(res["warnings"])
            self.kit.readout.value = lab02.readout_html(res, self.gpu.value or None)
            self.kit.history_view.value = lab02.history_html(self.history)
            self._show(lab02_plots.plot_roofline(res, self.gpu.value or None))
            return res
        return self._run("実行", work)

    def on_gpu(self, _change=None):
        """The GPU menu: redraw the last run with that GPU's predicted roofline (nothing is measured)."""
        if self.last_result is not None:
            self.kit.readout.value = lab02.readout_html(self.last_result, self.gpu.value or None)
            self._show(lab02_plots.plot_roofline(self.last_result, self.gpu.value or None))

    def on_threads(self, _button=None):
        """GFLOP/s and GB/s at 1, 2, 4, ... threads."""
        def work():
            rows = lab02.threads_sweep()
            self.last_threads = rows
            self._show(lab02_plots.plot_threads(rows))
            return rows
        return self._run("スレッド数スイープ", work)

    def on_save(self, _button=None):
        if not self.history:
            self.status.value = "保存する履歴がまだありません。"
            return None
        path = lab02.save_history_csv(self.history, self.kit.csv_path.value.strip() or "lab2_history.csv")
        self.status.value = f"保存しました: <code>{html.escape(path)}</code>"
        return path
