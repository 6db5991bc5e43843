"""BlockManager: hands out and takes back the fixed-size blocks of the paged KV cache.

The KV pool (engine/model_runner.py) is one tensor of `num_blocks` blocks of `block_size` token
slots each, allocated once. A sequence owns a list of block ids (its block table); token i of the
sequence lives in block `block_table[i // block_size]` at offset `i % block_size`. Nothing here
touches tensors: it is bookkeeping of which block belongs to whom, so it can be tested on its own.

Blocks are reference-counted (requests may share one through the prefix cache, prefix_cache.py).
A block whose count drops to zero goes to the back of the free queue; new blocks are taken from the
front, so the free queue is also the least-recently-used order in which cached blocks are evicted
(vLLM's FreeKVCacheBlockQueue). With prefix caching off, this is a plain free list.
"""
from __future__ import annotations

from collections import OrderedDict

from minimal_engine.engine.block_snapshot import block_snapshot
from minimal_engine.engine.prefix_cache import PrefixCache
from minimal_engine.engine.sequence import Sequence


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False,
                 block_hashes=None):
        """block_hashes: None (the built-in chained hash) or a function (token_ids, block_size) ->
        the chained hashes of the full blocks, for the prefix cache (exercise 04 plugs one in)."""
        self.num_blocks = num_blocks
        self.block_size = block_size
        # front = evicted first
        self.free_blocks: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.ref_counts = [0] * num_blocks
        self.seqs: dict[str, Sequence] = {}      # request id -> sequence holding blocks
        self.cache = PrefixCache(block_size, block_hashes) if enable_prefix_caching else None

    @property
    def num_free_blocks(self) -> int:
        """Blocks no request holds: truly free ones plus cached ones that may be evicted."""
        return len(self.free_blocks)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)  # ceil

    def can_allocate(self, seq: Sequence, num_tokens: int) -> bool:
        """Could `seq` hold `num_tokens` tokens in total with the blocks free now (and, for a seq
        holding none yet, its prefix's cached blocks, which may have to leave the free queue)?"""
        hits = self._hits(seq)
        extra = self.blocks_needed(num_tokens) - len(seq.block_table) - len(hits)
        reclaimed = sum(1 for b in hits if self.ref_counts[b] == 0)
        return extra <= len(self.free_blocks) - reclaimed

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        """Grow seq's block table to cover `num_tokens` tokens (whose K/V this step computes)."""
        extra = self.blocks_needed(num_tokens) - len(seq.block_table)
        if extra > len(self.free_blocks):
            raise RuntimeError(f"out of KV blocks: need {extra}, {len(self.free_blocks)} free")
        self.seqs[seq.request_id] = seq
        for _ in range(extra):
            block, _ = self.free_blocks.popitem(last=False)
            if self.cache is not None:
                self.cache.evict(block)               # its old contents will be overwritten
            self.ref_counts[block] = 1
            seq.block_table.append(block)
        if self.cache is not None:
            self.cache.register(seq, num_tokens)      # full blocks: findable by later requests

    # ---- prefix caching: the scheduler only asks how many tokens are cached
    def _hits(self, seq: Sequence) -> list[int]:
        return self.cache.lookup(seq) if self.cache is not None and not seq.block_table else []

    def num_cached_tokens(self, seq: Sequence) -> int:
        """Tokens at the start of seq (holding no blocks yet) whose K/V the prefix cache has."""
        return len(self._hits(seq)) * self.block_size

    def take_cached(self, seq: Sequence) -> int:
        """Give seq the cached blocks of its prefix (counted as queries and hits); returns the
        cached tokens."""
        if self.cache is None or seq.block_table:
            return 0
        hits = self.cache.lookup(seq, count=True)
        for b in hits:
            if self.ref_counts[b] == 0:
                del self.free_blocks[b]
            self.ref_counts[b] += 1
        seq.block_table = list(hits)
        return len(hits) * self.block_size

    def free(self, seq: Sequence) -> None:
        """Drop seq's references; blocks nobody holds go to the back of the free queue (cached ones
        stay cached). The tail block goes first: it is evicted before the prefix that other prompts
        are likelier to share."""
        for block in reversed(seq.block_table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks[block] = None
        seq.block_table = []
        self.seqs.pop(seq.request_id, None)
        if self.cache is not None:
            self.cache.forget(seq)

    def trim(self, seq: Sequence, num_tokens: int) -> None:
        """Give back seq's tail blocks beyond what `num_tokens` tokens need (rejected drafts')."""
        while len(seq.block_table) > self.blocks_needed(num_tokens):
            block = seq.block_table.pop()
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks[block] = None

    def prefix_cache_stats(self) -> dict:
        """Engine-wide: prompt tokens looked up in the prefix cache, found there, their ratio."""
        c = self.cache
        return {"queries": c.queries if c else 0, "hits": c.hits if c else 0,
                "hit_rate": c.hit_rate if c else 0.0}

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block (vLLM's reset_prefix_cache); only when no request holds one."""
        if self.cache is None or self.seqs:
            return False
        for block in list(self.cache.block_hash):
            self.cache.evict(block)
        return True

    def slot(self, seq: Sequence, position: int) -> int:
        """Flat slot index of token `position` of seq in the pool."""
        bs = self.block_size
        return seq.block_table[position // bs] * bs + position % bs

    def snapshot(self) -> dict:
        """For teaching (the engine never calls it): who holds which block (block_snapshot.py)."""
        return block_snapshot(self)
