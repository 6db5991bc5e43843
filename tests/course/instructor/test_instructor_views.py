"""The dashboard's picture, readout and notebook widget (fed by recorded vLLM scrapes through its
scraper collaborator), and the lab's one-line switch to the class's server."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from course.instructor.figure import draw, png_bytes, readout_html
from course.instructor.live import Dashboard
from course.instructor.metrics import parse_metrics
from course.instructor.rates import Series

FIXTURES = Path(__file__).parent / "fixtures"
TEXTS = [(FIXTURES / f"vllm_metrics_{w}.txt").read_text(encoding="utf-8") for w in ("t0", "t1")]


def recorded_scraper():
    """Returns the two recorded vLLM scrapes, 5 s apart, then fails like an unreachable server."""
    clock = itertools.count(0.0, 5.0)
    texts = iter(TEXTS)

    def scraper(url, api_key):
        assert url == "http://gpu-box:8000" and api_key == "k"
        text = next(texts, None)
        if text is None:
            raise ConnectionError("http://gpu-box:8000/metrics に接続できません")
        return parse_metrics(text, at=next(clock))
    return scraper


def test_widget_shows_each_scrape_and_keeps_the_last_numbers_on_an_error():
    board = Dashboard("http://gpu-box:8000/", api_key="k", window_s=5, scraper=recorded_scraper())
    assert "data-scrapes='0'" in board.readout.value
    board.update()
    first = board.readout.value
    board.update()
    second = board.readout.value
    assert first != second and "data-requests='48'" in second
    assert "data-output-tokens='12288'" in second
    assert "2,457.6" in second                            # 48 x 256 tokens in 5 s
    assert board.picture.value[:8] == b"\x89PNG\r\n\x1a\n"
    board.update()                                        # the server went away
    assert "接続できません" in board.readout.value and "data-requests='48'" in board.readout.value
    assert len(board.series.points) == 2
    with pytest.raises(ValueError, match="http://"):
        Dashboard("gpu-box:8000")
    with pytest.raises(ValueError, match="interval_s"):
        Dashboard("http://gpu-box:8000", interval_s=0)


def test_picture_has_the_six_panels_and_a_title_with_the_totals(tmp_path):
    series = Series(window_s=5)
    for at, text in zip((0.0, 5.0), TEXTS):
        series.add(parse_metrics(text, at=at))
    fig = draw(series)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(titles) == 6 and any("tok/s" in t for t in titles)
    assert any("TTFT" in t for t in titles)
    assert "Qwen/Qwen3-8B" in fig._suptitle.get_text() and "48 件" in fig._suptitle.get_text()
    curve_ax = next(ax for ax in fig.axes if ax.get_title().startswith("スループット"))
    assert len(curve_ax.collections[0].get_offsets()) == 1    # one window: one point of the curve
    assert png_bytes(fig)[:4] == b"\x89PNG"
    assert "まだ" in readout_html(Series())


def test_use_class_server_is_the_labs_one_line_switch(monkeypatch):
    from course import labkit
    from course.panels.controls import KitControls
    for name in ("COURSE_SERVER_URL", "COURSE_SERVER_MODEL", "MINIMAL_ENGINE_API_KEY"):
        monkeypatch.setenv(name, "x")                  # so that the test's own settings are undone
        monkeypatch.delenv(name)
    assert labkit.class_server() is None and KitControls("1").backend.value == "local"
    with pytest.raises(ValueError, match="http://"):
        labkit.use_class_server("192.168.1.20:8000")
    labkit.use_class_server("http://192.168.1.20:8000/", api_key="KEY")
    kit = KitControls("1")
    assert (kit.backend.value, kit.base_url.value, kit.served_model.value) == \
        ("openai", "http://192.168.1.20:8000", "minimal-ja")
    b = kit.make_backend("default", "cpu")
    assert (b.kind, b.base_url, b.model, b.api_key) == \
        ("openai", "http://192.168.1.20:8000", "minimal-ja", "KEY")
    assert "KEY" not in repr(b)
    monkeypatch.setenv("COURSE_SERVER_URL", "gpu-box:8000")
    with pytest.raises(ValueError, match="COURSE_SERVER_URL"):
        KitControls("1")
