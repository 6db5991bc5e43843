"""What the instructor of a classroom workshop runs (docs/instructor_guide.md).

- ``metrics``: one scrape of a server's /metrics (ours or vLLM's: the same names) as numbers.
- ``rates``: rates and percentiles between scrapes; the throughput / interactivity curve of the
  class.
- ``figure``: the dashboard's picture and readout; ``live``: the notebook's widget that refreshes
  them.
- ``simulate``: a rehearsal class of learner processes; ``summary``: the spread of the class's
  machines.
- ``python -m course.instructor summary|watch|simulate``: the same from the command line.

Submodules are imported on demand (``from course.instructor.rates import Series``).
"""
