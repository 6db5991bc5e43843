"""Shared by the instructor tests: learners' lab CSVs written by the labs' own writers (the fixture
`class_folder`, imported by the tests that use it). Not a conftest.py: a second `conftest` module
shadows tests/conftest.py for the tests that do `from conftest import ...`."""
from __future__ import annotations

from pathlib import Path

import pytest

from course import labkit
from course.labkit.measure import METRICS
from course.labs import lab02


def sweep_result(tok_s_by_concurrency: dict[int, float], tpot_ms: float,
                 backend: str = "local") -> dict:
    rows = []
    for c, tok_s in tok_s_by_concurrency.items():
        m = {k: 1.0 for k in METRICS} | {"tok_s": tok_s, "tpot_ms": tpot_ms * (1 + 0.1 * (c - 1)),
                                         "total_tok_s": 2 * tok_s}
        rows.append({"model": "default", "device": "cpu", "backend": backend, "threads": 4,
                     "prompt_len": 64, "output_len": 32, "concurrency": c, "repeats": 1,
                     "arrivals": "一斉",
                     **m, **{f"{k}_min": v * 0.9 for k, v in m.items()},
                     **{f"{k}_max": v * 1.1 for k, v in m.items()}})
    return {"rows": rows, "warnings": []}


def lab1_csv(folder: Path, who: str, sweeps: list[dict], file_name: str | None = None) -> Path:
    history: list[dict] = []
    for s in sweeps:
        labkit.add_sweep(history, s)
    return labkit.save_csv(history, folder / (file_name or f"lab1_{who}.csv"), learner=who)


def lab2_csv(folder: Path, who: str, bandwidths: list[float]) -> Path:
    history = []
    for run, gb_s in enumerate(bandwidths, 1):
        point = {"kind": "decode", "intensity": 1.0, "predicted_ms": 5.0, "measured_ms": 9.0,
                 "measured_ms_min": 8.0, "measured_ms_max": 10.0}
        res = {"model": "default", "device": "cpu", "dtype": "float32", "threads": 4,
               "context": 256, "repeats": 3, "flops_key": "fp32",
               "machine": {"fp32": 2e11, "bandwidth": gb_s * 1e9},
               "points": [point | {"size": b} for b in (1, 4)]}
        history += lab02.history_rows(res, run)
    path = folder / f"lab2_{who}.csv"
    lab02.save_history_csv(history, path)
    return path


@pytest.fixture
def class_folder(tmp_path) -> Path:
    folder = tmp_path / "class_results"
    folder.mkdir()
    lab1_csv(folder, "tanaka", [sweep_result({1: 40.0, 4: 120.0}, 10.0),
                                sweep_result({1: 38.0, 4: 110.0}, 11.0)])
    lab1_csv(folder, "suzuki", [sweep_result({1: 12.0, 2: 30.0}, 40.0),
                                sweep_result({1: 500.0, 8: 999.0}, 1.0, "openai")])  # a server
    lab1_csv(folder, "sato", [sweep_result({1: 20.0, 4: 60.0}, 20.0)], file_name="sato_final.csv")
    lab2_csv(folder, "tanaka", [40.0, 44.0])
    lab2_csv(folder, "suzuki", [10.0])
    (folder / "notes.csv").write_text("a,b\n1,2\n", encoding="utf-8")      # not a lab CSV: skipped
    return folder
