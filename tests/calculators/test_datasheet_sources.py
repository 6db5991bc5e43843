"""Every datasheet entry (minimal_engine/calculators/datasheets.py) names where its figures come from."""
import re

from minimal_engine.calculators import datasheets as d

TRACE = re.compile(r"https?://\S+|[\w.-]+/[\w.-]+ \S*[\w-]+/|docs/[\w/.-]+\.md|\w+\.(?:ts|json|md)\b")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def test_gpu_specs_and_costs_have_a_traceable_dated_source():
    for entry in [*d.GPU_SPECS.values(), *d.GPU_COSTS.values()]:
        assert TRACE.search(entry.source), f"{entry.name}: no URL or repository path in {entry.source!r}"
        assert DATE.search(entry.source), f"{entry.name}: no date in {entry.source!r}"


def test_model_shapes_name_a_url_or_repository_path():
    for shape in d.MODEL_SHAPES.values():
        assert TRACE.search(shape.source) or "synthetic" in shape.source, f"{shape.name}: {shape.source!r}"


def test_every_published_row_has_a_source_entry():
    rows = [name for name in d.__all__ if name.startswith("INFERENCEX_")]
    assert sorted(rows) == sorted(d.ROW_SOURCES)
    for name in rows:
        src = d.ROW_SOURCES[name]
        assert src.startswith("NOT TRACED") or (TRACE.search(src) and DATE.search(src)), f"{name}: {src!r}"


def test_the_pattern_rejects_a_bare_name():
    assert not TRACE.search("AMD datasheet") and not DATE.search("2026")
