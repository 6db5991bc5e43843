"""The server's grammar compiles: on a thread of their own, cancelled when the client leaves.

    await compiles.compile(request, params.structured_outputs)   # LLMEngine.check then finds it

A request with a constraint (guided_json, response_format, tools, ...) has it compiled here, after
its fields are parsed and before it is tokenized and checked (completions.py). The compile runs on
its own thread, never in the pool that tokenizes every request and serves /tokenize, so a heavy
constraint delays only the requests with constraints. GrammarBackend (features/structured_output.py)
compiles each constraint in a child process first, within a time budget, and caches it; a client
that leaves while its constraint compiles has the compile stopped (the child is killed) and gets no
answer (499)."""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from starlette.requests import ClientDisconnect

from minimal_engine.features.structured_compile import CompileCancelled
from minimal_engine.serve.errors import RequestError
from minimal_engine.serve.limits import wait_for_disconnect


class GrammarCompiles:
    """Compiles constraints for the server on one thread of their own."""

    def __init__(self, backend):
        """backend: the engine's GrammarBackend (compile(constraint, cancel))."""
        self.backend = backend
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="grammar-compile")

    async def compile(self, request, constraint) -> None:
        """Compile `constraint` (None: nothing to do). A constraint that cannot be used: a 400
        naming why; the client left meanwhile: ClientDisconnect (the compile is stopped)."""
        if constraint is None:
            return
        cancel = threading.Event()
        work = asyncio.get_running_loop().run_in_executor(self.pool, self.backend.compile,
                                                          constraint, cancel)
        gone = asyncio.ensure_future(wait_for_disconnect(request.receive))
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not work.done():
            cancel.set()            # the child is killed if it is compiling this one
            work.cancel()           # and a compile still queued never starts
            raise ClientDisconnect
        try:
            work.result()
        except CompileCancelled:
            raise ClientDisconnect from None
        except ValueError as e:
            raise RequestError(str(e), "structured_outputs") from None

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
