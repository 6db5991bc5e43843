"""LLM: the offline entry point, shaped like vLLM's.

    from minimal_engine import LLM, SamplingParams
    llm = LLM()                                   # the course's tiny Japanese model, offline
    outs = llm.generate(["吾輩は"], SamplingParams(temperature=0, max_tokens=32))
    print(outs[0].text, outs[0].metrics.ttft)

`model` is a local Hugging Face folder, a hub id (when online or cached), or "synthetic:NAME" for a randomly
initialised model of a real shape (see synthetic.py).

Threads and interleaving: one lock serialises the engine, and every step's outputs go to the request they
belong to, so generate() and stream() may be mixed and called from several threads; each caller gets its
own requests' outputs. (The server does not use this: its EngineLoop owns the engine in one thread.)
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import replace
from pathlib import Path

import torch

from minimal_engine.config import DEFAULT_MODEL, EngineConfig, ModelConfig
from minimal_engine.engine.llm_engine import LLMEngine, RequestOutput
from minimal_engine.engine.requests import CheckedPrompt
from minimal_engine.engine.kv_cache import kv_bytes_per_value
from minimal_engine.model.loader import load_model, resolve_dtype, resolve_model_path
from minimal_engine.features.quantization import quantize_model
from minimal_engine.features.structured_output import GrammarBackend
from minimal_engine.sampling_params import SamplingParams, child_seed
from minimal_engine.model.tokenizer import Tokenizer

CPU_KV_BUDGET = 1 << 30          # 1 GiB of KV pool on the CPU unless told otherwise
GPU_KV_FRACTION = 0.5            # half of the free GPU memory after loading the weights


def available_devices() -> list[str]:
    """The devices this machine and this PyTorch build can run the engine on."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out += [f"cuda (cuda:0..cuda:{torch.cuda.device_count() - 1})"]
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        out += ["mps"]
    return out


def resolve_device(device) -> torch.device:
    if device is None or device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    here = f"available here: {', '.join(available_devices())}"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r} ({here})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        build = "this PyTorch is a CPU build" if torch.version.cuda is None else "no CUDA GPU was found"
        raise ValueError(f"device 'cuda' was asked for but {build}; {here}: use device='cpu' or 'auto'")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r} was asked for but there are {torch.cuda.device_count()} GPU(s); {here}")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"device 'mps' was asked for but Apple's MPS is not available; {here}: use device='cpu' "
                         "or 'auto'")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'mps', got {device!r} ({here})")
    return dev


class LLM:
    def __init__(self, model: str | Path | None = None, dtype=None, device=None, block_size: int = 16,
                 num_kv_blocks: int | None = None, max_num_seqs: int = 64, max_num_batched_tokens: int = 2048,
                 max_model_len: int | None = None, seed: int = 0, kv_cache_memory: int | None = None,
                 cuda_graphs: bool | None = None, enable_prefix_caching: bool = False, batching: str = "continuous",
                 quantization: str | None = None, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1,
                 speculative_config: dict | None = None, quantizer=None, rejection_sampler=None,
                 scheduler_policy=None, decode_attention=None, attention_backend: str | None = None):
        config = EngineConfig(block_size=block_size, num_kv_blocks=num_kv_blocks, kv_cache_memory=kv_cache_memory,
                              max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                              max_model_len=max_model_len, cuda_graphs=cuda_graphs,
                              enable_prefix_caching=enable_prefix_caching, batching=batching,
                              quantization=quantization, kv_cache_dtype=kv_cache_dtype,
                              attention_backend=attention_backend)
        self.device = resolve_device(device)
        torch.manual_seed(seed)
        if isinstance(model, str) and model.startswith("synthetic:"):
            from minimal_engine.model.synthetic import build_synthetic
            model_config, net, tokenizer, self.dtype = build_synthetic(model.split(":", 1)[1], dtype, self.device, seed)
            self.model_path = None
        else:
            self.model_path = resolve_model_path(model if model is not None else DEFAULT_MODEL)
            model_config = ModelConfig.from_folder(self.model_path)
            self.dtype = resolve_dtype(dtype, self.device, model_config)
            tokenizer = Tokenizer(self.model_path)
            net = load_model(self.model_path, model_config, self.dtype, self.device)
        # int8: every Linear -> Int8Linear (quantization.py); quantizer: W -> (int8 W, scales), default quantize_int8
        quantize_model(net, config.quantization, quantizer=quantizer)
        self.model_name = str(model) if model is not None else "minimal-ja (default)"
        limit = model_config.max_position_embeddings
        if config.max_model_len is not None and config.max_model_len > limit:
            raise ValueError(f"max_model_len={config.max_model_len} exceeds the model's limit of {limit} positions")
        if config.max_model_len is None:
            config = replace(config, max_model_len=limit)
        window = model_config.sliding_window
        if window is not None and config.max_model_len > window:
            raise ValueError(f"config.json: sliding_window={window} is active, but this engine computes full "
                             f"attention, which differs beyond {window} tokens; pass max_model_len<={window}")
        num_blocks = config.num_kv_blocks or self._auto_num_blocks(model_config, config)
        if tensor_parallel_size != 1:            # chapter 7: the model split over N processes (tensor_parallel/)
            if config.quantization or config.kv_cache_dtype != "auto":
                raise ValueError("tensor_parallel_size > 1 runs unquantized weights and KV only: pass "
                                 "quantization=None and kv_cache_dtype='auto' with it")
            config = replace(config, cuda_graphs=False)     # a TP step goes through pipes: no CUDA graphs
            from minimal_engine.features.tensor_parallel.model import TensorParallelModel
            spec = ("path", self.model_path) if self.model_path else ("synthetic", model.split(":", 1)[1], seed)
            net = TensorParallelModel(net, spec, tensor_parallel_size, self.dtype, self.device, config, num_blocks)
        self.model_config, self.config, self.tokenizer = model_config, config, tokenizer
        speculator = None
        if speculative_config is not None:       # chapter 8: speculative decoding (features/spec_decode/)
            from minimal_engine.features.spec_decode.decoder import SpecDecoder
            from minimal_engine.features.spec_decode.proposers import TargetInfo
            target = TargetInfo(model_config, tokenizer, config, num_blocks, self.dtype, self.device)
            speculator = SpecDecoder(speculative_config, target, rejection_sampler)   # None: rejection_sample
        grammars = GrammarBackend(tokenizer, model_config.vocab_size)   # structured outputs (lazy: only if used)
        self.engine = LLMEngine(net, model_config, tokenizer, config, num_blocks, self.dtype, self.device, seed,
                                speculator=speculator, grammars=grammars,
                                scheduler_policy=scheduler_policy, decode_attention=decode_attention)
        self._lock = threading.RLock()            # generate/stream may be called from several threads
        self._inbox: dict[str, deque] = {}        # request id -> its outputs not yet taken by its caller

    @property
    def model(self):
        """The model the engine runs (an nn.Module: weights, layers; a TensorParallelModel under TP)."""
        return self.engine.runner.model

    def close(self) -> None:
        """Stop the tensor-parallel workers, if any (also done on garbage collection and at exit)."""
        getattr(self.model, "close", lambda: None)()

    def _auto_num_blocks(self, mc: ModelConfig, config: EngineConfig) -> int:
        """Enough blocks for max_num_seqs requests of max_model_len tokens, within a memory budget."""
        per_block = mc.kv_bytes_per_token(kv_bytes_per_value(config.kv_cache_dtype, self.dtype)) * config.block_size
        wanted = config.max_num_seqs * -(-config.max_model_len // config.block_size)
        budget = config.kv_cache_memory
        if budget is None:
            if self.device.type == "cuda":
                budget = int(torch.cuda.mem_get_info(self.device)[0] * GPU_KV_FRACTION)
            else:
                budget = CPU_KV_BUDGET
        return max(1, min(wanted, budget // per_block))

    def check_prompts(self, prompts, sampling_params=None) -> list[CheckedPrompt]:
        """One prompt or a list, with one SamplingParams or one per prompt -> every prompt tokenized and checked
        (LLMEngine.check) before any of them starts; a bad one raises, naming its index."""
        if isinstance(prompts, (str, dict)) or (isinstance(prompts, (list, tuple)) and prompts
                                                and all(isinstance(t, int) for t in prompts)):
            prompts = [prompts]
        if not isinstance(prompts, (list, tuple)):
            raise ValueError("prompts must be a string, a list of token ids, a prompt dict or a list of these, "
                             f"got {type(prompts).__name__}")
        prompts = list(prompts)
        if not prompts:
            raise ValueError("prompts is empty: give at least one prompt")
        if sampling_params is None:
            sampling_params = SamplingParams()
        params = list(sampling_params) if isinstance(sampling_params, (list, tuple)) else [sampling_params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(params)} SamplingParams: give one, or one per prompt")
        checked = []
        for i, (p, sp) in enumerate(zip(prompts, params)):
            try:
                checked.append(self.engine.check(p, sp))
            except (ValueError, TypeError) as e:
                raise type(e)(f"prompt {i}: {e}") from None
        return checked

    def generate(self, prompts, sampling_params=None, use_tqdm: bool = True) -> list[RequestOutput]:
        """Run prompts (strings and/or lists of token ids) to completion as one continuous batch.
        A request that fails alone comes back with finish_reason "error" and `error` set.
        SamplingParams(n=k > 1): k requests of the prompt (seeds seed, seed+1, ... as vLLM), returned as one
        output per prompt whose `.outputs` lists the k completions (the top-level fields are the first's)."""
        checked = self.check_prompts(prompts, sampling_params)
        kids = [[c] if c.params.n == 1 else
                [replace(c, params=replace(c.params, n=1, seed=child_seed(c.params.seed, i)))
                 for i in range(c.params.n)] for c in checked]
        outs = self._run(self._add([kid for k in kids for kid in k]), use_tqdm)
        grouped, i = [], 0
        for k in kids:
            grouped.append(outs[i] if len(k) == 1 else replace(outs[i], completions=outs[i:i + len(k)]))
            i += len(k)
        return grouped

    def stream(self, prompt, sampling_params: SamplingParams | None = None):
        """Yield RequestOutputs of one prompt as tokens arrive (`out.new_text` is the new piece of text).
        Several streams (and generate calls, from any thread) may be interleaved: each gets its own outputs."""
        checked = self.check_prompts([prompt], sampling_params)
        if checked[0].params.n != 1:
            raise ValueError("stream() gives one completion: use generate() for SamplingParams(n > 1)")
        rid = self._add(checked)[0]
        try:
            while True:
                with self._lock:
                    if not self._inbox[rid]:
                        self._step()
                    outs = list(self._inbox[rid])
                    self._inbox[rid].clear()
                for out in outs:                 # yielded outside the lock: the caller may run other requests
                    yield out
                    if out.finished:
                        return
        finally:
            with self._lock:
                self._drop(rid)                  # frees blocks if the caller stops early

    def chat(self, messages, sampling_params=None, use_tqdm: bool = True) -> list[RequestOutput]:
        """messages: one conversation ([{"role": ..., "content": ...}]) or a list of them; uses the chat template."""
        ok = isinstance(messages, (list, tuple)) and messages and (
            all(isinstance(m, dict) for m in messages)
            or all(isinstance(c, (list, tuple)) and c and all(isinstance(m, dict) for m in c) for c in messages))
        if not ok:
            raise ValueError('messages must be a conversation (a list of {"role": ..., "content": ...} dicts) or '
                             f"a list of conversations, got {type(messages).__name__} {str(messages)[:40]!r}")
        convs = [messages] if isinstance(messages[0], dict) else list(messages)
        return self.generate([self.tokenizer.apply_chat_template(c) for c in convs], sampling_params, use_tqdm)

    # ---- one engine, many consumers: every output goes to the inbox of the request it belongs to ------
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

    def _step(self) -> None:
        """One engine step (caller holds the lock); outputs go to their requests' inboxes."""
        if not self.engine.has_unfinished_requests():
            raise RuntimeError("the engine has no unfinished request, but a caller still waits for one "
                               "(was it aborted through llm.engine directly?)")
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
                        box = self._inbox.get(rid) or ()
                        for out in box:
                            if out.finished:
                                results[rid] = out
                                if bar:
                                    bar.update(1)
                        if box:
                            box.clear()
                    if len(results) < len(ids):
                        self._step()
        finally:
            with self._lock:
                for rid in ids:                  # on an interrupt, free everything this call started
                    self._drop(rid)
            if bar:
                bar.close()
        return [results[r] for r in ids]
