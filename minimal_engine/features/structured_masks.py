"""MaskPool: the constrained requests' next-token masks, computed together and off the engine's
thread.

A step ends with every constrained request accepting its sampled token (GrammarMatcher.accept). The
matcher does not advance there: it hands the token to this pool and returns at once. The pool's own
thread advances all the matchers given to it since it last ran, then fills all their next masks in
one call (llguidance's fill_next_token_bitmask_par, which drops the GIL and spreads the matchers
over its threads), while the engine schedules the next step and runs the model's forward pass. At
sampling time GrammarMatcher.mask waits for its own mask only, which is usually ready by then.

    future = pool.advance(matcher, [token])   # returns at once
    future.result()                           # seconds; the matcher's .bitmask holds its next mask

A mask that takes longer than a step would be waited for by every running request. So each
matcher keeps how long its last mask took (fill_s, the future's result) and the time a step
leaves it (step_s); when the last mask took over half of that and the next is not ready,
GrammarMatcher.late() is true and the scheduler leaves that request out of the step: a heavy
grammar slows its own request only. The error of a token the grammar refused, or of a mask
llguidance could not compute, comes out of future.result() as a ValueError."""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor


class MaskPool:
    """One thread that advances matchers and fills their next masks, several matchers at a time."""

    def __init__(self, vocab_size: int, num_threads: int | None = None, overlap: bool = True,
                 fill=None):
        """num_threads: llguidance's threads for the masks (None: its default, ~80% of the CPUs).
        overlap=False: advance() computes the mask at once, on the caller's (the engine's) thread,
        as before this pool existed (for comparisons). fill(executor, [(matcher, row)], masks):
        llguidance.torch.fill_next_token_bitmask_par by default."""
        self.vocab_size, self.num_threads, self.overlap = vocab_size, num_threads, overlap
        self.fill = fill
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="grammar-masks")
        self._lock = threading.Lock()
        self._batch: list = []          # (GrammarMatcher, tokens, Future) not yet taken
        self._executor = None           # llguidance.LLExecutor, made on first use
        self.batches = 0                # fills done so far (for tests and curiosity)
        self.filled = 0                 # masks filled so far

    def advance(self, grammar, tokens: list[int]) -> Future:
        """Queue: grammar's matcher takes `tokens`, then its next mask goes to grammar.bitmask."""
        future: Future = Future()
        if not self.overlap:
            self._answer([(grammar, list(tokens), future)])
            return future
        with self._lock:
            self._batch.append((grammar, list(tokens), future))
            first = len(self._batch) == 1
        if first:                       # the thread takes everything queued by the time it runs
            self._pool.submit(self._run)
        return future

    def _run(self) -> None:
        with self._lock:
            batch, self._batch = self._batch, []
        self._answer(batch)

    def _answer(self, batch: list) -> None:
        """Each future's result: the seconds the fill took (or the grammar's error)."""
        start = time.perf_counter()
        try:
            errors = self._fill(batch)
        except Exception as e:   # noqa: BLE001  never leave a waiting step without an answer
            errors = {id(g): f"the grammar's mask failed: {type(e).__name__}: {e}"
                      for g, _, _ in batch}
        for grammar, _, future in batch:
            if id(grammar) in errors:
                future.set_exception(ValueError(errors[id(grammar)]))
            else:
                future.set_result(time.perf_counter() - start)

    def _fill(self, batch: list) -> dict[int, str]:
        """Advance each matcher by its tokens, then fill all their masks in one call; the errors
        by id(grammar)."""
        import llguidance
        import llguidance.torch
        if self._executor is None:
            self._executor = llguidance.LLExecutor(self.num_threads)
        errors: dict[int, str] = {}
        for grammar, tokens, _ in batch:                 # in order: a matcher may appear twice
            m = grammar.matcher
            if id(grammar) not in errors and not m.consume_tokens(tokens):
                errors[id(grammar)] = (f"the grammar refused token {', '.join(map(str, tokens))}: "
                                       f"{_one_line(m.get_error())}")
        todo = list({id(g): g for g, _, _ in batch if id(g) not in errors}.values())
        if todo:            # a stopped matcher (the constraint is complete) gets an EOS-only mask
            masks = llguidance.torch.allocate_token_bitmask(len(todo), self.vocab_size)
            fill = self.fill or llguidance.torch.fill_next_token_bitmask_par
            fill(self._executor, [(g.matcher, i) for i, g in enumerate(todo)], masks)
            for i, g in enumerate(todo):
                g.bitmask.copy_(masks[i:i + 1])
                if g.matcher.is_error():
                    errors[id(g)] = f"the grammar failed: {_one_line(g.matcher.get_error())}"
            self.batches += 1
            self.filled += len(todo)
        return errors


def _one_line(error: str) -> str:
    """llguidance's error without its state dump (it goes to no client)."""
    error = error.replace("\n<non-verbose/>", "").strip()
    return error.splitlines()[0][:300] if error else "unknown error"
