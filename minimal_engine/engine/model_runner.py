"""ModelRunner: owns the model and the KV pool; turns a SchedulerOutput into tensors, runs one
forward pass and samples the next tokens. It returns data (ModelRunnerOutput), changing no request.

The KV pool is allocated once: per layer K and V of [kv_heads, (num_blocks + 1) * block_size,
head_dim] (attention.py). The block past num_blocks takes CUDA-graph padding rows (cuda_graphs.py).
Decode attention is chosen once (config.attention_backend): "paged" reads each request's blocks in
place (attention_paged.py; CUDA, with CUDA graphs); "gathered" copies contexts out of the pool in
groups of similar length (attention.py; the CPU's faster path).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from minimal_engine.config import EngineConfig
from minimal_engine.engine.cuda_graphs import cuda_graphs_wanted, decode_graphs, decode_row
from minimal_engine.engine.kv_cache import calibrate_kv_scales, make_kv_caches
from minimal_engine.engine.logprobs import score_prompt, token_logprobs
from minimal_engine.engine.outputs import ModelRunnerOutput
from minimal_engine.engine.sampler import sample
from minimal_engine.engine.scheduler import SchedulerOutput
from minimal_engine.model.attention import ForwardBatch, PagedDecode, PrefillChunk
from minimal_engine.model.attention_paged import use_paged_decode
from minimal_engine.model.cpu_linears import describe_linears
from minimal_engine.model.custom_decode import CustomDecode
from minimal_engine.model.decode_groups import gathered_decode


@dataclass
class PreparedStep:
    """A step laid out as tensors: what ModelRunner.prepare hands to the model (and to run)."""

    input_ids: torch.Tensor          # [T] decode tokens first, then prefill chunks
    batch: ForwardBatch
    order: list                      # the ScheduledSeqs in row order
    prompt_rows: list                # (seq, first, row offset, last): prompt_logprobs rows


class ModelRunner:
    def __init__(self, model, config: EngineConfig, num_blocks: int, dtype: torch.dtype,
                 device: torch.device, speculator=None, decode_attention=None):
        """speculator: None, or verify(logits, steps) -> {request id: tokens or exception}
        (spec_decode/). decode_attention: None, or fn(q [H, Dh], k [L, KVH, Dh], v) -> [H, Dh] for
        every decode row (chapter 3's exercise). Either turns CUDA graphs off."""
        cfg = model.config
        self.model, self.config, self.device, self.dtype = model, config, device, dtype
        self.block_size, self.num_blocks = config.block_size, num_blocks
        slots = (num_blocks + 1) * config.block_size   # + the scratch block
        self.kv_quantized = config.kv_cache_dtype != "auto"
        if self.kv_quantized:                         # one byte per value (kv_cache.py)
            self.kv_caches = make_kv_caches(cfg, slots, config.kv_cache_dtype, dtype, device)
            calibrate_kv_scales(model, self.kv_caches, config.block_size)
        else:                                 # per layer (K, V), each [kv_heads, slots, head_dim]
            self.kv_caches = [tuple(torch.zeros(cfg.num_kv_heads, slots, cfg.head_dim, dtype=dtype,
                                                device=device) for _ in "kv")
                              for _ in range(cfg.num_layers)]
        self.decode_attention = decode_attention
        backend = config.attention_backend          # None: paged on CUDA, else gathered
        if backend is None:
            backend = "paged" if use_paged_decode(device, self.kv_quantized) else "gathered"
        if backend == "paged" and self.kv_quantized:
            raise ValueError("attention_backend 'paged' needs a KV pool in the model dtype "
                             "(kv_cache_dtype 'auto'): a one-byte pool is dequantized while "
                             "gathering")
        self.attention_backend = backend
        self.speculator = speculator
        self.set_cuda_graphs(False if speculator is not None or decode_attention is not None
                             else config.cuda_graphs)

    def set_cuda_graphs(self, enabled: bool | None) -> None:
        """None: CUDA graphs on CUDA, off elsewhere. True on the CPU: static buffers, uncaptured."""
        self.graphs = None
        if cuda_graphs_wanted(enabled, self.device, self.kv_quantized):
            self.graphs = decode_graphs(self.model, self.kv_caches, self.config, self.num_blocks,
                                        self.device)

    def describe_kernels(self) -> str:
        """One line: the Linear kernels this model takes here (model/cpu_linears.py)."""
        return describe_linears(self.model, self.dtype, self.device)

    @property
    def kv_cache_bytes(self) -> int:
        return sum(k.numel() * k.element_size() * 2 for k, _ in self.kv_caches)

    def prepare(self, out: SchedulerOutput) -> PreparedStep:
        """Lay out the step: decode tokens first, then prefill chunks; build positions and slots."""
        bs = self.block_size
        decodes = [s for s in out.scheduled if s.num_tokens == 1]
        prefills = [s for s in out.scheduled if s.num_tokens > 1]
        input_ids, positions, slots, logits_rows = [], [], [], []
        prompt_rows = []                 # (seq, first, ...): prompt_logprobs rows, after samplers'
        for s in decodes + prefills:
            seq, row0 = s.seq, len(input_ids)
            input_ids.extend(s.token_ids)
            for pos in range(s.start, s.start + s.num_tokens):
                positions.append(pos)
                slots.append(seq.block_table[pos // bs] * bs + pos % bs)
            if s.samples:   # the last row, and the rows before it that verify drafts (spec_decode/)
                logits_rows.extend(range(row0 + s.num_tokens - 1 - len(s.spec_token_ids),
                                         row0 + s.num_tokens))
            if seq.prompt_logprobs is not None:  # positions whose next token is an unscored one
                first = max(s.start, len(seq.prompt_logprobs) - 1)
                last = min(s.start + s.num_tokens, seq.num_prompt_tokens - 1)
                prompt_rows += [(seq, first, row0 - s.start, last)] if first < last else []
        dev = self.device

        def tensor(x):
            return torch.tensor(x, dtype=torch.long, device=dev)

        decode = None
        if decodes:
            tables = [s.seq.block_table for s in decodes]
            lens = [s.start + 1 for s in decodes]
            width = max(len(t) for t in tables)
            padded = [t + [0] * (width - len(t)) for t in tables]   # block 0: never read
            if self.decode_attention is not None:                # chapter 3's exercise
                decode = CustomDecode(self.decode_attention, tensor(padded), lens)
            elif self.attention_backend == "paged":              # in place (attention_paged.py)
                decode = PagedDecode(torch.tensor(padded, dtype=torch.int32, device=dev),
                                     torch.tensor(lens, dtype=torch.int32, device=dev))
            else:                                                # groups of similar length
                cfg = self.model.config
                decode = gathered_decode(tables, lens, bs, cfg.num_heads > cfg.num_kv_heads, dev)
        chunks, row = [], len(decodes)
        for s in prefills:
            cached = tensor([s.seq.block_table]) if s.start > 0 else None   # covers this step
            chunks.append(PrefillChunk(row, row + s.num_tokens, s.start + s.num_tokens, cached))
            row += s.num_tokens
        logits_rows += [r + p for _, first, r, last in prompt_rows for p in range(first, last)]
        batch = ForwardBatch(positions=tensor(positions), slot_mapping=tensor(slots),
                             num_decodes=len(decodes), decode=decode, prefills=chunks,
                             logits_indices=tensor(logits_rows), block_size=bs)
        return PreparedStep(tensor(input_ids), batch, decodes + prefills, prompt_rows)

    @torch.inference_mode()
    def run(self, out: SchedulerOutput) -> ModelRunnerOutput:
        """One forward pass; the tokens of the requests that sample this step (one each, or what the
        speculator verified), their logprobs, the prompt logprobs scored, and per-request errors."""
        steps = out.scheduled
        scoring = any(s.seq.prompt_logprobs is not None and s.start < s.seq.num_prompt_tokens - 1
                      for s in steps)
        if (self.graphs is not None and all(s.num_tokens == 1 for s in steps)
                and self.graphs.fits(len(steps)) and not scoring):
            logits = self.graphs.run([decode_row(s, self.block_size) for s in steps])
            logits = logits[[i for i, s in enumerate(steps) if s.samples]]
            order, prompt_rows = steps, []
        else:
            step = self.prepare(out)
            order, prompt_rows = step.order, step.prompt_rows
            logits = self.model(step.input_ids, step.batch, self.kv_caches)
        sampling = [s for s in order if s.samples]
        rows = sum(1 + len(s.spec_token_ids) for s in sampling)   # then the prompt-logprob rows
        prompt_lps, logits, logprobs = score_prompt(logits[rows:], prompt_rows), logits[:rows], {}
        if self.speculator is not None:      # {request id: [accepted drafts..., one more]}
            tokens = self.speculator.verify(logits, sampling)
        else:
            seqs = [s.seq for s in sampling]
            sampled = sample(logits, [q.params for q in seqs], [q.generator for q in seqs], seqs)
            tokens = {q.request_id: t if isinstance(t, Exception) else [t]
                      for q, t in zip(seqs, sampled)}
            for row, q, t in zip(logits, seqs, sampled):   # of the raw logits (logprobs.py)
                if q.params.logprobs is not None and not isinstance(t, Exception):
                    lps = row.float().log_softmax(-1)
                    logprobs[q.request_id] = [token_logprobs(lps, t, q.params.logprobs)]
        errors = {rid: f"sampling failed: {type(t).__name__}: {t}"   # this request alone fails
                  for rid, t in tokens.items() if isinstance(t, Exception)}
        return ModelRunnerOutput({rid: t for rid, t in tokens.items() if rid not in errors}, errors,
                                 logprobs, prompt_lps)
