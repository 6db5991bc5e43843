"""LLM: the offline entry point, shaped like vLLM's.

    from minimal_engine import LLM, SamplingParams
    llm = LLM()                                   # the course's tiny Japanese model, offline
    outs = llm.generate(["吾輩は"], SamplingParams(temperature=0, max_tokens=32))
    print(outs[0].text, outs[0].metrics.ttft)

`model` is a local Hugging Face folder, a hub id (when online or cached), or "synthetic:NAME" for a
randomly initialised model of a real shape (model/synthetic.py). Loading and sizing: llm_setup.py.

One lock serialises the engine, and every step's outputs go to the inbox of their request, so
generate() and stream() may be mixed and called from several threads; each caller gets its own
requests' outputs. (The server does not use this: its EngineLoop owns the engine in one thread.)
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import replace
from pathlib import Path

import torch

from minimal_engine.config import DEFAULT_MODEL, EngineConfig
from minimal_engine.engine.llm_engine import LLMEngine, RequestOutput
from minimal_engine.engine.requests import CheckedPrompt, children, conversations, pair_prompts
from minimal_engine.features.quantization import quantize_model
from minimal_engine.features.structured_output import GrammarBackend
from minimal_engine.llm_setup import (auto_num_blocks, fit_to_model, load, resolve_device,
                                      spec_decoder, tensor_parallel)
from minimal_engine.model.cpu_linears import use_cpu_linears
from minimal_engine.sampling_params import SamplingParams


class LLM:
    def __init__(self, model: str | Path | None = None, dtype=None, device=None,
                 block_size: int = 16, num_kv_blocks: int | None = None, max_num_seqs: int = 64,
                 max_num_batched_tokens: int = 2048, max_model_len: int | None = None,
                 seed: int = 0, kv_cache_memory: int | None = None, cuda_graphs: bool | None = None,
                 enable_prefix_caching: bool = False, batching: str = "continuous",
                 quantization: str | None = None, kv_cache_dtype: str = "auto",
                 tensor_parallel_size: int = 1, speculative_config: dict | None = None,
                 quantizer=None, rejection_sampler=None, scheduler_policy=None,
                 decode_attention=None, attention_backend: str | None = None,
                 grammar_compiler=None, grammar_masks=None):
        config = EngineConfig(
            block_size=block_size, num_kv_blocks=num_kv_blocks, kv_cache_memory=kv_cache_memory,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len, cuda_graphs=cuda_graphs,
            enable_prefix_caching=enable_prefix_caching, batching=batching,
            quantization=quantization, kv_cache_dtype=kv_cache_dtype,
            attention_backend=attention_backend)
        self.device = resolve_device(device)
        torch.manual_seed(seed)
        source = DEFAULT_MODEL if model is None else model
        model_config, net, tokenizer, self.dtype, self.model_path = load(source, dtype, self.device,
                                                                         seed)
        # chapter 6: every Linear -> Int8Linear; quantizer: W -> (int8 W, scales)
        quantize_model(net, config.quantization, quantizer=quantizer)
        self.model_name = str(model) if model is not None else "minimal-ja (default)"
        config = fit_to_model(config, model_config)
        num_blocks = config.num_kv_blocks or auto_num_blocks(model_config, config, self.dtype,
                                                             self.device)
        if tensor_parallel_size != 1:            # chapter 7: the model split over N processes
            net, config = tensor_parallel(net, config, tensor_parallel_size,
                                          self.model_path or source, seed, self.dtype, self.device,
                                          num_blocks)
        self.model_config, self.config, self.tokenizer = model_config, config, tokenizer
        speculator = None                        # chapter 8: speculative decoding
        if speculative_config is not None:
            speculator = spec_decoder(speculative_config, rejection_sampler, model_config,
                                      tokenizer, config, num_blocks, self.dtype, self.device)
        # structured outputs (features/structured_*.py): grammar_compiler a CompileWorker,
        # grammar_masks a MaskPool (None: the defaults)
        grammars = GrammarBackend(tokenizer, model_config.vocab_size, grammar_compiler,
                                  grammar_masks)
        use_cpu_linears(net)                     # CPU: Linear kernels probed (cpu_linears.py)
        self.engine = LLMEngine(net, model_config, tokenizer, config, num_blocks, self.dtype,
                                self.device, seed, speculator=speculator, grammars=grammars,
                                scheduler_policy=scheduler_policy,
                                decode_attention=decode_attention)
        self._lock = threading.RLock()
        self._inbox: dict[str, deque] = {}   # request id -> its outputs not yet taken by its caller

    @property
    def model(self):
        """The model the engine runs (an nn.Module; a TensorParallelModel under TP)."""
        return self.engine.runner.model

    def close(self) -> None:
        """Stop the tensor-parallel workers, if any (also done when collected and at exit)."""
        getattr(self.model, "close", lambda: None)()

    def check_prompts(self, prompts, sampling_params=None) -> list[CheckedPrompt]:
        """Every prompt tokenized and checked (LLMEngine.check) before any of them starts; a bad one
        raises, naming its index."""
        checked = []
        for i, (p, sp) in enumerate(pair_prompts(prompts, sampling_params)):
            try:
                checked.append(self.engine.check(p, sp))
            except (ValueError, TypeError) as e:
                raise type(e)(f"prompt {i}: {e}") from None
        return checked

    def generate(self, prompts, sampling_params=None, use_tqdm: bool = True) -> list[RequestOutput]:
        """Run prompts (strings and/or lists of token ids) to completion as one continuous batch.
        A request that fails alone comes back with finish_reason "error" and `error` set.
        SamplingParams(n=k > 1): k requests (`children`), returned as one output whose `.outputs`
        lists the k completions (the top-level fields are the first's)."""
        kids = [children(c) for c in self.check_prompts(prompts, sampling_params)]
        outs = self._run(self._add([kid for k in kids for kid in k]), use_tqdm)
        grouped, i = [], 0
        for k in kids:
            grouped.append(outs[i] if len(k) == 1
                           else replace(outs[i], completions=outs[i:i + len(k)]))
            i += len(k)
        return grouped

    def stream(self, prompt, sampling_params: SamplingParams | None = None):
        """Yield RequestOutputs of one prompt as tokens arrive (`out.new_text` is the new text)."""
        checked = self.check_prompts([prompt], sampling_params)
        if checked[0].params.n != 1:
            raise ValueError("stream() gives one completion: use generate() for "
                             "SamplingParams(n > 1)")
        rid = self._add(checked)[0]
        try:
            while True:
                with self._lock:
                    if not self._inbox[rid]:
                        self._step()
                    outs = self._take(rid)
                for out in outs:             # yielded outside the lock: others may run meanwhile
                    yield out
                    if out.finished:
                        return
        finally:
            with self._lock:
                self._drop(rid)                  # frees blocks if the caller stops early

    def chat(self, messages, sampling_params=None, use_tqdm: bool = True) -> list[RequestOutput]:
        """messages: one conversation ([{"role": ..., "content": ...}]) or a list of them."""
        prompts = [self.tokenizer.apply_chat_template(c) for c in conversations(messages)]
        return self.generate(prompts, sampling_params, use_tqdm)

    def _add(self, checked: list[CheckedPrompt]) -> list[str]:
        """Queue every prompt, or none: if one fails, those already queued are taken back."""
        ids: list[str] = []
        with self._lock:
            try:
                for c in checked:
                    ids.append(self.engine.add_request(c))
                    self._inbox[ids[-1]] = deque()
            except BaseException:
                for rid in ids:
                    self._drop(rid)
                raise
        return ids

    def _drop(self, rid: str) -> None:
        self._inbox.pop(rid, None)
        self.engine.abort_request(rid)           # a no-op when the request has finished

    def _take(self, rid: str) -> list[RequestOutput]:
        """The outputs of request rid not yet taken (caller holds the lock)."""
        box = self._inbox.get(rid) or deque()
        outs = list(box)
        box.clear()
        return outs

    def _step(self) -> None:
        """One engine step (caller holds the lock); outputs go to their requests' inboxes."""
        if not self.engine.has_unfinished_requests():
            raise RuntimeError("the engine has no unfinished request, but a caller still waits "
                               "for one (was it aborted through llm.engine directly?)")
        for out in self.engine.step():
            if out.request_id in self._inbox:
                self._inbox[out.request_id].append(out)

    def _run(self, ids: list[str], use_tqdm: bool) -> list[RequestOutput]:
        results: dict[str, RequestOutput] = {}
        bar = None
        if use_tqdm:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(ids), desc="generate", unit="req")
        try:
            while len(results) < len(ids):
                with self._lock:
                    for rid in ids:
                        results.update((rid, o) for o in self._take(rid) if o.finished)
                    if bar:
                        bar.update(len(results) - bar.n)
                    if len(results) < len(ids):
                        self._step()
        finally:
            with self._lock:
                for rid in ids:              # on an interrupt, free everything this call started
                    self._drop(rid)
            if bar:
                bar.close()
        return [results[r] for r in ids]
