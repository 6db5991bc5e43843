"""LLMEngine: the loop that servers and labs drive step by step.

    add_request()  ->  step(): scheduler.schedule() -> model_runner.run() -> update sequences  ->  outputs
                       (repeat while has_unfinished_requests())

Speculative decoding (features/spec_decode/) plugs in as `speculator`, given at construction: it proposes draft
tokens before the scheduler runs and verifies them inside the runner; every step result is a list of tokens.

Every input is checked once, in check() (requests.py), before the request touches the queues, so a
bad request raises a clear error and never disturbs the others. A request whose own sampling fails in a
step (the sampler returns the exception for its row) finishes alone with finish_reason "error" and
`error` set; the other requests of the step carry on.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, replace

import torch

from minimal_engine.engine.block_manager import BlockManager
from minimal_engine.config import EngineConfig, ModelConfig
from minimal_engine.engine.model_runner import ModelRunner
from minimal_engine.sampling_params import SamplingParams
from minimal_engine.engine.scheduler import Scheduler
from minimal_engine.engine.requests import CheckedPrompt, check_request, tokenize_prompt
from minimal_engine.engine.sequence import RequestMetrics, Sequence
from minimal_engine.engine.logprobs import decode_logprobs
from minimal_engine.engine.stop_strings import check_stop, take_new_text
from minimal_engine.model.tokenizer import IncrementalDetokenizer, Tokenizer


@dataclass(frozen=True)
class StepStats:
    """What the latest step did, for per-step counters (vLLM's SchedulerStats / IterationStats): the tokens it
    ran, the requests it preempted, and the prefix-cache lookups of requests scheduled for the first time
    (in prompt tokens; zero without prefix caching)."""

    num_scheduled_tokens: int = 0
    num_preempted: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0


@dataclass
class RequestOutput:
    """What a request has produced so far (or in total, when finished)."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]
    finished: bool
    finish_reason: str | None
    metrics: RequestMetrics
    new_text: str = ""            # text added by the latest step (streaming)
    new_token_ids: tuple = ()
    error: str | None = None      # finish_reason "error": what went wrong (the other requests are unaffected)
    logprobs: list | None = None  # SamplingParams.logprobs: per output token {id: Logprob} (logprobs.py)
    prompt_logprobs: list | None = None
    stop_reason: str | int | None = None   # the stop string or stop token id that ended it (None for EOS)
    num_cached_tokens: int = 0    # prompt tokens whose K/V came from the prefix cache (as vLLM's)
    completions: list | None = None  # SamplingParams(n > 1): the n completions of this prompt (LLM groups them)

    @property
    def outputs(self) -> list["RequestOutput"]:
        """vLLM compatibility: `out.outputs[i].text` as in vLLM (n completions per prompt; one when n=1)."""
        return self.completions or [self]


class LLMEngine:
    def __init__(self, model, model_config: ModelConfig, tokenizer: Tokenizer, config: EngineConfig,
                 num_blocks: int, dtype: torch.dtype, device: torch.device, seed: int = 0, speculator=None,
                 grammars=None, scheduler_policy=None, decode_attention=None):
        """speculator: None, or an object with validate(params), propose(running) and verify(logits, samplers)
        (features/spec_decode/decoder.py: SpecDecoder). grammars: None, or an object whose matcher(constraint)
        compiles SamplingParams.structured_outputs (features/structured_output.py: GrammarBackend).
        scheduler_policy: None, or schedule_step(running, waiting, token_budget, max_num_seqs) (scheduler.py).
        decode_attention: None, or fn(q, k, v) for the decode rows (model_runner.py, model/attention.py)."""
        self.model_config, self.tokenizer, self.config = model_config, tokenizer, config
        self.device = device
        self.block_manager = BlockManager(num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(config, self.block_manager, scheduler_policy)
        self.runner = ModelRunner(model, config, num_blocks, dtype, device, verifier=speculator,
                                  decode_attention=decode_attention)
        self.seqs: dict[str, Sequence] = {}
        self.eos_ids = set(model_config.eos_token_ids)
        if tokenizer.eos_token_id is not None and not model_config.synthetic:
            self.eos_ids.add(tokenizer.eos_token_id)
        self.generator = torch.Generator(device=device).manual_seed(seed)  # for unseeded sampled requests
        self._ids = itertools.count()
        self.speculator = speculator          # LLM(speculative_config=...) (chapter 8)
        self.grammars = grammars              # structured outputs
        self.last_step = StepStats()          # what the latest step() did (the server's /metrics reads it)
        self.finish_listeners: list = []      # add_finish_listener: called before a finished request's blocks go

    def add_finish_listener(self, listener) -> None:
        """listener(seq) is called when a request finishes normally, while its KV blocks are still held
        (disaggregation: the prefill engine copies the blocks out, disagg/llm.py)."""
        self.finish_listeners.append(listener)

    @property
    def max_model_len(self) -> int:
        return self.config.max_model_len

    @property
    def comm_stats(self) -> dict | None:
        """Tensor parallelism (features/tensor_parallel/): all-reduces, bytes and seconds so far; None without it."""
        comm = getattr(self.runner.model, "comm", None)
        return comm.stats() if comm is not None else None

    # ---- input checks (requests.py) ----------------------------------------------------------------
    def check(self, prompt, params: SamplingParams | None = None) -> CheckedPrompt:
        """Tokenize and check a prompt against this engine's fixed limits; add_request takes the result without
        checking again. Reads nothing that steps change, so servers call it off the engine's thread."""
        params = SamplingParams() if params is None else params
        text, token_ids = tokenize_prompt(prompt, self.tokenizer)
        self.validate_request(token_ids, params)
        grammar = None
        if params.structured_outputs is not None:
            if self.grammars is None:
                raise ValueError("structured_outputs needs a grammar backend (LLM gives the engine one)")
            grammar = self.grammars.matcher(params.structured_outputs)
        return CheckedPrompt(text, token_ids, params, grammar)

    def validate_request(self, token_ids: list[int], params: SamplingParams) -> None:
        check_request(token_ids, params, self.model_config.vocab_size, self.config, self.block_manager.num_blocks)
        if self.speculator is not None:
            self.speculator.validate(params)

    # ---- the loop -----------------------------------------------------------------------------------
    def add_request(self, prompt, params: SamplingParams | None = None, request_id: str | None = None,
                    arrival_time: float | None = None) -> str:
        """prompt: a string, token ids, or a CheckedPrompt from check() (then `params` is the one it holds)."""
        req = prompt if isinstance(prompt, CheckedPrompt) else self.check(prompt, params)
        text, token_ids, params = req.text, req.token_ids, req.params
        request_id = str(next(self._ids)) if request_id is None else request_id
        if request_id in self.seqs:
            raise ValueError(f"request id {request_id!r} is already in use")
        seq = Sequence(request_id, text, token_ids, params, arrival_time)
        seq.detokenizer = IncrementalDetokenizer(self.tokenizer, token_ids, params.skip_special_tokens)
        seq.grammar = req.grammar.copy() if req.grammar is not None else None
        if params.min_tokens:
            seq.min_tokens_ids = params.stop_set | (frozenset() if params.ignore_eos else frozenset(self.eos_ids))
        seq.generator = (torch.Generator(device=self.device).manual_seed(params.seed)
                         if params.seed is not None else (None if params.greedy else self.generator))
        self.seqs[request_id] = seq
        self.scheduler.add(seq)
        return request_id

    def abort_request(self, request_id: str) -> None:
        seq = self.seqs.pop(request_id, None)
        if seq is not None and not seq.is_finished:
            self.scheduler.finish(seq, "abort")
            seq.metrics.finished_time = time.perf_counter()

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[RequestOutput]:
        """Run one scheduled batch; return an output for every request that got a token or finished."""
        if self.speculator is not None:          # draft tokens join the running requests (spec_decode/)
            self.speculator.propose(self.scheduler.running)
        sched = self.scheduler.schedule()        # (drafts it does not schedule, it takes back)
        if sched.is_empty:
            self.last_step = StepStats(num_preempted=len(sched.preempted))
            return []
        now = time.perf_counter()
        queries = hits = 0
        for s in sched.scheduled:
            if s.seq.metrics.first_scheduled_time is None:
                s.seq.metrics.first_scheduled_time = now
                if self.config.enable_prefix_caching:
                    queries, hits = queries + s.seq.num_prompt_tokens, hits + (s.seq.num_cached_tokens or 0)
        self.last_step = StepStats(sched.num_tokens, len(sched.preempted), queries, hits)
        sampled = self.runner.run(sched)
        now = time.perf_counter()
        outputs = []
        for s in sched.scheduled:
            s.seq.num_computed_tokens += s.num_tokens
        for seq, tokens in sampled.items():
            if isinstance(tokens, Exception):   # this request's sampling failed: it alone fails
                outputs.append(self._fail(seq, f"sampling failed: {type(tokens).__name__}: {tokens}", now))
                continue
            try:
                for t in tokens if seq.grammar is not None else ():
                    seq.grammar.accept(t)       # structured outputs: the matcher takes the sampled token
            except ValueError as e:
                outputs.append(self._fail(seq, str(e), now))
                continue
            outputs.append(self.accept_tokens(seq, tokens, now))
        return outputs

    def accept_tokens(self, seq: Sequence, tokens: list[int], now: float) -> RequestOutput:
        """Append what a step produced for seq: one sampled token, or (speculative decoding) the accepted drafts
        and one more token. Verified drafts leave the token list first and come back as ordinary tokens."""
        if seq.spec_token_ids:
            seq.keep_drafts(0)
            seq.num_computed_tokens = len(seq) + len(tokens) - 1     # the accepted drafts' K/V are in the cache
            self.block_manager.trim(seq, seq.num_computed_tokens)
        outs = []
        for t in tokens:
            outs.append(self._append_token(seq, t, now))
            if outs[-1].finished:
                break
        if len(outs) == 1:
            return outs[0]
        return replace(outs[-1], new_text="".join(o.new_text for o in outs), new_token_ids=tuple(tokens[:len(outs)]))

    def _fail(self, seq: Sequence, message: str, now: float) -> RequestOutput:
        seq.error = message
        seq.detokenizer.finish()
        self.scheduler.finish(seq, "error")
        seq.metrics.finished_time = now
        del self.seqs[seq.request_id]
        return self.output(seq)

    def _append_token(self, seq: Sequence, token: int, now: float) -> RequestOutput:
        seq.token_ids.append(token)
        m = seq.metrics
        if m.first_token_time is None:
            m.first_token_time = now
        m.token_times.append(now)
        p = seq.params
        reason = None
        if (token in self.eos_ids and not p.ignore_eos) or token in p.stop_set:
            reason = "stop"
        elif seq.num_output_tokens >= p.max_tokens or len(seq) >= self.max_model_len:
            reason = "length"
        # as vLLM: a stop token's (or EOS's) text stays out of `text` unless include_stop_str_in_output
        if reason == "stop":
            seq.stop_reason = token if token in p.stop_set else None
        delta = "" if reason == "stop" and not p.include_stop_str_in_output else seq.detokenizer.add(token)
        if reason != "stop" and check_stop(seq, len(delta)) is not None:    # stop strings (stop_strings.py)
            reason = "stop"
        elif reason is not None:
            seq.detokenizer.finish()             # drops an incomplete last character, as vLLM
        if seq.logprobs or seq.prompt_logprobs:    # the prompt's are complete once the first token is out
            first = seq.num_output_tokens == 1 and seq.prompt_logprobs or []
            decode_logprobs((seq.logprobs or [])[-1:] + first, self.tokenizer)
        new_text = take_new_text(seq, reason is not None)
        if reason is not None:
            for listener in self.finish_listeners:
                listener(seq)
            self.scheduler.finish(seq, reason)
            m.finished_time = now
            del self.seqs[seq.request_id]
        return self.output(seq, new_text, (token,))

    def output(self, seq: Sequence, new_text: str = "", new_ids: tuple = ()) -> RequestOutput:
        text = seq.detokenizer.text if seq.is_finished else seq.detokenizer.text[:seq.sent_chars]  # less held-back
        return RequestOutput(seq.request_id, seq.prompt, seq.token_ids[:seq.num_prompt_tokens],
                             text, seq.output_token_ids, seq.is_finished, seq.finish_reason,
                             seq.metrics, new_text, new_ids, seq.error, seq.logprobs and list(seq.logprobs),
                             seq.prompt_logprobs and list(seq.prompt_logprobs), seq.stop_reason,
                             num_cached_tokens=seq.num_cached_tokens or 0)
