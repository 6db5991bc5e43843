"""instructor/dashboard.ipynb, executed as an instructor runs it (Run All) against our server while
requests come in: its widget refreshes by itself (an asyncio task on the kernel's loop) and shows
the traffic. The notebook is saved without outputs (what it shows is live), so this test is its
check."""
from __future__ import annotations

import threading
from pathlib import Path

import httpx
import nbformat

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOK = ROOT / "instructor" / "dashboard.ipynb"

CHECK = """import asyncio
first = len(board.series.points)
await asyncio.sleep(4)          # the notebook's own refresh keeps running while the kernel waits
assert len(board.series.points) >= first + 2, (first, board.readout.value)
assert board.series.totals()["output_tokens"] > 0 and board.picture.value[:4] == b"\\x89PNG"
print("refreshed", len(board.series.points), "times")"""


def traffic(url: str, stop: threading.Event) -> None:
    while not stop.is_set():
        httpx.post(url + "/v1/completions", timeout=120, json={"prompt": "吾輩は", "max_tokens": 4})


def test_the_notebook_refreshes_by_itself_against_our_server(monkeypatch):
    from nbclient import NotebookClient

    from minimal_engine import LLM
    from minimal_engine.serve.app import ServerThread, build_app
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "saved unrun"
    nb.cells.append(nbformat.v4.new_code_cell(CHECK))
    app = build_app(LLM(device="cpu", max_num_seqs=4), served_model_name="minimal-ja")
    with ServerThread(app) as s:
        monkeypatch.setenv("COURSE_DASHBOARD_URL", s.url)            # the kernel inherits it
        monkeypatch.setenv("PYTHONPATH", str(ROOT))              # this checkout's course package
        stop = threading.Event()
        sender = threading.Thread(target=traffic, args=(s.url, stop), daemon=True)
        sender.start()
        try:
            NotebookClient(nb, timeout=300, kernel_name="python3",
                           resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
        finally:
            stop.set()
            sender.join(timeout=120)
    out = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert "refreshed" in out
    widget = nb.cells[1].outputs[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in widget, "the dashboard renders as a widget"
