"""The course around the engine (``minimal_engine``): it only presents what the engine and its calculators
compute. Read the tree as the course's architecture:

- ``runtime``: models and devices, the thread policy, the one bounded LLM cache every lab uses.
- ``plots``: ``setup_japanese_font()`` and small plotting helpers; ``TERMS.md``: the course's vocabulary.
- ``labs``: each chapter's lab as plain experiment functions returning data (``course.labs.lab01`` ...).
- ``panels``: the labs' widgets only (``course.panels.build(n)``); panels import labs, never the reverse.
- ``labkit``: what several labs share (repeats, arrivals, backends, history and CSV, cost, load, charts).
- ``demos``: helpers the lessons call (generation without a cache, block pools, KV simulation, formats).
- ``quiz``: question banks in YAML, grading as plain functions, the ipywidgets renderer.
- ``tooling``: the learner's working copies, saving notebooks with placeholders, the layout lints.
- ``instructor``: the workshop's instructor: the /metrics dashboard, a rehearsal class, the class summary.

Submodules are imported on demand, so that ``import course.quiz.bank`` does not load matplotlib and
``import course.plots`` does not load ipywidgets.
"""
