"""A picture of the block pool for teaching (BlockManager.snapshot; chapter 4's figures,
course/demos/block_pool.py): the engine never calls it. Read after the core path."""
from __future__ import annotations


def block_snapshot(bm) -> dict:
    """Who holds which block, the reference counts, and the free queue in eviction order (free
    blocks, and cached blocks that are free to reuse)."""
    cached = set(bm.cache.block_hash) if bm.cache is not None else set()
    free = list(bm.free_blocks)
    return {"num_blocks": bm.num_blocks, "block_size": bm.block_size,
            "owners": {rid: list(s.block_table) for rid, s in bm.seqs.items()},
            "ref_counts": list(bm.ref_counts),
            "free": [b for b in free if b not in cached],
            "cached_free": [b for b in free if b in cached],
            "cached": sorted(cached)}
