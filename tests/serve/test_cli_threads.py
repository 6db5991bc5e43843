"""The server's torch threads: --threads as given, PyTorch's choice under OMP_NUM_THREADS, else one core left to
the event loop (HTTP, JSON, detokenizing): on two cores one thread, never zero."""
import pytest

from minimal_engine.serve.cli import build_parser, serve_threads


def test_one_core_is_left_to_the_event_loop():
    assert serve_threads(None, 2, {}) == 1
    assert serve_threads(None, 8, {}) == 7
    assert serve_threads(None, 1, {}) == 1
    assert serve_threads(3, 8, {"OMP_NUM_THREADS": "2"}) == 3        # an explicit --threads wins
    assert serve_threads(None, 8, {"OMP_NUM_THREADS": "4"}) is None   # the user's OpenMP setting stays
    with pytest.raises(SystemExit, match="--threads"):
        serve_threads(0, 8, {})
    assert build_parser().parse_args([]).threads is None
