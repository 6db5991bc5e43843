"""Static batching, for comparison with continuous batching (chapter 5): the scheduler admits
requests in groups of max_num_seqs, and no request joins until every member of the running group
has finished, so finished members' slots stay idle. Scheduler(config with batching="static") asks a StaticGroups.
"""
from __future__ import annotations

from collections import deque


class StaticGroups:
    """batching="static": admission in groups. A group is the first max_num_seqs waiting requests
    once nothing runs; only its members are admitted (a preempted member rejoins it; one that
    leaves the queue leaves it)."""

    def __init__(self, size: int):
        self.size = size
        self.left = 0                 # members of the current group not yet admitted

    def open_if_idle(self, running: list, waiting: deque) -> None:
        if not running and not self.left:
            self.left = min(len(waiting), self.size)

    def may_admit(self) -> bool:
        return self.left > 0

    def admitted(self) -> None:
        self.left -= 1

    def rejoined(self) -> None:
        self.left += 1

    def left_queue(self, index: int) -> None:
        """The request at `index` of the waiting queue finished (aborted) before it was admitted."""
        if index < self.left:
            self.left -= 1
