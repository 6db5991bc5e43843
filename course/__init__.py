"""Course UI: Japanese plots and quizzes for JupyterLab.

This package sits beside the engine (``minimal_engine``) and only presents
what the engine and its calculators compute:

- ``course.plots``: ``setup_japanese_font()`` and small plotting helpers.
- ``course.quiz``: question banks in YAML (``quizzes/*.yaml``), answer
  checking as plain functions, and an ipywidgets renderer.

Submodules are imported on demand so that ``import course.quiz`` does not
load matplotlib, and ``import course.plots`` does not load ipywidgets.
"""
