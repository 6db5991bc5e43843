"""The completion routes (/v1/completions, /v1/chat/completions): check a request off the event loop, queue one
engine request per choice, and answer with one JSON body or a stream of server-sent events.

    parse()    in a worker thread: JSON, every field (protocol.py)
    compile    a constraint, on the grammar thread (grammars.py), stopped if the client leaves
    prepare()  in a worker thread: the chat template, LLMEngine.check (the prompt tokenized and
               checked against the engine's limits once: the engine loop queues it as it is)
    handle()   admission control (429 past max_num_seqs + max_queue), EngineLoop.submit, then the answer; a client
               that leaves, streaming or not, has its requests aborted and their KV blocks freed.
The streaming response itself (server-sent events, a deadline for each chunk): streaming.py.
"""
from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from minimal_engine.serve.limits import (ServeLimits, check_json, check_prompt_logprobs,
                                         error_response, read_body, wait_for_disconnect)
from minimal_engine.engine.requests import child_seed
from minimal_engine.serve.errors import RequestError, refusal, server_error
from minimal_engine.serve.grammars import GrammarCompiles
from minimal_engine.serve.messages import chat_prompt
from minimal_engine.serve.streaming import ClosingStream, sse
from minimal_engine.serve.protocol import parse_request
from minimal_engine.serve.token_text import Offsets, TokenText
from minimal_engine.serve.tools import tool_message
from minimal_engine.serve.responses import (chat_logprobs, chunk, completion_logprobs, full_response, usage,
                                            usage_chunk)


def engine_error(item) -> RequestError:
    """("error", (message, status)) from the engine loop -> 400 (the request was refused) or 5xx (our failure)."""
    message, status = item
    return RequestError(message) if status == 400 else server_error(message, status)


def no_constants(name):
    """json.loads' parse_constant: NaN and Infinity are not JSON numbers."""
    raise ValueError(f"{name} is not a JSON number")


class Completions:
    """The state the completion routes share: the LLM, its engine loop, the served names, the admission count."""

    def __init__(self, llm, loop, metrics, limits: ServeLimits, max_queue: int, served_model_name: str | None):
        self.llm, self.loop, self.metrics, self.limits = llm, loop, metrics, limits
        self.model_name = served_model_name or llm.model_name
        self.names = {self.model_name, llm.model_name}
        self.limit = llm.config.max_num_seqs + max_queue
        self.max_len = llm.config.max_model_len
        self.max_chars = limits.max_prompt_chars or self.max_len * llm.tokenizer.max_token_chars
        self.text = TokenText(llm.tokenizer)   # logprobs' token names, bytes and offsets
        self.unfinished = 0               # requests accepted and not yet finished (event-loop side only)
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="prepare")   # JSON + tokenizing, off the event loop
        self.compiles = GrammarCompiles(llm.engine.grammars)   # constraints: a thread of their own

    def full(self, extra: int = 1):
        if self.loop.dead:                  # fail fast and visibly; /health is 503 too, so a supervisor restarts us
            raise server_error(f"the engine is dead and this server must be restarted: {self.loop.dead}", 503)
        if self.unfinished + extra - 1 >= self.limit:
            raise RequestError(f"the server is full ({self.unfinished} requests unfinished, limit "
                               f"{self.limit} = max_num_seqs + max_queue); retry later", None, "queue_full",
                               429, "rate_limit_error")

    def room(self, num_prompt_tokens: int) -> int:
        """Tokens a request may generate after its prompt: to max_model_len, within the KV pool."""
        engine = self.llm.engine
        pool = engine.block_manager.num_blocks * engine.config.block_size + 1   # + the last token
        return min(self.max_len, pool) - num_prompt_tokens

    def check_room(self, req, prompt_lengths: list[int]) -> None:
        """A max_tokens the client gave must fit beside every prompt; else vLLM's 400, its words."""
        asked, field, most = req.max_tokens, req.max_tokens_field, self.max_len
        for n in prompt_lengths:
            if n + asked > most:
                raise RequestError("'max_tokens' or 'max_completion_tokens' is too large: "
                                   f"{asked}. This model's maximum context length is {most} "
                                   f"tokens and your request has {n} input tokens ({asked} > "
                                   f"{most} - {n})", field)

    def parse(self, raw: bytes, chat: bool):
        """In a worker thread: the JSON body and every field's check -> (body, parsed request)."""
        try:
            body = json.loads(raw, parse_constant=no_constants)
        except RecursionError:
            raise RequestError("the request body is nested too deeply", code="invalid_json") from None
        except ValueError as e:                 # also UnicodeDecodeError and over-long integers
            raise RequestError(f"the request body is not valid JSON: {str(e)[:200]}", code="invalid_json") from None
        return body, parse_request(body, chat, self.max_len, self.max_chars)

    def prepare(self, body: dict, req, chat: bool):
        """In a worker thread: tokenize, check against the engine's limits (a constraint is compiled
        by now: LLMEngine.check finds it in the GrammarBackend's cache)."""
        prompt, params = req.prompt, req.params
        if body.get("model") is not None and body["model"] not in self.names:
            raise RequestError(f"model {body['model'][:100]!r} is not served here; this server serves "
                               f"{self.model_name!r} (see /v1/models)", "model", "model_not_found", 404)
        engine = self.llm.engine
        try:
            prompts = [chat_prompt(self.llm.tokenizer, prompt)] if chat else prompt
            if chat and req.max_tokens is None:    # vLLM's chat default: the rest of the context
                params = replace(params, max_tokens=max(1, self.room(len(prompts[0]))))
                req = replace(req, params=params)
            checked = []
            for i, p in enumerate(prompts):
                try:
                    checked.append(engine.check(p, params))   # reads only fixed limits: safe off the loop thread
                except (ValueError, TypeError) as e:
                    raise type(e)(f"prompt {i}: {e}" if len(prompts) > 1 else str(e)) from None
        except (ValueError, TypeError) as e:
            if isinstance(e, RequestError):
                raise
            raise refusal(str(e), chat, params, req.show_prompt_logprobs) from None
        if req.max_tokens is not None:
            self.check_room(req, [len(c.token_ids) for c in checked])
        check_prompt_logprobs(req, [len(c.token_ids) for c in checked])
        if len(checked) * params.n > self.limit:     # never admissible: a 400, not "retry later"
            raise RequestError(f"{len(checked)} prompt(s) x n={params.n} = {len(checked) * params.n} sequences "
                               f"exceed what this server can hold at once ({self.limit} = max_num_seqs + "
                               "max_queue); send fewer prompts or a smaller n", "n" if params.n > 1 else "prompt")
        one = replace(params, n=1)             # n completions: n requests, seeds seed, seed+1, ... (as LLM.generate)
        jobs = [replace(c, params=one if params.n == 1 else replace(one, seed=child_seed(params.seed, j)))
                for c in checked for j in range(params.n)]
        tok = self.llm.tokenizer
        echoes = [c.text if c.text is not None else tok.decode(c.token_ids, skip_special_tokens=False)
                  for c in jobs] if req.echo else None
        return jobs, sum(len(c.token_ids) for c in checked), req, echoes

    async def handle(self, request: Request, chat: bool):
        arrival = time.perf_counter()           # TTFT counts from here (parsing, tokenizing), as vLLM's front end
        try:
            check_json(request)
            self.full()                              # refuse cheaply, before reading or tokenizing anything
            raw = await read_body(request, self.limits)
            run = asyncio.get_running_loop().run_in_executor
            body, req = await run(self.pool, self.parse, raw, chat)
            await self.compiles.compile(request, req.params.structured_outputs)   # grammars.py
            jobs, num_prompt_tokens, req, echoes = await run(self.pool, self.prepare, body, req, chat)
            params, stream = req.params, req.stream
            self.full(len(jobs))
        except RequestError as e:
            return error_response(e)
        except ClientDisconnect:                # left while sending the body: nobody reads an answer
            return Response(status_code=499)
        self.unfinished += len(jobs)
        subs = [self.loop.submit(job, arrival) for job in jobs]       # one engine request per choice
        rid = subs[0][0]
        prefix = "chatcmpl-" if chat else "cmpl-"
        finished: set[int] = set()
        failed: set[int] = set()                  # choices the engine answered with an error
        done: dict = {}                           # choice index -> its finished output (for /metrics)
        merged: asyncio.Queue = asyncio.Queue()   # (choice index, item) from every choice's queue

        async def forward(i: int, q: asyncio.Queue):
            while True:
                kind, out = await q.get()
                if kind == "output" and out.finished:
                    finished.add(i)
                    done[i] = out
                    self.metrics.observe_finished(out, params.max_tokens)
                    first = i - i % params.n        # the n choices of one prompt are one request to vLLM
                    group = [done.get(j) for j in range(first, first + params.n)]
                    if all(group):
                        self.metrics.observe_request(params.n, group)
                if kind == "error":
                    failed.add(i)
                    self.metrics.observe_aborted("error")
                await merged.put((i, (kind, out)))
                if kind == "error" or out.finished:
                    return

        tasks = [asyncio.ensure_future(forward(i, q)) for i, (_, q) in enumerate(subs)]

        def close():                            # runs once, whatever way the response ends
            for t in tasks:
                t.cancel()
            for i, (r, _) in enumerate(subs):
                if i not in finished:
                    self.loop.abort(r)
                    if i not in failed:         # its client left: vLLM's finished_reason "abort"
                        self.metrics.observe_aborted()
            self.unfinished -= len(jobs)

        as_id, text_of = req.tokens_as_ids, self.text
        offsets = [Offsets(text_of, len(echoes[i]) if echoes else 0, params.skip_special_tokens)
                   for i in range(len(jobs))]     # completions' text_offset, per choice

        def logprobs_of(entries, i):
            if params.logprobs is None:
                return None
            if chat:
                return chat_logprobs(entries, params.logprobs, text_of, as_id)
            return completion_logprobs(entries, text_of, offsets[i], as_id=as_id)

        def first_piece(i: int, out, entries: list) -> tuple[str, dict | None, list]:
            """A choice's text, logprobs and output entries, with echo's prompt in front (vLLM's echo)."""
            text = "" if req.no_output else out.new_text if stream else out.text
            entries = [] if req.no_output else entries
            if echoes is None:
                return text, logprobs_of(entries, i), entries
            lp = None
            if params.logprobs is not None:
                lp = completion_logprobs(out.prompt_logprobs or [], text_of,
                                         Offsets(text_of, 0, False), jobs[i].token_ids[0], as_id)
                rest = logprobs_of(entries, i)
                lp = {k: lp[k] + rest[k] for k in lp}
            return echoes[i] + text, lp, entries

        def finish_of(out):
            return "length" if req.no_output else out.finish_reason

        def prompt_lps(out):
            return out.prompt_logprobs if req.show_prompt_logprobs else None

        if not stream:
            async def result():
                outs = {}
                while len(outs) < len(jobs):
                    i, (kind, out) = await merged.get()
                    if kind == "error":
                        return error_response(engine_error(out))
                    if out.finished:
                        outs[i] = out
                generated = 0 if req.no_output else sum(len(o.token_ids) for o in outs.values())
                u = usage(num_prompt_tokens, generated,
                          sum(outs[i].num_cached_tokens for i in range(0, len(jobs), params.n)))  # once per prompt
                choices = []
                for i in range(len(jobs)):
                    o = outs[i]
                    text, lp, _ = first_piece(i, o, o.logprobs or [])
                    reason = finish_of(o)
                    if req.tool_call is not None:        # the constrained text becomes tool_calls (tools.py)
                        text, reason = tool_message(req.tool_call, text, reason)
                    choices.append((text, reason, lp, None if req.no_output else o.stop_reason, prompt_lps(o)))
                return JSONResponse(full_response(prefix + rid, self.model_name, chat, choices, u))

            work = asyncio.ensure_future(result())
            gone = asyncio.ensure_future(wait_for_disconnect(request.receive))
            try:                                # a client that leaves before the answer: abort its request
                await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
                return work.result() if work.done() else Response(status_code=499)
            except asyncio.CancelledError:  # uvicorn's shutdown deadline cancels us: our JSON 503,
                asyncio.current_task().uncancel()   # not its text/plain 500 (round 3, L14)
                return error_response(server_error("the server is shutting down", 503))
            finally:
                work.cancel()
                gone.cancel()
                close()

        async def events():
            first = set()                       # chat: the role goes with each choice's first token
            tokens = [0] * len(jobs)            # tokens whose logprobs were sent, per choice
            done, generated, cached = 0, 0, 0
            while done < len(jobs):
                i, (kind, out) = await merged.get()
                if kind == "error":
                    yield sse(engine_error(out).body())
                    break
                entries = (out.logprobs or [])[tokens[i]:]
                tokens[i] += len(entries)
                if i in first:
                    text, lp = out.new_text, logprobs_of(entries, i)
                else:                           # the first piece carries echo's prompt
                    text, lp, _ = first_piece(i, out, entries)
                yield sse(chunk(prefix + rid, self.model_name, chat, text,
                                finish_of(out) if out.finished else None, role=i not in first, index=i,
                                logprobs=lp, stop_reason=out.stop_reason if out.finished and not req.no_output
                                else None))
                first.add(i)
                if out.finished:
                    done += 1
                    generated += 0 if req.no_output else len(out.token_ids)
                    cached += out.num_cached_tokens if i % params.n == 0 else 0   # once per prompt
            else:
                if req.include_usage:
                    yield sse(usage_chunk(prefix + rid, self.model_name, chat, usage(num_prompt_tokens, generated, cached)))
            yield "data: [DONE]\n\n"

        return ClosingStream(events(), close, self.limits.write_timeout_s)
