"""Where a lab's requests go: the local engine (default) or any OpenAI-compatible server.

    b = local_backend("default", "cpu")                          # this laptop, in this kernel
    b = openai_backend("http://gpu-box:8000", "Qwen/Qwen3-8B")   # vLLM, SGLang, or `python -m minimal_engine.serve`
    res = run_plan(b, arrival_plan("all", 4, 64, 32), output_len=32)

Both return the same result (see ``build_result``): per request its arrival, first token and every token
time, and the run's medians, ITL p99 / max and throughputs, computed by ``minimal_engine.engine.metrics.summarize``
(vLLM's formulas). The local engine is stepped here, adding each request at its arrival time
(``engine.add_request(..., arrival_time=...)`` then ``engine.step()``), so the timeline shows the engine's
steps. A server is measured from the client with the project's online bench client
(``minimal_engine.bench.online.send_one``), as ``vllm bench serve`` does; prompts are random token ids of
the course model's tokenizer (or ``tokenizer=``) sent as text, and the server reports the real counts.
A shared server started with an API key (a workshop's) needs ``api_key=`` (default: the
environment variable MINIMAL_ENGINE_API_KEY, which the server reads too), sent as
``Authorization: Bearer``.

In a workshop, one line sends every lab panel made afterwards in this kernel to the instructor's
server (the panel's backend starts on 「OpenAI 互換サーバー」 with that URL and model)::

    labkit.use_class_server("http://192.168.1.20:8000", api_key="KEY")

It sets the environment variables COURSE_SERVER_URL, COURSE_SERVER_MODEL and MINIMAL_ENGINE_API_KEY,
which ``class_server()`` reads; setting them before ``make lab`` does the same for every notebook.
"""
from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass, field

from minimal_engine import SamplingParams
from minimal_engine.engine.metrics import summarize

from course.runtime import apply_thread_policy, check_device, check_model, get_llm, random_prompts


@dataclass(frozen=True)
class Backend:
    kind: str = "local"                 # "local" or "openai"
    model: str = "default"              # local: a model spec of course.runtime; openai: the served model name
    device: str = "cpu"                 # local only
    base_url: str | None = None         # openai only, e.g. "http://127.0.0.1:8000"
    tokenizer: str | None = None        # openai only: tokenizer folder for the random prompts
    endpoint: str = "/v1/completions"
    api_key: str | None = field(default=None, repr=False)    # openai only; never printed

    @property
    def label(self) -> str:
        return f"ローカル（{self.device}）" if self.kind == "local" else f"OpenAI 互換 {self.base_url}"


def local_backend(model: str = "default", device: str = "cpu") -> Backend:
    return Backend("local", check_model(model), check_device(device))


def openai_backend(base_url: str, model: str, tokenizer: str | None = None,
                   endpoint: str = "/v1/completions", api_key: str | None = None) -> Backend:
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(f"サーバーの URL（base_url）は http:// か https:// で始めてください（例: http://127.0.0.1:8000）。"
                         f" / base_url must start with http:// or https://, got {base_url!r}")
    if not isinstance(model, str) or not model.strip():
        raise ValueError("サーバーのモデル名（model）を入れてください（サーバーの /v1/models に出る名前）。"
                         " / model (the served model name) is required")
    key = api_key if api_key is not None else os.environ.get("MINIMAL_ENGINE_API_KEY") or None
    if key is not None and (not isinstance(key, str) or not key.strip()):
        raise ValueError("API キー（api_key）が空です。講師から配られたキーを文字列で"
                         "入れてください。 / api_key is empty: pass the server's key")
    return Backend("openai", model.strip(), "", base_url.rstrip("/"), tokenizer, endpoint,
                   key.strip() if key else None)


SERVER_URL_ENV, SERVER_MODEL_ENV = "COURSE_SERVER_URL", "COURSE_SERVER_MODEL"
API_KEY_ENV = "MINIMAL_ENGINE_API_KEY"


def class_server() -> Backend | None:
    """The workshop's server named by COURSE_SERVER_URL (model: COURSE_SERVER_MODEL, default
    minimal-ja), or None when the variable is not set."""
    url = os.environ.get(SERVER_URL_ENV, "").strip()
    if not url:
        return None
    try:
        return openai_backend(url, os.environ.get(SERVER_MODEL_ENV, "").strip() or "minimal-ja")
    except ValueError as e:
        raise ValueError(f"環境変数 {SERVER_URL_ENV} の値が使えません: {e}") from e


def use_class_server(base_url: str, model: str = "minimal-ja", api_key: str | None = None) -> Backend:
    """Send this kernel's lab panels made from now on to the server at ``base_url`` (checked first)."""
    backend = openai_backend(base_url, model, api_key=api_key)
    os.environ[SERVER_URL_ENV], os.environ[SERVER_MODEL_ENV] = backend.base_url, backend.model
    if backend.api_key:
        os.environ[API_KEY_ENV] = backend.api_key
    return backend


# ---------------------------------------------------------------- the common result
def build_result(metrics: list, plan: list[dict], t0: float, backend: Backend, extra: dict | None = None) -> dict:
    """One run's result from per-request metrics (``RequestMetrics`` or ``ClientMetrics``), times from ``t0``."""
    last = max(m.token_times[-1] for m in metrics)
    summary = summarize(metrics, duration=last - t0)
    requests, gaps = [], []
    for i, (m, p) in enumerate(zip(metrics, plan)):
        times = [(t - t0) * 1e3 for t in m.token_times]
        arrival = (m.arrival_time - t0) * 1e3
        scheduled = getattr(m, "first_scheduled_time", None)
        requests.append({"index": i, "prompt_len": m.num_prompt_tokens, "late": p["late"], "arrival_ms": arrival,
                         "prefill_start_ms": arrival if scheduled is None else (scheduled - t0) * 1e3,
                         "first_token_ms": times[0], "token_times_ms": times, "ttft_ms": m.ttft * 1e3,
                         "tpot_ms": m.tpot * 1e3 if m.tpot is not None else float("nan"),
                         "e2el_ms": m.e2e_latency * 1e3, "num_preemptions": getattr(m, "num_preemptions", 0)})
        gaps += [(b - a, a, b, i) for a, b in zip(times, times[1:])]
    gap, start, end, who = max(gaps) if gaps else (float("nan"), 0.0, 0.0, 0)
    summary["max_itl_ms"] = gap
    res = {"backend": backend.kind, "backend_label": backend.label, "requests": requests,
           "ttft_ms": summary["median_ttft_ms"], "tpot_ms": summary["median_tpot_ms"],
           "itl_ms": summary["median_itl_ms"], "p99_itl_ms": summary["p99_itl_ms"], "max_itl_ms": gap,
           "spike": {"start_ms": start, "end_ms": end, "request": who},
           "tok_s": summary["output_throughput"], "total_tok_s": summary["total_token_throughput"],
           "tok_s_per_user": summary["tok_s_per_user"], "duration_s": summary["duration"],
           "num_preemptions": sum(r["num_preemptions"] for r in requests), "summary": summary}
    res.update(extra or {})
    return res


def run_plan(backend: Backend, plan: list[dict], output_len: int, seed: int = 0, progress=None,
             threads: int | None = None) -> dict:
    """Send the requests of ``plan`` (see course.labkit.arrivals), each generating ``output_len`` tokens
    (``ignore_eos``); ``progress(done_tokens, total_tokens)`` as tokens come. Returns ``build_result``'s dict."""
    if backend.kind == "local":
        return _run_local(backend, plan, output_len, seed, progress, apply_thread_policy(threads))
    if backend.kind == "openai":
        return _run_openai(backend, plan, output_len, seed, progress)
    raise ValueError(f"バックエンド {backend.kind!r} は使えません（local か openai）。 / unknown backend {backend.kind!r}")


# ---------------------------------------------------------------- the local engine
def _local_prompts(llm, plan: list[dict], seed: int) -> list[list[int]]:
    """Random prompts; requests of the same length come from one seeded draw (the first group from ``seed``)."""
    lengths = list(dict.fromkeys(p["prompt_len"] for p in plan))
    pools = {n: iter(random_prompts(llm, n, sum(p["prompt_len"] == n for p in plan), seed + k))
             for k, n in enumerate(lengths)}
    return [next(pools[p["prompt_len"]]) for p in plan]


def _run_local(backend: Backend, plan, output_len, seed, progress, threads) -> dict:
    llm = get_llm(backend.model, backend.device)
    engine = llm.engine
    longest = max(p["prompt_len"] for p in plan)
    if longest + output_len > engine.max_model_len:
        raise ValueError(f"プロンプト長 + 出力長 = {longest + output_len} トークンが、このモデルの最大長 "
                         f"{engine.max_model_len} を超えています。 / prompt_len + output_len = "
                         f"{longest + output_len} exceeds this model's max_model_len {engine.max_model_len}")
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    prompts = _local_prompts(llm, plan, seed)
    total, done, steps, outs, ids = output_len * len(plan), 0, [], {}, {}
    pending = list(range(len(plan)))
    idle = 0
    t0 = time.perf_counter()
    try:
        while pending or (engine.has_unfinished_requests() and len(outs) < len(ids)):
            now = time.perf_counter()
            for i in list(pending):
                p = plan[i]
                due = p["offset_s"] is not None and t0 + p["offset_s"] <= now
                waited = p["after_tokens"] is not None and (done >= p["after_tokens"] or len(outs) == len(ids))
                if due or waited:
                    at = t0 + p["offset_s"] if p["offset_s"] is not None else now
                    ids[i] = engine.add_request(prompts[i], params, arrival_time=at)
                    pending.remove(i)
            if not engine.has_unfinished_requests():
                times = [t0 + plan[i]["offset_s"] for i in pending if plan[i]["offset_s"] is not None]
                time.sleep(max(0.0, min(times, default=now) - time.perf_counter()))
                continue
            a = time.perf_counter()
            step_outs = engine.step()
            b = time.perf_counter()
            idle = 0 if step_outs else idle + 1
            if idle > 1000:
                raise RuntimeError("the engine made no progress for 1000 steps")
            steps.append({"start_ms": (a - t0) * 1e3, "end_ms": (b - t0) * 1e3, "tokens_out": len(step_outs),
                          "first_tokens": sum(len(o.token_ids) == 1 for o in step_outs)})
            for o in step_outs:
                if o.finished:
                    outs[o.request_id] = o
            done += len(step_outs)
            if progress is not None:
                progress(min(done, total), total)
    finally:
        for rid in ids.values():            # an interrupt (Ctrl-C, an error) frees the KV blocks
            if rid not in outs:
                engine.abort_request(rid)
    metrics = [outs[ids[i]].metrics for i in range(len(plan))]
    return build_result(metrics, plan, t0, backend,
                        {"steps": steps, "model_name": llm.model_name, "threads": threads,
                         "dtype": str(llm.dtype).replace("torch.", "")})


# ---------------------------------------------------------------- an OpenAI-compatible server
def _text_prompts(backend: Backend, plan: list[dict], seed: int) -> list[str]:
    from minimal_engine.llm import DEFAULT_MODEL
    from minimal_engine.model.tokenizer import Tokenizer
    tok = Tokenizer(backend.tokenizer or DEFAULT_MODEL)
    from transformers.utils import logging as hf_logging
    rng, banned = random.Random(seed), {tok.eos_token_id}
    texts, verbosity = [], hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()            # re-encoding may pass the model's length: only a count here
    try:
        for p in plan:
            ids = []
            while len(ids) < p["prompt_len"]:
                t = rng.randrange(len(tok))
                if t not in banned:
                    ids.append(t)
            texts.append(tok.decode(tok.encode(tok.decode(ids))[:p["prompt_len"]]) or "a")
    finally:
        hf_logging.set_verbosity(verbosity)
    return texts


def _run_in_thread(coro_fn):
    """asyncio.run in a worker thread: a Jupyter kernel's own event loop is already running in this one."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(coro_fn())).result()


def _run_openai(backend: Backend, plan, output_len, seed, progress, timeout_s: float = 600.0) -> dict:
    import httpx

    from minimal_engine.bench.online import auth_headers, request_body, send_one
    url = backend.base_url + backend.endpoint
    texts = _text_prompts(backend, plan, seed)
    total, state = output_len * len(plan), {"chunks": 0, "finished": 0}

    def on_chunk(_m):
        state["chunks"] += 1
        if progress is not None:
            progress(min(state["chunks"], total), total)

    async def one(client, i, t0):
        p = plan[i]
        if p["offset_s"] is not None:
            await asyncio.sleep(max(0.0, t0 + p["offset_s"] - time.perf_counter()))
        else:
            while state["chunks"] < p["after_tokens"] and state["finished"] < i:
                await asyncio.sleep(0.002)
        body = request_body(backend.endpoint, backend.model, texts[i], output_len)
        m = await send_one(client, url, body, p["prompt_len"], on_chunk=on_chunk)
        state["finished"] += 1
        return m

    async def main():
        limits = httpx.Limits(max_connections=len(plan) + 4)
        timeout = httpx.Timeout(timeout_s, connect=10.0)        # an unreachable server fails in seconds
        async with httpx.AsyncClient(timeout=timeout, limits=limits,
                                     headers=auth_headers(backend.api_key)) as client:
            t0 = time.perf_counter()
            return t0, await asyncio.gather(*(one(client, i, t0) for i in range(len(plan))))

    t0, metrics = _run_in_thread(main)
    errors = [m.error for m in metrics if m.error]
    if errors:
        hint = ""
        if errors[0].startswith("HTTP 401"):
            hint = ("（API キーがないか違います: openai_backend(..., api_key=\"講師のキー\") "
                    "か環境変数 MINIMAL_ENGINE_API_KEY に入れてください）")
        raise ValueError(f"サーバーへのリクエスト {len(errors)} 件が失敗しました（{backend.base_url}、モデル "
                         f"{backend.model!r}）{hint}: {errors[0]} / {len(errors)} requests failed")
    return build_result(metrics, plan, t0, backend, {"steps": [], "model_name": backend.model, "threads": None,
                                                     "dtype": ""})


__all__ = ["Backend", "build_result", "class_server", "local_backend", "openai_backend", "run_plan",
           "use_class_server"]
