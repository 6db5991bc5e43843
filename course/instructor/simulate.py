"""A rehearsal class: ``learners`` processes, each sending its runs to one server with the lab's own
code.

    results = simulate_class("http://127.0.0.1:8000", "minimal-ja", learners=30, seconds=30)
    sum(r["output_tokens"] for r in results)      # what the server's counters should have grown by

Each learner process joins at its own time (spread over ``join_over_s``), then repeats chapter 1's
lab run (``labkit.run_plan`` with ``labkit.openai_backend``: ``concurrency`` requests at once,
``prompt_len`` tokens in, ``output_len`` out) until ``seconds`` have passed since the class started;
a run begun before that finishes. It reports what it sent and received: requests, output tokens (the
server's usage), each request's TTFT as the client saw it, and the first error if a run failed.
Processes are forked where the platform allows it (the lab kit and the tokenizer are loaded once,
before the fork), else spawned.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time


def _learner(base_url, model, api_key, start_at, stop_at, concurrency, prompt_len, output_len, seed,
             out):
    from course.labkit.arrivals import arrival_plan
    from course.labkit.backends import openai_backend, run_plan
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    report = {"learner": seed, "runs": 0, "requests": 0, "output_tokens": 0, "ttft_ms": [],
              "error": ""}
    try:
        time.sleep(max(0.0, start_at - time.time()))
        backend = openai_backend(base_url, model, api_key=api_key)
        while time.time() < stop_at:
            plan = arrival_plan("all", concurrency, prompt_len, output_len)
            res = run_plan(backend, plan, output_len, seed=seed * 1000 + report["runs"])
            report["runs"] += 1
            report["requests"] += res["summary"]["completed"]
            report["output_tokens"] += res["summary"]["total_output_tokens"]
            report["ttft_ms"] += [r["ttft_ms"] for r in res["requests"]]
    except Exception as e:                      # reported to the parent, which fails loudly
        report["error"] = f"{type(e).__name__}: {e}"
    out.put(report)


def _warm_up() -> None:
    """Import the lab kit and load the prompt tokenizer once here, so forked learners start at once
    (loading transformers takes seconds; thirty learners doing it at once take minutes)."""
    from minimal_engine.llm import DEFAULT_MODEL
    from minimal_engine.model.tokenizer import Tokenizer
    from transformers.utils import logging  # noqa: F401  (what the lab kit's prompts import)

    import course.labkit.backends  # noqa: F401
    Tokenizer(DEFAULT_MODEL).encode("吾輩は")


def simulate_class(base_url: str, model: str, learners: int = 30, seconds: float = 30.0,
                   join_over_s: float = 10.0, concurrency: int = 1, prompt_len: int = 16,
                   output_len: int = 8, api_key: str | None = None,
                   grace_s: float = 120.0) -> list[dict]:
    """Run the class; returns one report per learner (sorted by learner number). Raises RuntimeError
    when a learner does not report within ``seconds + grace_s``."""
    for name, v, lo, hi in (("learners", learners, 1, 200), ("concurrency", concurrency, 1, 16),
                            ("prompt_len", prompt_len, 1, 4096),
                            ("output_len", output_len, 2, 4096)):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"{name} は {lo}〜{hi} の整数で指定してください。 / {name} must be an int in "
                             f"[{lo}, {hi}], got {v!r}")
    if not (0 < seconds <= 3600 and 0 <= join_over_s <= seconds):
        raise ValueError(f"seconds は 0〜3600 秒、join_over_s は 0〜seconds で指定してください。 / need 0 < "
                         f"seconds <= 3600 and 0 <= join_over_s <= seconds, got {seconds!r}, "
                         f"{join_over_s!r}")
    _warm_up()
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    out = ctx.Queue()
    start = time.time()
    procs = [ctx.Process(target=_learner, daemon=True,
                         args=(base_url, model, api_key,
                               start + join_over_s * i / max(1, learners - 1), start + seconds,
                               concurrency, prompt_len, output_len, i, out))
             for i in range(learners)]
    for p in procs:
        p.start()
    reports = []
    try:
        for _ in procs:
            reports.append(out.get(timeout=max(1.0, start + seconds + grace_s - time.time())))
    except Exception as e:
        raise RuntimeError(f"{learners - len(reports)} 人の受講者プロセスが時間内に終わりませんでした。"
                           f" / {learners - len(reports)} learners did not report in time") from e
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
    return sorted(reports, key=lambda r: r["learner"])


__all__ = ["simulate_class"]
