"""Online benchmark client: streaming requests to an OpenAI-compatible server (ours, vLLM, SGLang).

Measured on the client, as vLLM's bench client (`vllm bench serve`) does:
  * a request's clock starts just before it is sent; TTFT = arrival of the first SSE chunk with a token;
  * ITL = the gaps between consecutive such chunks; E2EL = the last such chunk - start. A chunk with choices
    carries a token, even when its text is empty (a token whose bytes do not yet make a character), except a
    final chunk with finish_reason and no text (llama-server's, with the usage): it is no token and adds no time;
  * output tokens come from the server's `usage` (stream_options.include_usage), not from chunk counts,
    and TPOT = (E2EL - TTFT) / (output tokens - 1).
When a server puts several tokens in one chunk, that chunk is one ITL gap (vLLM does the same), so ITL
then has fewer entries than tokens and its mean is larger than TPOT; TPOT stays per token. Our server sends
one chunk per token. Arrivals: at most max_concurrency requests in flight, and (request_rate < inf) start
times drawn from a Poisson process, as vLLM (exponential gaps, seeded).

A request counts as failed, never as a completed one with zero tokens: an HTTP status other than 200, an
error event inside the stream (llama-server sends `data: {"error": ...}` in an HTTP 200 stream), a stream
that ends without `data: [DONE]`, or no generated token. Prompts may be text or token ids (`/v1/completions`
takes a list of ids, so a random prompt arrives at exactly the requested length; chat needs text).
A server started with an API key (`--api-key`) gets it as `Authorization: Bearer KEY`
(``api_key=``).
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

from minimal_engine.engine.metrics import summarize


@dataclass
class ClientMetrics:
    """One request seen from the client; the same attribute names as sequence.RequestMetrics."""

    arrival_time: float
    token_times: list[float] = field(default_factory=list)    # one per chunk that carried choices
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0                                  # from usage
    text: str = ""
    error: str | None = None

    @property
    def ttft(self):
        return self.token_times[0] - self.arrival_time if self.token_times else None

    @property
    def e2e_latency(self):
        return self.token_times[-1] - self.arrival_time if self.token_times else None

    @property
    def tpot(self):
        n = self.num_output_tokens
        return None if n < 2 or not self.token_times else (self.e2e_latency - self.ttft) / (n - 1)

    @property
    def itl(self):
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:])]


def request_body(endpoint: str, model: str, prompt: str | list[int], max_tokens: int) -> dict:
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    if endpoint.endswith("chat/completions"):
        if not isinstance(prompt, str):
            raise ValueError("chat requests take text: decode token-id prompts first (workload.prompt_inputs)")
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def auth_headers(api_key: str | None) -> dict:
    """The header a server started with --api-key wants (none without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def carries_token(chunk: dict) -> bool:
    """Whether a streamed chunk stands for a generated token (see the module docstring)."""
    choices = chunk.get("choices")
    if not choices:
        return False
    return bool(chunk_text(chunk)) or choices[0].get("finish_reason") is None


def chunk_text(chunk: dict) -> str:
    """The generated text a streamed chunk carries ('' for a role-only, finish-only or usage-only chunk)."""
    c = (chunk.get("choices") or [{}])[0]
    delta = c.get("delta") or {}
    calls = "".join((t.get("function") or {}).get("arguments") or "" for t in delta.get("tool_calls") or [])
    return (c.get("text") or delta.get("content") or "") + calls


async def send_one(client, url: str, body: dict, prompt_len: int = 0, on_chunk=None) -> ClientMetrics:
    """Stream one request. ``on_chunk(metrics)`` (optional) is called after each chunk with a token
    (the course's labs use it for progress and for arrivals that wait for tokens)."""
    m = ClientMetrics(time.perf_counter(), num_prompt_tokens=prompt_len)
    done = usage_seen = False
    try:
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                m.error = f"HTTP {resp.status_code}: {(await resp.aread()).decode(errors='replace')[:300]}"
                return m
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if chunk.get("error"):                 # an error event inside an HTTP 200 stream
                    err = chunk["error"]
                    m.error = "server error in the stream: " + str(err.get("message", err) if isinstance(err, dict)
                                                                   else err)[:300]
                    return m
                if carries_token(chunk):
                    m.token_times.append(time.perf_counter())
                    m.text += chunk_text(chunk)
                    if on_chunk is not None:
                        on_chunk(m)
                if chunk.get("usage"):
                    usage_seen = True
                    m.num_output_tokens = chunk["usage"].get("completion_tokens", 0)
                    m.num_prompt_tokens = chunk["usage"].get("prompt_tokens", prompt_len)
    except Exception as e:      # a failed request is counted, not fatal to the run
        m.error = f"{type(e).__name__}: {e}"
    if m.error is None and not done:
        m.error = "the stream ended without data: [DONE]"
    if m.error is None and not m.token_times:
        m.error = "no tokens received"
    if m.error is None and usage_seen and m.num_output_tokens == 0:
        m.error = "the server reported 0 output tokens (usage.completion_tokens)"
    if not usage_seen:                          # a server without usage: one token per chunk with text
        m.num_output_tokens = len(m.token_times)
    return m


async def run_online_async(base_url: str, model: str, prompts: list[str], output_lens: list[int],
                           max_concurrency: int | None = None, request_rate: float = float("inf"),
                           endpoint: str = "/v1/completions", seed: int = 0, timeout_s: float = 600.0,
                           use_tqdm: bool = True, api_key: str | None = None) -> dict:
    import httpx
    url = base_url.rstrip("/") + endpoint
    rng = random.Random(seed)
    sem = asyncio.Semaphore(max_concurrency or len(prompts))
    bar = None
    if use_tqdm:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(prompts), desc=f"online C={max_concurrency}", unit="req")

    async def limited(client, prompt, n):
        async with sem:
            m = await send_one(client, url, request_body(endpoint, model, prompt, n))
        if bar:
            bar.update(1)
        return m

    limits = httpx.Limits(max_connections=(max_concurrency or len(prompts)) + 4)
    headers = auth_headers(api_key)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits, headers=headers) as client:
        start = time.perf_counter()
        tasks = []
        for p, n in zip(prompts, output_lens):
            tasks.append(asyncio.create_task(limited(client, p, n)))
            if request_rate != float("inf"):
                await asyncio.sleep(rng.expovariate(request_rate))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
    if bar:
        bar.close()
    ok = [m for m in results if m.error is None]
    res = {"backend": "openai", "base_url": base_url, "endpoint": endpoint, "model": model,
           "max_concurrency": max_concurrency or len(prompts), "request_rate": request_rate,
           "num_prompts": len(prompts), "failed": len(results) - len(ok),
           "errors": [m.error for m in results if m.error][:5]}
    res.update(summarize(ok, duration))
    res["output_lens"] = [m.num_output_tokens for m in results]
    res["generated_texts"] = [m.text for m in results]
    return res


def run_online(*args, **kwargs) -> dict:
    """Synchronous wrapper of run_online_async (for scripts, labs and tests)."""
    return asyncio.run(run_online_async(*args, **kwargs))
