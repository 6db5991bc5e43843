"""A picture of the engine's KV block pool, step by step (chapter 4), from ``BlockManager.snapshot()``.

    snaps = pool_steps(requests=[{"prompt": ids, "max_tokens": 6, "at_step": 0}, ...], block_size=4, num_blocks=24)
    plot_pool(snaps)            # one row per engine step: which request holds each block, free / cached-free

``snapshot()`` is for teaching and is never called by the engine's own loop; here it is called once after
each ``engine.step()``. By then a request that finished in the step has already given its blocks back, so
each record also keeps ``last_blocks``: the blocks such a request held in its final step (recorded as the
engine frees them), which the picture draws hatched in that row. With ``enable_prefix_caching=True`` a finished request's full blocks stay in the
cache (free to reuse, evicted least-recently-used); a later request with the same prefix takes them back.
"""
from __future__ import annotations

from minimal_engine import LLM, SamplingParams


def pool_steps(requests: list[dict], block_size: int = 4, num_blocks: int = 24, enable_prefix_caching: bool = True,
               max_steps: int = 200) -> list[dict]:
    """Run ``requests`` (each: ``prompt`` token ids, ``max_tokens``, ``at_step`` when it arrives) on a small
    engine and return one record per step: the snapshot, request index per block and who was running."""
    llm = LLM(None, dtype="float32", device="cpu", block_size=block_size, num_kv_blocks=num_blocks,
              max_model_len=num_blocks * block_size, enable_prefix_caching=enable_prefix_caching)
    engine, index, snaps, finished = llm.engine, {}, [], set()
    freed: dict[str, list[int]] = {}                     # request id -> its block table as it is freed
    bm, engine_free = engine.block_manager, engine.block_manager.free

    def free(seq):
        freed[seq.request_id] = list(seq.block_table)
        engine_free(seq)

    bm.free = free
    step = 0
    while step < max_steps and (len(finished) < len(requests)):
        for i, r in enumerate(requests):
            if r["at_step"] == step:
                rid = engine.add_request(r["prompt"], SamplingParams(temperature=0, max_tokens=r["max_tokens"],
                                                                     ignore_eos=True))
                index[rid] = i
        freed.clear()
        outs = engine.step() if engine.has_unfinished_requests() else []
        finished |= {index[o.request_id] for o in outs if o.finished}
        s = engine.block_manager.snapshot()
        holders = [[] for _ in range(s["num_blocks"])]
        for rid, blocks in s["owners"].items():
            for b in blocks:
                if rid in index:
                    holders[b].append(index[rid])
        owner = [min(h) if h else None for h in holders]
        cached_by = {o.request_id: getattr(o, "num_cached_tokens", None) for o in outs}
        snaps.append({"step": step, "owner": owner, "holders": [sorted(h) for h in holders], "cached_free": set(s["cached_free"]), "free": set(s["free"]),
                      "shared": {b for b, c in enumerate(s["ref_counts"]) if c > 1},
                      "cached_tokens": {index[r]: c for r, c in cached_by.items() if c},
                      "finished": sorted(index[o.request_id] for o in outs if o.finished),
                      "last_blocks": {index[o.request_id]: freed.get(o.request_id, []) for o in outs if o.finished}})
        step += 1
    return snaps


COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]


def plot_pool(snaps: list[dict], title: str = "KV ブロックプールの様子（1行 = 1ステップ）"):
    """Rows: steps; columns: blocks. Colour = the request holding the block (its number written in it), light
    grey = cached and free (reusable), white = free; a thick edge marks a block shared by two or more requests;
    hatched = held in its final step by a request that finished in this step (given back at the step's end)."""
    from matplotlib.patches import Rectangle

    from course.labkit.charts import figure
    n = len(snaps[0]["owner"])
    fig, ax = figure(min(12, 1.5 + 0.42 * n), 0.8 + 0.32 * len(snaps))
    for y, s in enumerate(snaps):
        for b in range(n):
            o = s["owner"][b]
            color = COLORS[o % len(COLORS)] if o is not None else ("#d9d9d9" if b in s["cached_free"] else "white")
            ax.add_patch(Rectangle((b, y), 1, 1, facecolor=color, edgecolor="#444" if b in s["shared"] else "#bbb",
                                   linewidth=2.2 if b in s["shared"] else 0.6))
            last = sorted(i for i, bl in s.get("last_blocks", {}).items() if b in bl)
            if o is None and last:                       # used in the final step, then given back
                ax.add_patch(Rectangle((b, y), 1, 1, fill=False, hatch="////", edgecolor=COLORS[last[0] % len(COLORS)],
                                       linewidth=0))
                ax.text(b + 0.5, y + 0.5, "+".join(map(str, last)), ha="center", va="center", fontsize=6, color="#333")
            if o is not None:
                ax.text(b + 0.5, y + 0.5, "+".join(map(str, s["holders"][b])), ha="center", va="center", fontsize=6,
                        color="white")
    ax.set_xlim(0, n)
    ax.set_ylim(len(snaps), 0)
    ax.set_xticks([b + 0.5 for b in range(n)], [str(b) for b in range(n)], fontsize=6)
    ax.set_yticks([y + 0.5 for y in range(len(snaps))], [str(s["step"]) for s in snaps], fontsize=7)
    ax.set_xlabel("ブロック番号（数字 = 持っているリクエスト、灰色 = キャッシュ済みで空き、白 = 空き、太枠 = 共有、\n"
                  "斜線 = このステップで終わったリクエストが最後に使い、ステップの終わりに返したブロック）")
    ax.set_ylabel("ステップ")
    ax.set_title(title, fontsize=10)
    return fig


__all__ = ["pool_steps", "plot_pool"]
