"""The class summary (issue 43 item 5) on synthetic CSVs written by the labs' own writers (lab 1's
``labkit.save_csv``, lab 2's ``save_history_csv``): one row per learner across both labs, server
runs left out, the spread lines and picture, and the guide's one command (``python -m
course.instructor summary``) with its clear error for a missing folder. The CSVs: the fixture
``class_folder`` (class_csvs.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from class_csvs import class_folder  # noqa: F401  (a fixture)

from course.instructor.summary import plot_spread, read_class, spread_lines

ROOT = Path(__file__).resolve().parents[3]


def test_one_row_per_learner_across_labs_without_server_runs(class_folder):
    machines = read_class(class_folder)
    assert sorted(machines) == ["sato", "suzuki", "tanaka"]
    assert machines["tanaka"] == {"gb_s": [40.0, 44.0], "tpot_ms": [10.0, 11.0],
                                  "tok_s": [120.0, 110.0]}
    assert machines["suzuki"] == {"gb_s": [10.0], "tpot_ms": [40.0], "tok_s": [30.0]}  # no 999
    assert machines["sato"]["gb_s"] == [] and machines["sato"]["tok_s"] == [60.0]
    lines = spread_lines(machines)
    assert "最大 ÷ 最小 = 3.8 倍" in lines[2] and "tanaka" in lines[2] and "suzuki" in lines[2]  # 115/30
    assert "2 人" in lines[0] and "4.2 倍" in lines[0]                                # 42 / 10 GB/s
    fig = plot_spread(machines)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["tanaka", "sato", "suzuki"]
    with pytest.raises(ValueError, match="CSV"):
        plot_spread({})


def test_the_guides_one_command(class_folder, tmp_path):
    out = tmp_path / "pictures"
    r = subprocess.run([sys.executable, "-m", "course.instructor", "summary", str(class_folder),
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("| 実行 ") == 3                     # labkit.summary_line for each lab 1 CSV
    assert "メモリ帯域" in r.stdout and (out / "class_results.png").stat().st_size > 10_000
    assert (out / "class_summary.png").stat().st_size > 10_000
    bad = subprocess.run([sys.executable, "-m", "course.instructor", "summary",
                          str(tmp_path / "nowhere")], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "nowhere" in bad.stderr and "Traceback" not in bad.stderr
