"""The lab kit every chapter's lab uses (plain functions; the widgets in ``panel`` only call them).

- ``measure`` / ``sweep``: runs with repeats (median and min-max), the load check before, the sweep's
  self-check after (``course.labkit.measure``, ``course.labkit.load``).
- ``arrival_plan``: all at once, a fixed rate (Poisson, seeded), a late long prompt (``arrivals``).
- ``local_backend`` / ``openai_backend`` and ``run_plan``: the local engine or any OpenAI-compatible server,
  the same metrics (``backends``).
- history rows, CSV export, a one-line summary, the class's merge (``history``), plots (``charts``),
  spaced HTML readouts (``tables``), cost in $/100万トークン and J/トークン (``measure.cost``).

Importing the kit applies the course's thread policy (``course.runtime.apply_thread_policy``:
``COURSE_THREADS``, default half the cores).
"""
from course.runtime import apply_thread_policy, course_threads, default_threads
from course.labkit.arrivals import ARRIVALS, DEFAULT_RATE, arrival_plan, check_arrivals, describe
from course.labkit.backends import (Backend, build_result, class_server, local_backend, openai_backend, run_plan,
                                    use_class_server)
from course.labkit.charts import figure, plot_history_sweeps, plot_merged, plot_sweeps
from course.labkit.history import (add_measurement, add_sweep, read_csv, read_csvs, save_csv, summary_line, sweeps,
                                   to_csv)
from course.labkit.load import check_load, load_warning, sample_cpu_load, sweep_warnings
from course.labkit.measure import (METRICS, aggregate, check_repeats, cost, measure, order_held, parse_sweep_list,
                                   sweep)
from course.labkit.tables import cost_html, history_html, readout_html, table_html, warnings_html

apply_thread_policy()

__all__ = ["ARRIVALS", "Backend", "DEFAULT_RATE", "METRICS", "add_measurement", "add_sweep", "aggregate",
           "apply_thread_policy", "arrival_plan", "build_result", "check_arrivals", "check_load", "check_repeats",
           "class_server", "cost", "cost_html", "course_threads", "default_threads", "describe", "figure",
           "history_html",
           "load_warning", "local_backend", "measure", "openai_backend", "order_held", "parse_sweep_list",
           "plot_history_sweeps", "plot_merged", "plot_sweeps", "read_csv", "read_csvs", "readout_html", "run_plan",
           "sample_cpu_load", "save_csv", "summary_line", "sweep", "sweep_warnings", "sweeps", "table_html", "to_csv",
           "use_class_server", "warnings_html"]
