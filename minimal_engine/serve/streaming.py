"""Server-sent events for the completion routes: one event's text (sse), and the streaming response
that drops a client who stops reading (ClosingStream)."""
from __future__ import annotations

import asyncio
import json
import logging

from fastapi.responses import StreamingResponse

log = logging.getLogger("minimal_engine.serve.completions")


def sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class StalledClient(Exception):
    """A streaming client took no chunk within the write deadline (its socket is open, it does not
    read)."""


class ClosingStream(StreamingResponse):
    """A streaming response that calls on_close when it ends: finished, failed, client gone, or
    client stalled.

    Every chunk must be taken by the client within write_timeout_s: a client that keeps its socket
    open but never reads would otherwise hold its requests' slots for good (the engine finishes
    them, but the response never ends), and enough such clients answer everyone else 429. Past the
    deadline the response is dropped, its requests are aborted (their KV blocks freed) and uvicorn
    closes the connection."""

    def __init__(self, gen, on_close, write_timeout_s: float = 30.0):
        super().__init__(gen, media_type="text/event-stream")
        self.on_close, self.write_timeout_s = on_close, write_timeout_s

    async def __call__(self, scope, receive, send):
        async def send_in_time(message):
            try:
                await asyncio.wait_for(send(message), self.write_timeout_s)
            except asyncio.TimeoutError:
                raise StalledClient() from None

        try:
            await super().__call__(scope, receive, send_in_time)
        except StalledClient:
            log.warning("a streaming client took no data for %g s: its request is aborted",
                        self.write_timeout_s)
        finally:
            self.on_close()
