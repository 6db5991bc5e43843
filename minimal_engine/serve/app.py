"""An OpenAI-compatible HTTP server over one shared engine loop (FastAPI + uvicorn).

    python -m minimal_engine.serve --model PATH|synthetic:NAME --host 127.0.0.1 --port 8000 [--max-queue 64]
        [--max-body-bytes N] [--max-prompt-chars N] [--header-timeout S] [--body-timeout S]
        [--allowed-host NAME ...] [--docs]

Endpoints: POST /v1/completions, POST /v1/chat/completions (both with `stream: true` as server-sent events,
`stream_options.include_usage`, and `usage`; batched prompts and `n` as choices; `stop`, `logprobs`, penalties),
GET /v1/models, GET /health (also free/total KV blocks), GET /metrics (Prometheus, vLLM's names:
metrics_prometheus.py), POST /tokenize and /detokenize (as vLLM's).
How a request flows: checks that cost nothing first (Host header, Content-Type: application/json, body
size and arrival time: serve_limits.py), then, in a worker thread so the event loop stays free, JSON
parsing, every field's check, tokenizing and the engine's limits (bad input -> 400); admission control
(more than max_num_seqs + max_queue unfinished requests -> 429), then EngineLoop.submit(); the engine
thread (engine_loop.py) steps all requests together and pushes each new token to the request's asyncio
queue, which the handler turns into SSE chunks or one JSON answer. A client that disconnects, streaming or
not, has its request aborted and its KV blocks freed. Every error is OpenAI-style JSON
({"error": {message, type, param, code}}): 4xx for the client's mistakes, 500 "server_error" for ours. Chat: the tokenizer's chat template (the course's default
model: 質問：/回答：, no English role words), or for a model without one the fallback "<role>: <content>\\n ...
assistant: " (openai_protocol.py).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from starlette.requests import ClientDisconnect
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from dataclasses import replace

from minimal_engine.serve.engine_loop import EngineLoop
from minimal_engine.serve.prometheus import ServerMetrics
from minimal_engine.serve.protocol import (RequestError, chat_logprobs, chat_prompt, chunk, completion_logprobs, full_response,
                              detokenize_request, parse_request, server_error, tokenize_request, usage,
                              usage_chunk)
from minimal_engine.serve.limits import (LOOPBACK_NAMES, HostCheck, ServeLimits, check_json, error_response,
                           header_timeout_protocol, read_body, wait_for_disconnect)

log = logging.getLogger("minimal_engine.serve.app")


class ClosingStream(StreamingResponse):
    """A streaming response that calls on_close when it ends: finished, failed or client gone."""

    def __init__(self, gen, on_close):
        super().__init__(gen, media_type="text/event-stream")
        self.on_close = on_close

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


def engine_error(item) -> RequestError:
    """("error", (message, status)) from the engine loop -> 400 (the request was refused) or 5xx (our failure)."""
    message, status = item
    return RequestError(message) if status == 400 else server_error(message, status)


def _no_constants(name):
    raise ValueError(f"{name} is not a JSON number")


def _param_of(message: str, chat: bool) -> str:
    """Which field an engine validation message is about."""
    if message.startswith("stop_token_ids"):
        return "stop_token_ids"
    if "KV pool" in message:
        return "max_tokens"
    return "messages" if chat else "prompt"


def build_app(llm, max_queue: int = 64, served_model_name: str | None = None, limits: ServeLimits | None = None):
    """The FastAPI app; app.state.engine_loop is the EngineLoop (started and stopped with the app)."""
    limits = limits or ServeLimits()
    loop = EngineLoop(llm)
    names = {served_model_name or llm.model_name, llm.model_name}
    model_name = served_model_name or llm.model_name
    limit = llm.config.max_num_seqs + max_queue
    max_len = llm.config.max_model_len
    max_chars = limits.max_prompt_chars or max_len * llm.tokenizer.max_token_chars
    state = {"unfinished": 0}                  # requests accepted and not yet finished (event-loop side only)
    pool = ThreadPoolExecutor(2, thread_name_prefix="prepare")   # JSON + tokenizing, off the event loop

    @asynccontextmanager
    async def lifespan(app):
        loop.start()
        yield
        loop.stop()
        pool.shutdown(wait=False, cancel_futures=True)

    docs = {} if limits.docs else dict(docs_url=None, redoc_url=None, openapi_url=None)
    app = FastAPI(title="minimal_engine", lifespan=lifespan, **docs)
    app.add_middleware(HostCheck, allowed_hosts=limits.allowed_hosts)
    app.state.engine_loop, app.state.limits = loop, limits
    app.state.metrics = metrics = ServerMetrics(model_name)      # its own registry: several apps may coexist

    @app.exception_handler(HTTPException)
    async def http_error(request, exc):
        return error_response(RequestError(str(exc.detail), code=str(exc.status_code), status=exc.status_code))

    @app.exception_handler(Exception)
    async def internal_error(request, exc):
        log.exception("internal error")
        return error_response(server_error(f"internal server error ({type(exc).__name__})"))

    @app.get("/health")
    async def health():
        return {"status": "ok", "unfinished_requests": state["unfinished"], **loop.stats}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "minimal_engine", "max_model_len": max_len}]}

    @app.get("/metrics")
    async def prometheus_metrics():
        return Response(metrics.render(loop.stats), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def tokens_route(request: Request, work):
        """/tokenize and /detokenize (vLLM's): the same checks as the completions, work in the worker pool."""
        try:
            check_json(request)
            raw = await read_body(request, limits)
            return JSONResponse(await asyncio.get_running_loop().run_in_executor(
                pool, lambda: work(json.loads(raw, parse_constant=_no_constants))))
        except ValueError as e:                 # a RequestError, or invalid JSON
            return error_response(e if isinstance(e, RequestError) else
                                  RequestError(f"the request body is not valid JSON: {str(e)[:200]}", code="invalid_json"))
        except RecursionError:
            return error_response(RequestError("the request body is nested too deeply", code="invalid_json"))
        except ClientDisconnect:
            return Response(status_code=499)

    @app.post("/tokenize")
    async def tokenize(request: Request):
        return await tokens_route(request, lambda b: tokenize_request(b, llm.tokenizer, llm.engine, max_len, max_chars))

    @app.post("/detokenize")
    async def detokenize(request: Request):
        return await tokens_route(request, lambda b: detokenize_request(b, llm.tokenizer, llm.model_config.vocab_size))

    def full(extra: int = 1):
        if state["unfinished"] + extra - 1 >= limit:
            raise RequestError(f"the server is full ({state['unfinished']} requests unfinished, limit "
                               f"{limit} = max_num_seqs + max_queue); retry later", None, "queue_full",
                               429, "rate_limit_error")

    def prepare(raw: bytes, chat: bool):
        """In a worker thread: parse, check every field, tokenize, check against the engine's limits."""
        try:
            body = json.loads(raw, parse_constant=_no_constants)
        except RecursionError:
            raise RequestError("the request body is nested too deeply", code="invalid_json") from None
        except ValueError as e:                 # also UnicodeDecodeError and over-long integers
            raise RequestError(f"the request body is not valid JSON: {str(e)[:200]}", code="invalid_json") from None
        prompt, params, stream, include_usage = parse_request(body, chat, max_len, max_chars)
        if body.get("model") is not None and body["model"] not in names:
            raise RequestError(f"model {body['model'][:100]!r} is not served here; this server serves "
                               f"{model_name!r} (see /v1/models)", "model", "model_not_found")
        try:
            prompts = [chat_prompt(llm.tokenizer, prompt)] if chat else [llm.engine.tokenize(p)[1] for p in prompt]
            for i, ids in enumerate(prompts):
                try:
                    llm.engine.validate_request(ids, params)   # reads only fixed limits: safe off the loop thread
                except (ValueError, TypeError) as e:
                    raise type(e)(f"prompt {i}: {e}" if len(prompts) > 1 else str(e)) from None
        except (ValueError, TypeError) as e:
            if isinstance(e, RequestError):
                raise
            raise RequestError(str(e), _param_of(str(e).split(": ", 1)[-1], chat)) from None
        one = replace(params, n=1)             # n completions: n requests, seeds seed, seed+1, ... (as LLM.generate)
        jobs = [(ids, one if params.n == 1 else replace(one, seed=None if params.seed is None else params.seed + j))
                for ids in prompts for j in range(params.n)]
        return jobs, sum(map(len, prompts)), params, stream, include_usage

    async def handle(request: Request, chat: bool):
        try:
            check_json(request)
            full()                              # refuse cheaply, before reading or tokenizing anything
            raw = await read_body(request, limits)
            jobs, num_prompt_tokens, params, stream, include_usage = await asyncio.get_running_loop().run_in_executor(
                pool, prepare, raw, chat)
            full(len(jobs))
        except RequestError as e:
            return error_response(e)
        except ClientDisconnect:                # left while sending the body: nobody reads an answer
            return Response(status_code=499)
        state["unfinished"] += len(jobs)
        subs = [loop.submit(ids, p) for ids, p in jobs]       # one engine request per choice
        rid = subs[0][0]
        prefix = "chatcmpl-" if chat else "cmpl-"
        finished: set[int] = set()
        merged: asyncio.Queue = asyncio.Queue()   # (choice index, item) from every choice's queue

        async def forward(i: int, q: asyncio.Queue):
            while True:
                kind, out = await q.get()
                if kind == "output" and out.finished:
                    finished.add(i)
                    metrics.observe_finished(out)
                await merged.put((i, (kind, out)))
                if kind == "error" or out.finished:
                    return

        tasks = [asyncio.ensure_future(forward(i, q)) for i, (_, q) in enumerate(subs)]

        def close():                            # runs once, whatever way the response ends
            for t in tasks:
                t.cancel()
            for i, (r, _) in enumerate(subs):
                if i not in finished:
                    loop.abort(r)
            state["unfinished"] -= len(jobs)

        def logprobs_of(entries, offset=0):
            if params.logprobs is None:
                return None
            return chat_logprobs(entries, params.logprobs) if chat else completion_logprobs(entries, offset)

        if not stream:
            async def result():
                outs = {}
                while len(outs) < len(jobs):
                    i, (kind, out) = await merged.get()
                    if kind == "error":
                        return error_response(engine_error(out))
                    if out.finished:
                        outs[i] = out
                u = usage(num_prompt_tokens, sum(len(o.token_ids) for o in outs.values()),
                          sum(outs[i].num_cached_tokens for i in range(0, len(jobs), params.n)))  # once per prompt
                choices = [(o.text, o.finish_reason, logprobs_of(o.logprobs or []), o.stop_reason, o.prompt_logprobs)
                           for o in (outs[i] for i in range(len(jobs)))]
                return JSONResponse(full_response(prefix + rid, model_name, chat, choices, u))

            work = asyncio.ensure_future(result())
            gone = asyncio.ensure_future(wait_for_disconnect(request.receive))
            try:                                # a client that leaves before the answer: abort its request
                await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
                return work.result() if work.done() else Response(status_code=499)
            finally:
                work.cancel()
                gone.cancel()
                close()

        async def events():
            first = set()                       # chat: the role goes with each choice's first token
            sent = [0] * len(jobs)              # characters sent per choice (completions' text_offset)
            tokens = [0] * len(jobs)            # tokens whose logprobs were sent, per choice
            done, generated, cached = 0, 0, 0
            while done < len(jobs):
                i, (kind, out) = await merged.get()
                if kind == "error":
                    yield _sse(engine_error(out).body())
                    break
                entries = (out.logprobs or [])[tokens[i]:]
                tokens[i] += len(entries)
                yield _sse(chunk(prefix + rid, model_name, chat, out.new_text,
                                 out.finish_reason if out.finished else None, role=i not in first, index=i,
                                 logprobs=logprobs_of(entries, sent[i]),
                                 stop_reason=out.stop_reason if out.finished else None))
                first.add(i)
                sent[i] += len(out.new_text)
                if out.finished:
                    done += 1
                    generated += len(out.token_ids)
                    cached += out.num_cached_tokens if i % params.n == 0 else 0   # once per prompt
            else:
                if include_usage:
                    yield _sse(usage_chunk(prefix + rid, model_name, chat, usage(num_prompt_tokens, generated, cached)))
            yield "data: [DONE]\n\n"

        return ClosingStream(events(), close)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await handle(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await handle(request, chat=True)

    return app


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class ServerThread:
    """uvicorn in a background thread on a loopback port (port 0: a free one); for tests, labs, notebooks.

        with ServerThread(build_app(llm)) as server:   # server.url == "http://127.0.0.1:PORT"
            ...
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 30.0):
        import uvicorn
        limits = getattr(app.state, "limits", ServeLimits())
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                                    http=header_timeout_protocol(limits.header_timeout_s)))
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m minimal_engine.serve", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="model folder, hub id or synthetic:NAME (default: the course model)")
    parser.add_argument("--served-model-name", default=None, help="the name clients send as 'model'")
    parser.add_argument("--host", default="127.0.0.1", help="loopback by default; other addresses expose the server")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--max-num-seqs", type=int, default=64, help="requests in one engine step")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--enable-prefix-caching", action="store_true", help="reuse KV blocks of shared prompt prefixes")
    parser.add_argument("--max-queue", type=int, default=64, help="waiting requests beyond max-num-seqs; more get 429")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    d = ServeLimits()
    parser.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, help="larger bodies get 413")
    parser.add_argument("--max-prompt-chars", type=int, default=None,
                        help="longer prompts get 400 before tokenizing (default: what can fit in max_model_len)")
    parser.add_argument("--header-timeout", type=float, default=d.header_timeout_s, help="seconds for request headers")
    parser.add_argument("--body-timeout", type=float, default=d.body_timeout_s, help="seconds for the request body")
    parser.add_argument("--allowed-host", action="append", default=[],
                        help="a Host name clients may use besides the loopback names and --host ('*': any)")
    parser.add_argument("--docs", action="store_true", help="serve FastAPI's interactive /docs (off by default)")
    # the chapters' engine features, named as in vLLM (chapters 6, 7 and 8)
    parser.add_argument("--quantization", default=None, choices=["int8"], help="weight-only INT8 (quantization.py)")
    parser.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8", "int8"], help="KV pool format")
    parser.add_argument("--tensor-parallel-size", type=int, default=1, help="worker processes sharing the model")
    parser.add_argument("--speculative-config", type=json.loads, default=None,
                        help='JSON, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\'')
    return parser


def make_llm(args: argparse.Namespace):
    from minimal_engine.llm import LLM
    return LLM(args.model, dtype=args.dtype, device=args.device, max_num_seqs=args.max_num_seqs,
               max_model_len=args.max_model_len, enable_prefix_caching=args.enable_prefix_caching,
               quantization=args.quantization, kv_cache_dtype=args.kv_cache_dtype,
               tensor_parallel_size=args.tensor_parallel_size, speculative_config=args.speculative_config)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import torch
    import uvicorn

    if args.threads:
        torch.set_num_threads(args.threads)
    llm = make_llm(args)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: listening on {args.host}: anyone who can reach this address can use the server; "
              "clients must send a Host header named by --host or --allowed-host")
    name = args.served_model_name or llm.model_name
    print(f"serving {name!r} on http://{args.host}:{args.port} ({llm.device}, {llm.dtype})")
    limits = ServeLimits(args.max_body_bytes, args.max_prompt_chars, args.body_timeout, args.header_timeout,
                         (*LOOPBACK_NAMES, args.host, *args.allowed_host), args.docs)
    uvicorn.run(build_app(llm, args.max_queue, args.served_model_name, limits), host=args.host, port=args.port,
                log_level="warning", http=header_timeout_protocol(limits.header_timeout_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
