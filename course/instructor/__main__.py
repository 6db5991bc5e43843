"""The instructor's commands (``python -m course.instructor ...``).

- ``summary FOLDER``: the learners' lab CSVs in FOLDER: one line per learner, the spread of the
  class's machines, ``class_results.png`` (every learner's lab 1 sweeps) and ``class_summary.png``
  (the spread) next to FOLDER (or in ``--out``).
- ``watch --url URL``: the dashboard without a notebook: reads /metrics every ``--interval`` seconds
  for ``--seconds``, prints one line per read and saves the picture (``--png``).
- ``simulate --url URL --model NAME``: a rehearsal class of ``--learners`` processes running lab 1's
  requests against the server for ``--seconds``; prints what they sent.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _summary(args) -> int:
    from course.instructor.summary import plot_spread, read_class, spread_lines
    from course.labkit.charts import plot_merged
    from course.labkit.history import read_csvs, summary_line
    folder = Path(args.folder)
    out = Path(args.out) if args.out else folder.parent
    out.mkdir(parents=True, exist_ok=True)
    lab1 = [p for p in sorted(folder.glob("*.csv"))
            if "tok_s" in p.read_text(encoding="utf-8").split("\n", 1)[0]]
    merged = read_csvs(lab1) if lab1 else {}
    for name, rows in merged.items():
        print(summary_line(rows, name))
    if merged:
        plot_merged(merged).savefig(out / "class_results.png", dpi=120)
        print(f"wrote {out / 'class_results.png'}")
    machines = read_class(folder)
    print("\n".join(spread_lines(machines)))
    plot_spread(machines).savefig(out / "class_summary.png", dpi=120)
    print(f"wrote {out / 'class_summary.png'}")
    return 0


def _watch(args) -> int:
    from course.instructor.figure import draw
    from course.instructor.metrics import scrape
    from course.instructor.rates import Series
    if not (args.interval > 0 and args.seconds > 0):
        raise ValueError(f"--interval と --seconds は正の数にしてください。 / --interval and --seconds must "
                         f"be > 0, got {args.interval}, {args.seconds}")
    series, end = Series(args.window), time.monotonic() + args.seconds
    while True:
        try:
            p = series.add(scrape(args.url, args.api_key, timeout_s=max(5.0, 2 * args.interval)))
        except ConnectionError as e:               # a busy or restarting server: say so, read again
            print(f"⚠ {e}", flush=True)
            time.sleep(args.interval)
            if time.monotonic() > end:
                break
            continue
        print(f"{p.t:6.1f} s  実行中 {p.running:.0f}  待機中 {p.waiting:.0f}  "
              f"KV {100 * p.kv_usage:.1f} %  出力 {p.out_tok_s:.1f} tok/s  "
              f"TTFT p50 {p.ttft_ms[0]:.0f} ms  TPOT p50 {p.tpot_ms[0]:.1f} ms", flush=True)
        if time.monotonic() + args.interval > end:
            break
        time.sleep(args.interval)
    if not series.points:
        raise ConnectionError(f"{args.url}/metrics を一度も読めませんでした。 / never read {args.url}/metrics")
    Path(args.png).parent.mkdir(parents=True, exist_ok=True)
    draw(series).savefig(args.png, dpi=100)
    print(f"wrote {args.png}")
    return 0


def _simulate(args) -> int:
    from course.instructor.simulate import simulate_class
    reports = simulate_class(args.url, args.model, args.learners, args.seconds, args.join_over,
                             args.concurrency, args.prompt_len, args.output_len, args.api_key)
    errors = [r["error"] for r in reports if r["error"]]
    print(f"learners {len(reports)}  requests {sum(r['requests'] for r in reports)}  "
          f"output tokens {sum(r['output_tokens'] for r in reports)}  errors {len(errors)}")
    for e in errors[:3]:
        print("  ", e)
    return 1 if errors else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m course.instructor",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summary", help="merge the learners' lab CSVs in a folder")
    s.add_argument("folder")
    s.add_argument("--out", help="folder for the pictures (default: FOLDER's parent)")
    for name in ("watch", "simulate"):
        w = sub.add_parser(name)
        w.add_argument("--url", default="http://127.0.0.1:8000")
        w.add_argument("--api-key", default=None)
        w.add_argument("--seconds", type=float, default=30.0)
    w = sub.choices["watch"]
    w.add_argument("--interval", type=float, default=1.0)
    w.add_argument("--window", type=float, default=5.0)
    w.add_argument("--png", default="work/dashboard.png")
    m = sub.choices["simulate"]
    m.add_argument("--model", default="minimal-ja")
    m.add_argument("--learners", type=int, default=30)
    m.add_argument("--join-over", type=float, default=10.0)
    m.add_argument("--concurrency", type=int, default=1)
    m.add_argument("--prompt-len", type=int, default=16)
    m.add_argument("--output-len", type=int, default=8)
    args = ap.parse_args(argv)
    try:
        return {"summary": _summary, "watch": _watch, "simulate": _simulate}[args.command](args)
    except (ValueError, FileNotFoundError, ConnectionError, RuntimeError) as e:
        print(f"エラー / error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
