"""What the server refuses before it does any work, and how long it waits for a client.

    ServeLimits      the knobs (body size, timeouts, allowed Host names, prompt length,
                     interactive docs, the API key: auth.py)
    HostCheck        ASGI middleware: a Host header that is not ours -> 400 JSON (DNS rebinding protection)
    read_body()      the request body, refused above max_body_bytes (413) or after body_timeout_s (408)
    check_json()     POST bodies must say Content-Type: application/json (415), so a web page cannot send one
                     cross-origin without the browser asking first (a CORS preflight, which we never answer)
    header_timeout_protocol()  uvicorn's h11 protocol, closing connections that send no complete request
                     headers within header_timeout_s (silent or slow clients would otherwise stay forever)

Why Host matters on a learner's laptop: a web page on evil.example can make its own name resolve to
127.0.0.1 (DNS rebinding); the browser then sends `Host: evil.example:8000` to our loopback server and lets
the page read the answer. Refusing Host names that are not the bound address stops that.
A server bound to 0.0.0.0 is reached at the machine's LAN address (http://192.168.1.20:8000):
a Host naming the address the connection arrived at is allowed too, since a rebinding page
can only send its own name.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from fastapi.responses import JSONResponse

from minimal_engine.serve.errors import RequestError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


@dataclass
class ServeLimits:
    max_body_bytes: int = 4 << 20          # 4 MiB: a full 40k-token prompt as JSON fits many times over
    max_prompt_chars: int | None = None    # None: max_model_len x the longest vocabulary entry (cannot fit above)
    body_timeout_s: float = 30.0           # the whole body must arrive within this
    header_timeout_s: float = 10.0         # the request line and headers must arrive within this
    allowed_hosts: tuple[str, ...] = LOOPBACK_NAMES   # "*" allows any Host (a public server behind a proxy)
    docs: bool = False                     # FastAPI's /docs, /redoc, /openapi.json (off: nothing extra exposed)
    shutdown_timeout_s: float = 10.0       # SIGTERM: drain this long, then cancel what is left and exit
    write_timeout_s: float = 30.0          # a streaming client must take each chunk within this, or is dropped
    api_key: str | None = field(default=None, repr=False)   # needed on all but /health, /metrics


def error_response(e: RequestError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


def host_name(host: str) -> str:
    """'127.0.0.1:8000' -> '127.0.0.1', '[::1]:8000' -> '::1', 'Example.COM' -> 'example.com'."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def local_address(scope) -> str | None:
    """The address of this machine that the connection reached (uvicorn's scope["server"]); an
    IPv4 client of a dual-stack '::' socket arrives as '::ffff:a.b.c.d', named here a.b.c.d."""
    server = scope.get("server")
    if not server or not isinstance(server[0], str):
        return None
    return server[0].lower().removeprefix("::ffff:")


class HostCheck:
    """Pure ASGI middleware (no buffering, streaming and disconnects pass through untouched)."""

    def __init__(self, app, allowed_hosts):
        self.app, self.allowed = app, {h.lower() for h in allowed_hosts}

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and "*" not in self.allowed:
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if host_name(host) not in self.allowed and host_name(host) != local_address(scope):
                names = ", ".join(sorted(self.allowed))
                e = RequestError(f"Host {host[:100]!r} is not served here (allowed: {names} and "
                                 "the address the connection reached; see --allowed-host)", None,
                                 "invalid_host")
                await error_response(e)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def check_json(request) -> None:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise RequestError(f"Content-Type must be application/json, got {kind or 'none'!r}", None,
                           "unsupported_media_type", 415)


async def read_body(request, limits: ServeLimits) -> bytes:
    """Read the body in chunks; stop as soon as it is too large or too slow (nothing large is buffered)."""
    too_big = RequestError(f"the request body is larger than {limits.max_body_bytes} bytes (--max-body-bytes)",
                           None, "request_too_large", 413)
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limits.max_body_bytes):
        raise too_big
    chunks, size = [], 0

    async def read():
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise too_big
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), limits.body_timeout_s)
    except asyncio.TimeoutError:
        raise RequestError(f"the request body did not arrive within {limits.body_timeout_s:g} s", None,
                           "request_timeout", 408) from None
    return b"".join(chunks)


async def wait_for_disconnect(receive) -> None:
    """Return when the client has gone (as vLLM's with_cancellation watches for it); call after the body is read."""
    while (await receive())["type"] != "http.disconnect":
        pass


def header_timeout_protocol(timeout_s: float):
    """uvicorn's h11 protocol class with a deadline for each request's headers (pass as uvicorn's `http`)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutH11Protocol(H11Protocol):
        _deadline = None

        def _idle(self) -> bool:                # no request in progress: waiting for headers
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            if self._deadline is None:
                self._deadline = self.loop.call_later(timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if self._idle() and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._idle():
                self._arm()                     # the next request's headers start: the clock runs
            super().data_received(data)
            if not self._idle():
                self._disarm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutH11Protocol


# prompt logprob entries (a prompt token's logprob or one of its top alternatives) one request may
# ask for: echo + logprobs=20 on 64 prompts of 500 tokens is 672,000 entries, a 15.9 MB answer that
# the engine scores in one step and the event loop renders, stalling every other stream (attack
# round 3, M6). 2**16 entries is about 1.5 MB of JSON, and 3,120 prompt tokens at top-20;
# lm-evaluation-harness asks 2 per token (logprobs=1), so a 512-token document needs 1,024.
MAX_PROMPT_LOGPROB_ENTRIES = 1 << 16


def check_prompt_logprobs(req, prompt_lengths: list[int]) -> None:
    """req: a ParsedRequest. A 400 when its prompt logprobs (prompt_logprobs, or echo's logprobs)
    would be more than MAX_PROMPT_LOGPROB_ENTRIES entries over its prompts and n choices."""
    k = req.params.prompt_logprobs
    if k is None:
        return
    entries = sum(prompt_lengths) * (k + 1) * req.params.n
    if entries > MAX_PROMPT_LOGPROB_ENTRIES:
        field = "prompt_logprobs" if req.show_prompt_logprobs else "echo"
        raise RequestError(
            f"{field}: {sum(prompt_lengths)} prompt tokens x {k + 1} logprobs each (the token and "
            f"the top {k}) x n={req.params.n} = {entries} entries; at most "
            f"{MAX_PROMPT_LOGPROB_ENTRIES} per request: send fewer or shorter prompts per request "
            "or ask for fewer logprobs", field)
