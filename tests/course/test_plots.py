"""course/plots.py: the lesson's sweep plot draws medians with min-max bars, in Japanese, without warnings."""
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from course import plots  # noqa: E402

ROWS = [
    {"concurrency": 1, "tok_s": 100.0, "tok_s_min": 90.0, "tok_s_max": 110.0,
     "tok_s_per_user": 100.0, "tok_s_per_user_min": 95.0, "tok_s_per_user_max": 104.0},
    {"concurrency": 4, "tok_s": 300.0, "tok_s_min": 250.0, "tok_s_max": 320.0,
     "tok_s_per_user": 75.0, "tok_s_per_user_min": 60.0, "tok_s_per_user_max": 80.0},
]


def test_plot_sweep_medians_draws_medians_and_spread():
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a missing Japanese glyph would warn
        ax = plots.plot_sweep_medians(ROWS)
        ax.figure.canvas.draw()
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == [100.0, 75.0] and list(line.get_ydata()) == [100.0, 300.0]
    # The vertical bars span each point's min-max of tok/s.
    segments = [seg for coll in ax.collections for seg in coll.get_segments()]
    spans = {(round(s[0][1]), round(s[1][1])) for s in segments if s[0][0] == s[1][0]}
    assert {(90, 110), (250, 320)} <= spans
    assert [t.get_text() for t in ax.texts] == ["同時 1", "同時 4"]
    assert ax.get_ylim()[1] == 320.0 * 1.2
    plt.close(ax.figure)
