"""LLMEngine: the loop that servers and labs drive step by step.

    add_request() -> step(): scheduler.schedule() -> runner.run() -> scheduler.update_from_output()

The runner returns data (ModelRunnerOutput) and the scheduler alone applies it to the requests.
Every input is checked once, in check() (requests.py), before it touches the queues: a bad request
raises a clear error and never disturbs the others; one whose sampling fails finishes alone.
"""
from __future__ import annotations

import itertools
import time

import torch

from minimal_engine.config import EngineConfig, ModelConfig
from minimal_engine.engine.block_manager import BlockManager
from minimal_engine.engine.model_runner import ModelRunner
from minimal_engine.engine.outputs import ModelRunnerOutput, RequestOutput, StepStats
from minimal_engine.engine.requests import CheckedPrompt, check_request, tokenize_prompt
from minimal_engine.engine.scheduler import ScheduledSeq, Scheduler, SchedulerOutput
from minimal_engine.engine.sequence import Sequence
from minimal_engine.model.tokenizer import IncrementalDetokenizer, Tokenizer
from minimal_engine.sampling_params import SamplingParams

__all__ = ["LLMEngine", "RequestOutput", "StepStats"]


class LLMEngine:
    def __init__(self, model, model_config: ModelConfig, tokenizer: Tokenizer, config: EngineConfig,
                 num_blocks: int, dtype: torch.dtype, device: torch.device, seed: int = 0,
                 speculator=None, grammars=None, scheduler_policy=None, decode_attention=None):
        """Collaborators (None: without): speculator (features/spec_decode/: validate(params),
        propose(seqs) -> {request id: drafts}, verify(logits, steps)); grammars (structured
        outputs' matcher(constraint)); scheduler_policy; decode_attention (model_runner.py)."""
        self.model_config, self.tokenizer, self.config = model_config, tokenizer, config
        self.device = device
        self.eos_ids = set(model_config.eos_token_ids)
        if tokenizer.eos_token_id is not None and not model_config.synthetic:
            self.eos_ids.add(tokenizer.eos_token_id)
        self.block_manager = BlockManager(num_blocks, config.block_size,
                                          config.enable_prefix_caching)
        self.scheduler = Scheduler(config, self.block_manager, scheduler_policy, self.eos_ids)
        self.runner = ModelRunner(model, config, num_blocks, dtype, device, speculator=speculator,
                                  decode_attention=decode_attention)
        self.seqs: dict[str, Sequence] = {}
        self.generator = torch.Generator(device=device).manual_seed(seed)   # unseeded sampled rows
        self._ids = itertools.count()
        self.speculator, self.grammars = speculator, grammars
        self.last_step = StepStats()          # what the latest step() did (the server's /metrics)

    def add_finish_listener(self, listener) -> None:
        """listener(seq) is called when a request finishes normally, while it still holds its KV
        blocks (disaggregation copies them out)."""
        self.scheduler.add_finish_listener(listener)

    @property
    def max_model_len(self) -> int:
        return self.config.max_model_len

    @property
    def comm_stats(self) -> dict | None:
        """Tensor parallelism's all-reduces, bytes and seconds so far; None without it."""
        comm = getattr(self.runner.model, "comm", None)
        return comm.stats() if comm is not None else None

    # ---- input checks (requests.py) -------------------------------------------------------------
    def check(self, prompt, params: SamplingParams | None = None) -> CheckedPrompt:
        """Tokenize and check a prompt against this engine's fixed limits (never changed by steps:
        servers call it off the engine's thread); add_request takes the result as it is."""
        params = SamplingParams() if params is None else params
        text, token_ids = tokenize_prompt(prompt, self.tokenizer)
        self.validate_request(token_ids, params)
        grammar = None
        if params.structured_outputs is not None:
            if self.grammars is None:
                raise ValueError("structured_outputs needs a grammar backend (LLM gives one)")
            grammar = self.grammars.matcher(params.structured_outputs)
        return CheckedPrompt(text, token_ids, params, grammar)

    def validate_request(self, token_ids: list[int], params: SamplingParams) -> None:
        check_request(token_ids, params, self.model_config.vocab_size, self.config,
                      self.block_manager.num_blocks)
        if self.speculator is not None:
            self.speculator.validate(params)

    # ---- the loop -------------------------------------------------------------------------------
    def add_request(self, prompt, params: SamplingParams | None = None,
                    request_id: str | None = None, arrival_time: float | None = None,
                    metrics=None, generator_state: torch.Tensor | None = None) -> str:
        """prompt: a string, token ids, or a CheckedPrompt from check() (then `params` is the one it
        holds). metrics and generator_state: a request prefilled elsewhere (disagg/llm.py)."""
        req = prompt if isinstance(prompt, CheckedPrompt) else self.check(prompt, params)
        params = req.params
        request_id = str(next(self._ids)) if request_id is None else request_id
        if request_id in self.seqs:
            raise ValueError(f"request id {request_id!r} is already in use")
        generator = None if params.greedy and params.seed is None else self.generator
        if params.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(params.seed)
            if generator_state is not None:
                generator.set_state(generator_state)
        stops = params.stop_set | (frozenset() if params.ignore_eos else frozenset(self.eos_ids))
        seq = Sequence(request_id, req.text, req.token_ids, params, arrival_time, metrics=metrics,
                       detokenizer=IncrementalDetokenizer(self.tokenizer, req.token_ids,
                                                          params.skip_special_tokens),
                       grammar=req.grammar.copy() if req.grammar is not None else None,
                       generator=generator,
                       min_tokens_ids=stops if params.min_tokens else frozenset())
        self.seqs[request_id] = seq
        self.scheduler.add(seq)
        return request_id

    def abort_request(self, request_id: str) -> None:
        seq = self.seqs.pop(request_id, None)
        if seq is not None and not seq.is_finished:
            self.scheduler.finish(seq, "abort")

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[RequestOutput]:
        """Run one batch; return an output for every request that got a token or finished."""
        drafts = None
        if self.speculator is not None:          # drafts: data the scheduler may schedule
            drafts = self.speculator.propose(list(self.scheduler.running))
        sched = self.scheduler.schedule(drafts)
        self.last_step = sched.stats(self.config.enable_prefix_caching)
        if sched.is_empty:
            return []
        result = self.runner.run(sched)
        if result.logprobs or result.prompt_logprobs:
            result = result.decoded(self.tokenizer)
        return self._done(self.scheduler.update_from_output(sched, result, time.perf_counter()))

    def accept_prefilled(self, request_id: str, token: int) -> RequestOutput:
        """Disaggregation: the first token of a request admitted with its K/V (admit_prefilled),
        sampled by the prefill engine, taken as if sampled here."""
        seq = self.seqs[request_id]
        sched = SchedulerOutput([ScheduledSeq(seq, seq.num_computed_tokens, 0)])
        result = ModelRunnerOutput(sampled={request_id: [token]})
        return self._done(self.scheduler.update_from_output(sched, result, time.perf_counter()))[0]

    def _done(self, outputs: list[RequestOutput]) -> list[RequestOutput]:
        for out in outputs:
            if out.finished:
                del self.seqs[out.request_id]
        return outputs
