"""The instructor's live dashboard in a notebook: read /metrics every ``interval_s`` seconds and
redraw.

    board = Dashboard("http://127.0.0.1:8000")
    board.show()          # the readout, the picture and 開始 / 停止 buttons; starts refreshing

The widgets only show what ``course.instructor.rates.Series`` and ``course.instructor.figure``
compute. Refreshing runs as an asyncio task on the kernel's event loop (the notebook stays usable);
the scrape runs in a worker thread, so a slow server does not freeze the kernel. A failed scrape is
shown under the readout and the next one is tried. ``update()`` does one refresh by hand (tests, a
headless run).
"""
from __future__ import annotations

import asyncio

from course.instructor.figure import draw, png_bytes, readout_html
from course.instructor.metrics import scrape
from course.instructor.rates import Series


class Dashboard:
    def __init__(self, base_url: str, api_key: str | None = None, interval_s: float = 1.0,
                 window_s: float = 5.0, scraper=scrape):
        if not (isinstance(interval_s, (int, float)) and 0.2 <= interval_s <= 60):
            raise ValueError(f"interval_s（更新の間隔、秒）は 0.2〜60 で指定してください。 / interval_s must be "
                             f"in [0.2, 60], got {interval_s!r}")
        import ipywidgets as w
        if not (isinstance(base_url, str) and base_url.startswith(("http://", "https://"))):
            raise ValueError(f"サーバーの URL は http:// か https:// で始めてください（例: http://127.0.0.1:8000）。"
                             f" / base_url must start with http:// or https://, got {base_url!r}")
        self.base_url, self.api_key = base_url.rstrip("/"), api_key
        self.interval_s = float(interval_s)
        self.scraper = scraper
        self.series = Series(window_s)
        self.fig = None
        self.task: asyncio.Task | None = None
        self.readout = w.HTML(readout_html(self.series))
        self.readout.add_class("dashboard-readout-box")
        self.picture = w.Image(format="png", layout=w.Layout(max_width="100%"))
        self.start_button = w.Button(description="開始", icon="play", layout=w.Layout(width="auto"))
        self.stop_button = w.Button(description="停止", icon="stop", layout=w.Layout(width="auto"))
        self.start_button.on_click(lambda _b: self.start())
        self.stop_button.on_click(lambda _b: self.stop())
        where = w.HTML(f"<code>{self.base_url}/metrics</code> を {self.interval_s:g} 秒ごとに読みます")
        self.widget = w.VBox([w.HBox([self.start_button, self.stop_button, where]), self.readout,
                              self.picture])

    def update(self) -> None:
        """One refresh: scrape, add the snapshot, redraw the readout and the picture."""
        self.show_snapshot(self._scrape())

    def _scrape(self):
        try:
            return self.scraper(self.base_url, self.api_key)
        except (ConnectionError, ValueError) as e:
            return e

    def show_snapshot(self, snap) -> None:
        if isinstance(snap, Exception):
            self.readout.value = readout_html(self.series, error=str(snap))
            return
        self.series.add(snap)
        self.readout.value = readout_html(self.series)
        self.fig = draw(self.series, self.fig)
        self.picture.value = png_bytes(self.fig)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            snap = await asyncio.to_thread(self._scrape)
            self.show_snapshot(snap)
            await asyncio.sleep(max(0.05, self.interval_s - (loop.time() - started)))

    def start(self) -> None:
        """Refresh every ``interval_s`` seconds on the running event loop (a notebook kernel's)."""
        if self.task is None or self.task.done():
            self.task = asyncio.get_event_loop().create_task(self._loop())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None

    def show(self, start: bool = True):
        """The widget, to show as a cell's last expression; starts refreshing unless start=False."""
        if start:
            self.start()
        return self.widget


__all__ = ["Dashboard"]
