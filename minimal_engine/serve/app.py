"""An OpenAI-compatible HTTP server over one shared engine loop (FastAPI + uvicorn): the app and its routes.

    python -m minimal_engine.serve --model PATH|synthetic:NAME --port 8000    # the command line: cli.py
    with ServerThread(build_app(llm)) as server: ...                          # in a test or a notebook

Endpoints: POST /v1/completions, POST /v1/chat/completions (both with `stream: true` as server-sent events,
`stream_options.include_usage`, and `usage`; batched prompts and `n` as choices; `stop`, `logprobs`, penalties),
GET /v1/models, GET /health (also free/total KV blocks), GET /metrics (Prometheus, vLLM's names:
prometheus.py), POST /tokenize and /detokenize (as vLLM's), GET /version (as vLLM's). Any other
path: a JSON 404 that lists these.
How a request flows: checks that cost nothing first (Host header, Content-Type: application/json, body
size and arrival time: limits.py), then, in a worker thread so the event loop stays free, JSON
parsing, every field's check, tokenizing and the engine's limits (bad input -> 400); admission control
(more than max_num_seqs + max_queue unfinished requests -> 429), then EngineLoop.submit() (completions.py); the engine
thread (engine_loop.py) steps all requests together and pushes each new token to the request's asyncio
queue, which the handler turns into SSE chunks or one JSON answer. A client that disconnects, streaming or
not, has its request aborted and its KV blocks freed. Every error is OpenAI-style JSON
({"error": {message, type, param, code}}): 4xx for the client's mistakes, 500 "server_error" for ours. Chat: the tokenizer's chat template (the course's default
model: 質問：/回答：, no English role words), or for a model without one the fallback "<role>: <content>\\n ...
assistant: " (protocol.py).
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from minimal_engine.serve.auth import ApiKeyCheck
from minimal_engine.serve.completions import Completions, no_constants
from minimal_engine.serve.engine_loop import EngineLoop
from minimal_engine.serve.limits import HostCheck, ServeLimits, check_json, error_response, header_timeout_protocol, read_body
from minimal_engine.serve.prometheus import ServerMetrics
from minimal_engine.serve.errors import RequestError, server_error
from minimal_engine.serve.tokens import detokenize_request, tokenize_request, tokenizer_info

log = logging.getLogger("minimal_engine.serve.app")


def package_version() -> str:
    """minimal-engine's version (pyproject.toml) as installed; "unknown" when not installed."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("minimal-engine")
    except PackageNotFoundError:
        return "unknown"


def build_app(llm, max_queue: int = 64, served_model_name: str | None = None, limits: ServeLimits | None = None):
    """The FastAPI app; app.state.engine_loop is the EngineLoop (started and stopped with the app)."""
    limits = limits or ServeLimits()
    cfg, engine = llm.config, llm.engine
    cache_info = {"block_size": cfg.block_size, "cache_dtype": cfg.kv_cache_dtype,
                  "enable_prefix_caching": cfg.enable_prefix_caching,
                  "num_gpu_blocks": engine.block_manager.num_blocks}     # vLLM's CacheConfig names
    metrics = ServerMetrics(served_model_name or llm.model_name, cfg.max_model_len,  # own registry
                            speculator=getattr(engine, "speculator", None), cache_info=cache_info)
    loop = EngineLoop(llm, on_step=metrics.observe_step)
    routes = Completions(llm, loop, metrics, limits, max_queue, served_model_name)
    model_name, max_len, max_chars, pool = routes.model_name, routes.max_len, routes.max_chars, routes.pool

    @asynccontextmanager
    async def lifespan(app):
        loop.start()
        yield
        loop.stop()
        pool.shutdown(wait=False, cancel_futures=True)
        routes.compiles.close()

    docs = {} if limits.docs else dict(docs_url=None, redoc_url=None, openapi_url=None)
    app = FastAPI(title="minimal_engine", lifespan=lifespan, **docs)
    if limits.api_key:                      # added first, so it runs after the Host check (auth.py)
        app.add_middleware(ApiKeyCheck, api_key=limits.api_key)
    app.add_middleware(HostCheck, allowed_hosts=limits.allowed_hosts)
    app.state.engine_loop, app.state.limits, app.state.metrics = loop, limits, metrics

    @app.exception_handler(HTTPException)
    async def http_error(request, exc):
        message = str(exc.detail)
        if exc.status_code == 404:          # say what is served (e.g. to a client of /v1/responses)
            served = ", ".join(f"{m} {r.path}" for r in app.routes if isinstance(r, APIRoute)
                               for m in sorted(r.methods - {"HEAD"}))
            message = (f"{request.method} {request.url.path[:100]} is not implemented by this "
                       f"server; it serves {served}")
        status = exc.status_code
        return error_response(RequestError(message, code=str(status), status=status))

    @app.exception_handler(Exception)
    async def internal_error(request, exc):
        log.exception("internal error")
        return error_response(server_error(f"internal server error ({type(exc).__name__})"))

    @app.get("/health")
    async def health():
        if loop.dead:                       # as vLLM: an engine that died makes /health fail, for the supervisor
            return JSONResponse({"status": "dead", "error": loop.dead}, status_code=503)
        return {"status": "ok", "unfinished_requests": routes.unfinished, **loop.stats}

    @app.get("/version")
    async def version():                    # as vLLM's /version: the server's package version
        return {"version": package_version()}

    card = {"id": model_name, "object": "model", "created": 0, "owned_by": "minimal_engine", "max_model_len": max_len}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        if model_id not in routes.names:
            return error_response(RequestError(f"model {model_id[:100]!r} is not served here; this server serves "
                                               f"{model_name!r}", "model", "model_not_found", 404))
        return card

    @app.get("/metrics")
    async def prometheus_metrics():
        return Response(metrics.render(loop.stats), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def tokens_route(request: Request, work):
        """/tokenize and /detokenize (vLLM's): the same checks as the completions, work in the worker pool."""
        try:
            check_json(request)
            raw = await read_body(request, limits)
            return JSONResponse(await asyncio.get_running_loop().run_in_executor(
                pool, lambda: work(json.loads(raw, parse_constant=no_constants))))
        except ValueError as e:                 # a RequestError, or invalid JSON
            return error_response(e if isinstance(e, RequestError) else
                                  RequestError(f"the request body is not valid JSON: {str(e)[:200]}", code="invalid_json"))
        except RecursionError:
            return error_response(RequestError("the request body is nested too deeply", code="invalid_json"))
        except ClientDisconnect:
            return Response(status_code=499)

    @app.get("/tokenizer_info")
    async def tokenizer_info_route():
        return tokenizer_info(llm.tokenizer)

    @app.post("/tokenize")
    async def tokenize(request: Request):
        return await tokens_route(request, lambda b: tokenize_request(b, llm.tokenizer, llm.engine, max_len, max_chars))

    @app.post("/detokenize")
    async def detokenize(request: Request):
        return await tokens_route(request, lambda b: detokenize_request(b, llm.tokenizer, llm.model_config.vocab_size))

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await routes.handle(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await routes.handle(request, chat=True)

    return app


class ServerThread:
    """uvicorn in a background thread on a loopback port (port 0: a free one); for tests, labs, notebooks.

        with ServerThread(build_app(llm)) as server:   # server.url == "http://127.0.0.1:PORT"
            ...
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 30.0):
        import uvicorn
        limits = getattr(app.state, "limits", ServeLimits())
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                                    http=header_timeout_protocol(limits.header_timeout_s),
                                                    timeout_graceful_shutdown=limits.shutdown_timeout_s))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {host}:{port}")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{host}:{port}"

    def stop(self, timeout_s: float = 15.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
