"""The course's tree is its architecture (course/__init__.py, /work ARCHITECTURE): no import cycles (imports
inside functions count), labs never import panels or each other, files of at most 300 lines with a docstring,
absolute imports, one bounded LLM cache (course.runtime) that closes what it drops, notebooks on the new paths."""
import json
import re
from pathlib import Path

from course import runtime
from course.tooling import lints

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("labs", "panels", "labkit", "demos", "quiz", "tooling")


def test_the_tree_is_the_diagram():
    course = ROOT / "course"
    for name in ("TERMS.md", "plots.py", "runtime.py", *(f"{p}/__init__.py" for p in PACKAGES)):
        assert (course / name).is_file(), name
    assert sorted(p.name for p in (course / "labs").glob("lab??.py")) == [f"lab{n:02d}.py" for n in range(1, 11)]
    flat = sorted(p.name for p in course.glob("*.py"))
    assert flat == ["__init__.py", "plots.py", "runtime.py"], flat       # everything else lives in a package


def test_no_import_cycle_anywhere_in_course():
    graph = lints.import_graph()
    assert "course.labs.lab01" in graph and graph["course.panels.lab01"] >= {"course.labs.lab01"}
    assert lints.import_cycles(graph) == []


def test_the_cycle_finder_counts_imports_inside_functions(tmp_path):
    pkg = tmp_path / "course"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""x"""\n')
    (pkg / "a.py").write_text('"""a"""\nfrom course.b import f\n')
    (pkg / "b.py").write_text('"""b"""\ndef f():\n    from course import a\n    return a\n')
    assert lints.import_cycles(lints.import_graph(pkg)) == [["course.a", "course.b"]]
    assert any("import cycle" in p for p in lints.layout_problems(pkg))


def test_layout_rules_hold():
    assert lints.layout_problems() == []


def test_labs_import_neither_panels_nor_other_labs():
    graph = lints.import_graph()
    for name, deps in graph.items():
        if name.startswith("course.labs."):
            assert not any(d.startswith("course.panels") for d in deps), (name, deps)
    assert not any(d.startswith("course.labs.lab0") for d in graph["course.labs.lab10"])   # shared: labkit
    for n in range(5, 11):
        assert "course.panels.slider" not in graph[f"course.labs.lab{n:02d}"]


class _Engine:
    def __init__(self, name, closed):
        self.name, self.closed = name, closed

    def close(self):
        self.closed.append(self.name)


def test_one_bounded_cache_closes_what_it_drops(monkeypatch):
    monkeypatch.setattr(runtime, "_LLM_CACHE", type(runtime._LLM_CACHE)())
    closed = []
    assert 2 <= runtime.LLM_CACHE_SIZE <= 4
    made = [runtime.cached_llm(("lab8", k), lambda k=k: _Engine(k, closed)) for k in range(runtime.LLM_CACHE_SIZE)]
    assert runtime.cached_llm(("lab8", 0), lambda: _Engine("again", closed)) is made[0]      # kept, now the newest
    runtime.cached_llm(("lab9", "x"), lambda: _Engine("x", closed))
    assert closed == [1] and len(runtime._LLM_CACHE) == runtime.LLM_CACHE_SIZE             # the oldest, closed
    runtime.clear_llm_cache("lab9")
    assert closed == [1, "x"] and ("lab8", 0) in runtime._LLM_CACHE
    runtime.clear_llm_cache()
    assert not runtime._LLM_CACHE and sorted(map(str, closed)) == sorted(map(str, range(runtime.LLM_CACHE_SIZE))) + ["x"]


def test_every_slider_lab_is_declared_as_data():
    from course.panels.slider_labs import SLIDER_LABS
    assert sorted(SLIDER_LABS) == list(range(4, 11))
    import importlib
    for n, spec in SLIDER_LABS.items():
        lab = importlib.import_module(spec.module)
        assert callable(getattr(lab, spec.run)) and callable(getattr(lab, spec.plot))
        for key, _label, rng in spec.sliders:
            # a lab's SLO (lab 5) is a slider with its default in lab.SLO, not an experiment size
            assert key in {**getattr(lab, "SLO", {}), **lab.defaults()}, (n, key)
            assert isinstance(rng, tuple) or isinstance(getattr(lab, rng), tuple)


OLD = re.compile(r"from course import [^\n]*\b(?:lab\d|quiz_|notebooks|workspace|no_cache|block_pool|kv_sim|formats|"
                 r"decode_shapes)|from course\.(?:lab\d|quiz_|notebooks|workspace|no_cache|block_pool|kv_sim|formats|"
                 r"decode_shapes)|from course\.quiz import (?!(?:bank|check|figures|numbers|widget)\b)|course\.lab\d+\b|"
                 r"course\.labkit\.panel\b|\.build_lab\(")


def test_notebooks_tests_and_docs_use_the_new_paths():
    files = [p for d in ("lessons", "labs", "quizzes") for p in (ROOT / d).glob("*.ipynb")]
    for path in files:
        nb = json.loads(path.read_text(encoding="utf-8"))
        src = "\n".join("".join(c["source"]) for c in nb["cells"])
        assert not OLD.search(src), (path.name, OLD.search(src)[0])
    for path in [*(ROOT / "tests").rglob("test_*.py"), ROOT / "Makefile", ROOT / "README.md"]:
        text = path.read_text(encoding="utf-8")
        if path.name != "test_course_layout.py":
            assert not OLD.search(text), (path.name, OLD.search(text)[0])


def test_build_says_which_labs_exist():
    import pytest

    from course.panels import build
    from course.panels.slider_labs import slider_app
    with pytest.raises(ValueError, match="1〜10"):
        build(11)
    with pytest.raises(TypeError, match="no setting"):
        slider_app(4, prompt_len=8)                  # lab 4's sliders are shared_len and num_requests


class _Weights(_Engine):
    def __init__(self, name, closed, nbytes):
        super().__init__(name, closed)
        self.nbytes = nbytes

    def parameters(self):                        # what runtime.engine_bytes reads of a torch module
        class P:
            def numel(_):
                return self.nbytes

            def element_size(_):
                return 1
        return [P()]


def test_the_cache_keeps_within_its_memory_budget(monkeypatch):
    monkeypatch.setattr(runtime, "_LLM_CACHE", type(runtime._LLM_CACHE)())
    monkeypatch.setattr(runtime, "LLM_CACHE_BYTES", 100)
    closed = []
    runtime.cached_llm(("lab1", "small"), lambda: _Weights("small", closed, 30))
    runtime.cached_llm(("lab1", "small2"), lambda: _Weights("small2", closed, 30))
    assert closed == [] and runtime.engine_bytes(runtime._LLM_CACHE[("lab1", "small")]) == 30
    big = runtime.cached_llm(("lab1", "big"), lambda: _Weights("big", closed, 90))
    assert closed == ["small", "small2"] and list(runtime._LLM_CACHE.values()) == [big]   # the newest stays
    huge = runtime.cached_llm(("lab1", "huge"), lambda: _Weights("huge", closed, 500))
    assert closed[-1] == "big" and list(runtime._LLM_CACHE.values()) == [huge]           # alone, over the budget
    runtime.clear_llm_cache()
