"""Chapter 4's memory simulation: one request stream, two ways to hold its KV cache.

Plain functions (no model, no timing), so the lesson, the lab and the tests share them::

    reqs = request_stream(200, seed=0)                       # prompt / output / max_tokens per request
    c = simulate(reqs, pool_tokens=32_768, policy="contiguous")
    p = simulate(reqs, pool_tokens=32_768, policy="paged", block_size=16)
    c["summary"]["mean_used_share"], p["summary"]["mean_used_share"]

* ``contiguous``: as servers before paging did, each admitted request reserves one contiguous range of
  ``prompt_len + max_tokens`` slots (the most it may ever need; ``reserve="max_model_len"`` reserves
  ``max_model_len``) in one address space, first fit. Reserved slots split in two, as Kwon et al.
  (SOSP 2023, Fig. 2) do: ``future`` ("reserved": the request will still write them) and ``internal``
  (internal fragmentation: never written before the request ends). Free slots that the next request
  cannot use because no single gap is large enough are external fragmentation.
* ``paged``: as the engine's ``BlockManager``: fixed blocks of ``block_size`` slots, taken one at a time as
  the sequence grows; only the last block of each sequence has empty slots. When no block is free, the
  newest running request is preempted (its blocks freed; it is recomputed later), as the engine's scheduler.

``summary`` averages over every step, including the drain at the end when the queue is empty and the pool
empties; ``busy_running`` / ``busy_used_share`` average only over the steps in which requests were still
waiting (``busy_steps`` of them), which is the steady state a loaded server sees (NaN when nobody ever waits).

Time is counted in engine steps: every running request makes one token per step; a request admitted in a
step also makes its first token in it. ``used`` ("KV written") counts the token made in the step as written;
the engine writes its K/V in the next step (lesson 4, cell 10), so ``used`` runs ahead by at most one token per
running request (and ``internal`` is that much smaller): a stated bookkeeping convention. Lengths are drawn
from log-normal distributions (many short requests, a long tail): the medians and spreads are this course's assumptions, shown as parameters.
"""
from __future__ import annotations

import math
import random


def request_stream(n: int = 200, seed: int = 0, prompt_median: int = 300, output_median: int = 200,
                   sigma: float = 0.9, max_tokens_choices=(256, 512, 1024, 2048), max_model_len: int = 4096,
                   rate_per_step: float | None = None, tightest: bool = False) -> list[dict]:
    """``n`` requests: ``prompt_len`` and ``output_len`` log-normal (medians given, spread ``sigma``),
    ``max_tokens`` (the client's limit, at least the output) drawn at random among the ``max_tokens_choices``
    that fit (with ``tightest``, the smallest that fits; the lengths drawn stay the same), and
    ``arrival_step`` (all 0, or Poisson arrivals at ``rate_per_step`` requests per step). Seeded."""
    rng = random.Random(seed)
    reqs, t = [], 0.0
    for i in range(n):
        p = min(max(1, round(rng.lognormvariate(math.log(prompt_median), sigma))), max_model_len // 2)
        o = max(1, round(rng.lognormvariate(math.log(output_median), sigma)))
        allowed = [m for m in max_tokens_choices if m >= o and p + m <= max_model_len] or [max_model_len - p]
        m = rng.choice(allowed)                  # drawn in both modes, so the lengths that follow stay the same
        m = min(allowed) if tightest else m
        if rate_per_step:
            t += rng.expovariate(rate_per_step)
        reqs.append({"index": i, "prompt_len": p, "output_len": min(o, m), "max_tokens": m,
                     "arrival_step": int(t) if rate_per_step else 0})
    return reqs


def _first_fit(allocs: list[tuple[int, int, int]], need: int, pool: int) -> int | None:
    """Start of the first gap of ``need`` slots among sorted (start, size, owner) ranges, or None."""
    pos = 0
    for start, size, _ in allocs:
        if start - pos >= need:
            return pos
        pos = start + size
    return pos if pool - pos >= need else None


def _largest_gap(allocs, pool: int) -> int:
    pos, best = 0, 0
    for start, size, _ in allocs:
        best, pos = max(best, start - pos), start + size
    return max(best, pool - pos)


def simulate(requests: list[dict], pool_tokens: int, policy: str = "paged", block_size: int = 16,
             reserve: str = "max_tokens", max_model_len: int = 4096, max_num_seqs: int = 256,
             max_steps: int = 200_000) -> dict:
    """Run the stream to completion; returns per-step ``trace`` lists and a ``summary`` (see module doc)."""
    if policy not in ("contiguous", "paged"):
        raise ValueError(f"policy must be 'contiguous' or 'paged', got {policy!r}")
    if reserve not in ("max_tokens", "max_model_len"):
        raise ValueError(f"reserve must be 'max_tokens' or 'max_model_len', got {reserve!r}")
    waiting = sorted(requests, key=lambda r: (r["arrival_step"], r["index"]))
    waiting = [dict(r, done=0) for r in waiting]
    queue: list[dict] = []
    running: list[dict] = []
    allocs: list[tuple[int, int, int]] = []           # contiguous: (start, size, owner)
    free_blocks = pool_tokens // block_size
    trace = {k: [] for k in ("used", "reserved", "future", "internal", "external", "running", "waiting")}
    finished, preemptions, step, admitted_at = 0, 0, 0, {}

    def need(r):
        if policy == "paged":
            return -(-(r["prompt_len"] + r["done"] + 1) // block_size)
        return max_model_len if reserve == "max_model_len" else r["prompt_len"] + r["max_tokens"]

    while (waiting or queue or running) and step < max_steps:
        while waiting and waiting[0]["arrival_step"] <= step:
            queue.append(waiting.pop(0))
        # admit in arrival order while the head fits (first come, first served: no skipping ahead)
        external = 0
        while queue and len(running) < max_num_seqs:
            r = queue[0]
            if policy == "paged":
                if need(r) > free_blocks:
                    break
                r["blocks"] = need(r)
                free_blocks -= r["blocks"]
            else:
                start = _first_fit(allocs, need(r), pool_tokens)
                if start is None:
                    free = pool_tokens - sum(a[1] for a in allocs)
                    external = free if free >= need(r) else 0
                    break
                allocs.append((start, need(r), r["index"]))
                allocs.sort()
            admitted_at.setdefault(r["index"], step)
            running.append(queue.pop(0))
        # one token for every running request
        for r in list(running):
            if r not in running:                        # preempted earlier in this step
                continue
            r["done"] += 1
            if policy == "paged" and r["done"] < r["output_len"]:
                want = -(-(r["prompt_len"] + r["done"] + 1) // block_size)
                while r["blocks"] < want:
                    if free_blocks == 0:                # preempt the newest request (maybe r itself)
                        victim = running.pop()
                        free_blocks += victim["blocks"]
                        victim["blocks"] = 0
                        queue.insert(0, victim)
                        preemptions += 1
                        if victim is r:
                            break
                        continue
                    free_blocks -= 1
                    r["blocks"] += 1
            if r in running and r["done"] >= r["output_len"]:
                running.remove(r)
                finished += 1
                if policy == "paged":
                    free_blocks += r["blocks"]
                else:
                    allocs = [a for a in allocs if a[2] != r["index"]]
        used = sum(r["prompt_len"] + r["done"] for r in running)
        reserved = (sum(r["blocks"] for r in running) * block_size if policy == "paged"
                    else sum(a[1] for a in allocs))
        # reserved slots this request will still write (its remaining output, up to what it holds)
        future = sum(min(r["blocks"] * block_size, r["prompt_len"] + r["output_len"]) - r["prompt_len"] - r["done"]
                     if policy == "paged" else r["output_len"] - r["done"] for r in running)
        for k, v in (("used", used), ("reserved", reserved), ("future", future),
                     ("internal", reserved - used - future), ("external", external),
                     ("running", len(running)), ("waiting", len(queue))):
            trace[k].append(v)
        step += 1
    n = max(len(trace["used"]), 1)
    summary = {"policy": policy, "steps": step, "finished": finished, "preemptions": preemptions,
               "mean_running": sum(trace["running"]) / n, "peak_running": max(trace["running"], default=0),
               "mean_used_share": sum(trace["used"]) / (n * pool_tokens),
               "mean_future_share": sum(trace["future"]) / (n * pool_tokens),
               "mean_internal_share": sum(trace["internal"]) / (n * pool_tokens),
               "mean_external_share": sum(trace["external"]) / (n * pool_tokens),
               "mean_wait_steps": sum(admitted_at.values()) / max(len(admitted_at), 1)
               - sum(r["arrival_step"] for r in requests) / max(len(requests), 1)}
    busy = [i for i, w in enumerate(trace["waiting"]) if w > 0]     # steps with requests still queued
    nb = len(busy) or float("nan")                                  # nobody ever waited: no busy phase (NaN)
    summary.update({"busy_steps": len(busy), "busy_running": sum(trace["running"][i] for i in busy) / nb,
                    "busy_used_share": sum(trace["used"][i] for i in busy) / (nb * pool_tokens)})
    return {"trace": trace, "summary": summary, "pool_tokens": pool_tokens, "block_size": block_size,
            "reserve": reserve}


def compare(requests: list[dict], pool_tokens: int, block_size: int = 16, max_model_len: int = 4096) -> dict:
    """Contiguous (per-request maximum and max_model_len reservations) and paged on the same stream."""
    return {"contiguous_max_model_len": simulate(requests, pool_tokens, "contiguous", reserve="max_model_len",
                                                 max_model_len=max_model_len),
            "contiguous_max_tokens": simulate(requests, pool_tokens, "contiguous", reserve="max_tokens",
                                              max_model_len=max_model_len),
            "paged": simulate(requests, pool_tokens, "paged", block_size=block_size, max_model_len=max_model_len)}


LABELS = {"contiguous_max_model_len": "連続確保（max_model_len）", "contiguous_max_tokens": "連続確保（max_tokens）",
          "paged": "ページング（ブロック）"}


def plot_compare(results: dict):
    """Memory over time for each policy: KV written, reserved slots written later, internal (never written)
    and external fragmentation."""
    from course.labkit.charts import figure
    fig, axes = figure(11, 3.6, 1, len(results), sharey=True)
    for ax, (name, res) in zip(axes, results.items()):
        t, pool = res["trace"], res["pool_tokens"]
        x = range(len(t["used"]))
        used = [v / pool * 100 for v in t["used"]]
        future = [v / pool * 100 for v in t["future"]]
        internal = [v / pool * 100 for v in t["internal"]]
        external = [v / pool * 100 for v in t["external"]]
        ax.stackplot(x, used, future, internal, external, colors=["tab:blue", "#9ecae1", "tab:orange", "tab:red"],
                     labels=["書き込まれた KV", "予約（これから書かれる）", "内部断片化（最後まで書かれない）",
                             "外部断片化（空きだが使えない）"])
        s = res["summary"]
        ax.set_title(f"{LABELS.get(name, name)}\n平均 {s['mean_running']:.1f} 件同時・{s['steps']:,} ステップ", fontsize=9)
        ax.set_xlabel("ステップ")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("KV プールに占める割合 [%]")
    handles, labels = axes[0].get_legend_handles_labels()        # below the panels: covers no data
    fig.legend(handles, labels, fontsize=7, loc="outside lower center", ncol=len(labels))
    return fig


__all__ = ["LABELS", "compare", "plot_compare", "request_stream", "simulate"]
