"""The controls every lab shares (thin widgets: each one only feeds the kit's plain functions).

``KitControls`` holds: 繰り返し, the sweep list, arrivals, the thread count, the backend (local engine or an
OpenAI-compatible server), cost inputs ($/hour, all-in watts), the readout / warnings / history areas and
the CSV export. A lab builds its own sliders, then ``kit = KitControls(...)`` and lays out ``kit.boxes()``.
DOM classes for the browser test: ``lab-readout`` (readout), ``lab-history`` (history table).
"""
from __future__ import annotations

import html
from pathlib import Path

from course.runtime import course_threads
from course.labkit.arrivals import ARRIVALS, DEFAULT_RATE
from course.labkit.backends import class_server, local_backend, openai_backend
from course.labkit.history import save_csv, summary_line
from course.labkit.measure import REPEATS_RANGE, cost, parse_sweep_list
from course.labkit.tables import cost_html, history_html, warnings_html

BACKENDS = {"local": "ローカルのエンジン（このカーネル）", "openai": "OpenAI 互換サーバー（vLLM・SGLang など）"}


class KitControls:
    def __init__(self, sweep_text: str, repeats: int = 1, usd_per_hour: float = 0.0, watts: float = 0.0,
                 csv_name: str = "lab_history.csv"):
        import os

        import ipywidgets as w
        style, wide = {"description_width": "9em"}, w.Layout(width="32em")
        self.repeats = w.IntSlider(value=repeats, min=REPEATS_RANGE[0], max=REPEATS_RANGE[1], description="繰り返し",
                                   style=style, layout=wide, continuous_update=False)
        self.sweep_list = w.Text(value=sweep_text, description="スイープの一覧", style=style, layout=wide,
                                 placeholder="同時リクエスト数をカンマ区切りで（例: 1, 2, 4, 8, 16）")
        self.arrivals = w.Dropdown(options=[(v, k) for k, v in ARRIVALS.items()], value="all", description="到着のしかた",
                                   style=style, layout=wide)
        self.rate = w.FloatText(value=DEFAULT_RATE, description="レート [件/秒]", style=style)
        self.late_prompt_len = w.IntText(value=256, description="遅れて届く長さ", style=style)
        self.threads = w.IntSlider(value=min(course_threads(), os.cpu_count() or 1), min=1,
                                   max=max(os.cpu_count() or 1, course_threads()), description="スレッド数",
                                   style=style, layout=wide, continuous_update=False)
        server = class_server()             # the workshop's server (labkit.use_class_server), if any
        self.backend = w.Dropdown(options=[(v, k) for k, v in BACKENDS.items()],
                                  value="openai" if server else "local", description="バックエンド",
                                  style=style, layout=wide)
        self.base_url = w.Text(value=server.base_url if server else "http://127.0.0.1:8000",
                               description="サーバーの URL", style=style, layout=wide)
        self.served_model = w.Text(value=server.model if server else "", description="サーバーのモデル名",
                                   style=style, layout=wide,
                                   placeholder="例: Qwen/Qwen3-8B（/v1/models に出る名前）")
        self.usd_per_hour = w.FloatText(value=usd_per_hour, description="料金 [$/時間]", style=style)
        self.watts = w.FloatText(value=watts, description="全込み電力 [W]", style=style)
        self.learner = w.Text(value="", description="名前（CSV 用）", style=style, placeholder="例: tanaka")
        self.csv_path = w.Text(value=csv_name, description="CSV ファイル", style=style, layout=wide)
        self.save_button = w.Button(description="履歴を CSV に保存", icon="download", layout=w.Layout(width="auto"))
        self.clear_button = w.Button(description="履歴を消す", icon="trash", layout=w.Layout(width="auto"))
        self.readout = w.HTML("")
        self.readout.add_class("lab-readout")
        self.cost_view = w.HTML("")
        self.warnings = w.HTML("")
        self.history_view = w.HTML(history_html([]))
        self.history_view.add_class("lab-history")
        self.export_view = w.HTML("")
        self.history: list[dict] = []
        self.arrivals.observe(self._show_arrival_fields, names="value")
        self.backend.observe(self._show_backend_fields, names="value")
        self.save_button.on_click(self.on_save)
        self.clear_button.on_click(self.on_clear)
        self._show_arrival_fields()
        self._show_backend_fields()

    # ------------------------------------------------------------ values -> plain arguments
    def sweep_values(self, hi: int = 64) -> list[int]:
        return parse_sweep_list(self.sweep_list.value, hi=hi)

    def make_backend(self, model: str, device: str):
        if self.backend.value == "local":
            return local_backend(model, device)
        return openai_backend(self.base_url.value.strip(), self.served_model.value)

    def run_kwargs(self) -> dict:
        """Keyword arguments of ``measure`` / ``sweep`` that these controls set."""
        return dict(repeats=self.repeats.value, arrivals=self.arrivals.value, rate=self.rate.value,
                    late_prompt_len=self.late_prompt_len.value, threads=self.threads.value)

    def cost_for(self, m: dict) -> dict | None:
        """Cost of a measurement (or sweep row) with the $/hour and watts entered; None when both are 0."""
        if not (self.usd_per_hour.value or self.watts.value):
            return None
        return cost(self.usd_per_hour.value, self.watts.value, m["tok_s"], m["total_tok_s"])

    # ------------------------------------------------------------ views
    def show_result(self, readout: str, m: dict, warnings: list[str]) -> None:
        self.readout.value = readout
        c = self.cost_for(m)
        where = f"<div style='color:#555'>コスト: 同時リクエスト数 {m['concurrency']} のとき</div>"
        self.cost_view.value = where + cost_html(c) if c else ""
        self.warnings.value = warnings_html(warnings)
        self.history_view.value = history_html(self.history)

    def _show_arrival_fields(self, _change=None) -> None:
        self.rate.layout.display = "" if self.arrivals.value == "poisson" else "none"
        self.late_prompt_len.layout.display = "" if self.arrivals.value == "late_long" else "none"

    def _show_backend_fields(self, _change=None) -> None:
        shown = "" if self.backend.value == "openai" else "none"
        self.base_url.layout.display = self.served_model.layout.display = shown

    def on_save(self, _button=None) -> Path | None:
        """Save the history as CSV and show the one-line summary to send to the instructor."""
        if not self.history:
            self.export_view.value = "保存する履歴がまだありません。"
            return None
        learner = self.learner.value.strip()
        try:
            path = save_csv(self.history, self.csv_path.value.strip() or "lab_history.csv", learner or None)
        except OSError as e:
            self.export_view.value = f"<span style='color:#c00'>⚠ 保存できませんでした: {html.escape(str(e))}</span>"
            return None
        self.export_view.value = (f"保存しました: <code>{html.escape(str(path))}</code><br>"
                                  f"1行まとめ: <code>{html.escape(summary_line(self.history, learner))}</code>")
        return path

    def on_clear(self, _button=None) -> None:
        self.history.clear()
        self.history_view.value = history_html(self.history)

    def boxes(self) -> dict:
        """Groups of widgets for a lab's layout: measurement, arrivals, backend, cost, export, results."""
        import ipywidgets as w
        return {"measurement": w.VBox([self.repeats, self.sweep_list, self.threads]),
                "arrivals": w.VBox([self.arrivals, w.HBox([self.rate, self.late_prompt_len])]),
                "backend": w.VBox([self.backend, self.base_url, self.served_model]),
                "cost": w.HBox([self.usd_per_hour, self.watts]),
                "export": w.VBox([w.HBox([self.learner, self.csv_path]), w.HBox([self.save_button, self.clear_button]),
                                  self.export_view]),
                "results": w.VBox([self.warnings, self.readout, self.cost_view, self.history_view])}


class HistoryExport:
    """Mixin for the chapter panels (labs 3-10): the readout, the run history and its CSV export.
    ``build_history`` makes the widgets (DOM classes ``lab-readout`` and ``lab-history``) and returns the
    export accordion to lay out; ``on_save`` writes ``history_csv(history, learner)`` to the chosen file."""

    def build_history(self, history_html, history_csv, csv_name: str, style: dict, layout):
        import ipywidgets as w
        self._history_csv, self._csv_name = history_csv, csv_name
        self.readout = w.HTML("")
        self.readout.add_class("lab-readout")
        self.history_view = w.HTML(history_html([]))
        self.history_view.add_class("lab-history")
        self.learner = w.Text(value="", description="名前（CSV 用）", style=style, placeholder="例: tanaka")
        self.csv_path = w.Text(value=csv_name, description="CSV ファイル", style=style, layout=layout)
        self.save_button = w.Button(description="履歴を CSV に保存", icon="download", layout=w.Layout(width="auto"))
        self.export_view = w.HTML("")
        self.history: list[dict] = []
        self.save_button.on_click(self.on_save)
        return w.Accordion(children=[w.VBox([w.HBox([self.learner, self.csv_path]), self.save_button,
                                             self.export_view])], titles=("履歴を CSV に保存",))

    def on_save(self, _button=None) -> Path | None:
        if not self.history:
            self.export_view.value = "保存する履歴がまだありません。"
            return None
        path = Path(self.csv_path.value.strip() or self._csv_name)
        try:
            path.write_text(self._history_csv(self.history, self.learner.value.strip()), encoding="utf-8")
        except OSError as e:
            self.export_view.value = f"<span style='color:#c00'>⚠ 保存できませんでした: {html.escape(str(e))}</span>"
            return None
        self.export_view.value = f"保存しました: <code>{html.escape(str(path))}</code>"
        return path


__all__ = ["BACKENDS", "HistoryExport", "KitControls"]
