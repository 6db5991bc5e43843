"""BlockManager: hands out and takes back the fixed-size blocks of the paged KV cache.

The KV pool (see model_runner.py) is one tensor of `num_blocks` blocks of `block_size` token slots each,
allocated once. A sequence owns a list of block ids (its block table); token i of the sequence lives in
block `block_table[i // block_size]` at offset `i % block_size`. Nothing here touches tensors: it is
bookkeeping of which block belongs to whom, so it can be tested on its own.
"""
from __future__ import annotations

from collections import deque

from .sequence import Sequence


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_blocks: deque[int] = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)  # ceil

    def can_allocate(self, seq: Sequence, num_tokens: int) -> bool:
        """Could `seq` hold `num_tokens` tokens in total with the blocks that are free now?"""
        extra = self.blocks_needed(num_tokens) - len(seq.block_table)
        return extra <= len(self.free_blocks)

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        """Grow seq's block table so that it covers `num_tokens` tokens."""
        extra = self.blocks_needed(num_tokens) - len(seq.block_table)
        if extra > len(self.free_blocks):
            raise RuntimeError(f"out of KV blocks: need {extra}, {len(self.free_blocks)} free")
        for _ in range(extra):
            seq.block_table.append(self.free_blocks.popleft())

    def free(self, seq: Sequence) -> None:
        """Return all of seq's blocks to the pool."""
        self.free_blocks.extend(seq.block_table)
        seq.block_table = []

    def slot(self, seq: Sequence, position: int) -> int:
        """Flat slot index of token `position` of seq in the pool."""
        return seq.block_table[position // self.block_size] * self.block_size + position % self.block_size
