"""ModelRunner: owns the model and the KV pool; turns a SchedulerOutput into tensors, runs one forward
pass and samples the next tokens.

The KV pool is allocated once: for each layer a K and a V tensor of [kv_heads, (num_blocks + 1) * block_size,
head_dim] (layout: attention.py). Each step only writes into it; nothing grows. The one block past num_blocks
belongs to no request: padding rows of a CUDA-graph step write their K/V there (cuda_graphs.py).

Decode attention is chosen once, when the runner is built (`attention_backend`): "paged" reads each request's
blocks in place through block tables (attention_paged.py; the CUDA default, and decode-only steps replay CUDA
graphs: `cuda_graphs` None = on for CUDA, off elsewhere, True on the CPU runs the same static-buffer path
without capturing, for tests); "gathered" copies the contexts out of the pool in groups of similar length
(attention.py; the CPU default, the faster option there).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from minimal_engine.model.attention import (CustomDecode, ForwardBatch, PagedDecode, PrefillChunk,
                                            gathered_decode)
from minimal_engine.model.attention_paged import use_paged_decode
from minimal_engine.config import EngineConfig
from minimal_engine.model.cpu_linears import use_cpu_linears
from minimal_engine.engine.cuda_graphs import DecodeGraphs
from minimal_engine.engine.kv_cache import calibrate_kv_scales, make_kv_caches
from minimal_engine.engine.logprobs import token_logprobs
from minimal_engine.engine.outputs import ModelRunnerOutput
from minimal_engine.engine.sampler import sample
from minimal_engine.engine.scheduler import ScheduledSeq, SchedulerOutput

def cuda_graphs_wanted(requested: bool | None, device: torch.device, kv_quantized: bool) -> bool:
    """Decode steps through DecodeGraphs' static buffers: as requested (None: on CUDA, off elsewhere), never with
    a one-byte KV pool (its gather-and-dequantize decode path has shapes that change every step)."""
    if kv_quantized:
        return False
    return torch.device(device).type == "cuda" if requested is None else bool(requested)


def score_prompt(logits: torch.Tensor, rows: list) -> dict[str, list]:
    """Logprobs of the prompt tokens that rows (after the samplers' rows) predict, by request id."""
    out, i = {}, 0
    for seq, first, _, last in rows:
        lps = logits[i:i + last - first].float().log_softmax(-1)
        out[seq.request_id] = [token_logprobs(lps[j], seq.token_ids[pos + 1], seq.params.prompt_logprobs)
                               for j, pos in enumerate(range(first, last))]
        i += last - first
    return out


@dataclass
class PreparedStep:
    """A step laid out as tensors: what ModelRunner.prepare hands to the model (and to run)."""

    input_ids: torch.Tensor          # [T] decode tokens first, then prefill chunks
    batch: ForwardBatch
    order: list                      # the ScheduledSeqs in row order
    prompt_rows: list                # (seq, first, row offset, last): prompt_logprobs rows, after the samplers'


class ModelRunner:
    def __init__(self, model, config: EngineConfig, num_blocks: int, dtype: torch.dtype, device: torch.device,
                 speculator=None, decode_attention=None):
        """speculator: None, or speculative decoding's verify(logits, steps) -> {request id: tokens or
        exception} (features/spec_decode/). It turns CUDA graphs off (its steps carry draft rows).
        decode_attention: None, or fn(q [H, Dh], k [L, KVH, Dh], v [L, KVH, Dh]) -> [H, Dh] used for every decode
        row (chapter 3's exercise: attention.py's CustomDecode; no paged kernel, no CUDA graphs).
        config.attention_backend: "paged" or "gathered" for the decode rows; None: paged on CUDA (and under
        Triton's interpreter), gathered elsewhere and for a one-byte KV pool (attention_paged.use_paged_decode)."""
        cfg = model.config
        self.model, self.config, self.device, self.dtype = model, config, device, dtype
        self.block_size = config.block_size
        self.cpu_kernels = use_cpu_linears(model)       # CPU: kernels probed on this CPU (model/cpu_linears.py)
        self.num_blocks = num_blocks
        self.pool_blocks = num_blocks + 1              # + the scratch block (no request ever owns it)
        slots = self.pool_blocks * config.block_size
        self.kv_caches = [   # per layer (K, V), each [kv_heads, slots, head_dim]: see attention.py
            (torch.zeros(cfg.num_kv_heads, slots, cfg.head_dim, dtype=dtype, device=device),
             torch.zeros(cfg.num_kv_heads, slots, cfg.head_dim, dtype=dtype, device=device))
            for _ in range(cfg.num_layers)] if config.kv_cache_dtype == "auto" else \
            make_kv_caches(cfg, slots, config.kv_cache_dtype, dtype, device)   # one byte per value (kv_cache.py)
        self.kv_quantized = config.kv_cache_dtype != "auto"
        if self.kv_quantized:
            calibrate_kv_scales(model, self.kv_caches, config.block_size)
        self.decode_attention = decode_attention
        attention_backend = config.attention_backend
        if attention_backend is None:
            attention_backend = "paged" if use_paged_decode(device, self.kv_quantized) else "gathered"
        if attention_backend == "paged" and self.kv_quantized:
            raise ValueError("attention_backend 'paged' needs a KV pool in the model dtype (kv_cache_dtype "
                             "'auto'): a one-byte pool is dequantized while gathering")
        self.attention_backend = attention_backend
        self.speculator = speculator
        self.set_cuda_graphs(False if speculator is not None or decode_attention is not None
                             else config.cuda_graphs)

    def set_cuda_graphs(self, enabled: bool | None) -> None:
        """None: CUDA graphs on CUDA, off elsewhere. True on the CPU: the static-buffer path, not captured."""
        enabled = cuda_graphs_wanted(enabled, self.device, self.kv_quantized)
        self.graphs = None
        if enabled:
            bs = self.block_size
            max_len = self.config.max_model_len or self.num_blocks * bs
            self.graphs = DecodeGraphs(self.model, self.kv_caches, self.config.max_num_seqs,
                                       min(-(-max_len // bs), self.num_blocks), bs,
                                       scratch_slot=self.num_blocks * bs, device=self.device,
                                       capture=self.device.type == "cuda")

    def describe_kernels(self) -> str:
        """One line: the Linear kernels this model takes here (the bench and the labs print it next to figures)."""
        if self.cpu_kernels is not None:
            return self.cpu_kernels.describe()
        int8 = next((m for m in self.model.modules() if hasattr(m, "use_int8pack")), None)   # quantization.py
        if int8 is not None:
            kernel = "_weight_int8pack_mm for short steps" if int8.use_int8pack else "dequantize+matmul"
            where = f"CPU {torch.backends.cpu.get_cpu_capability()}" if self.device.type == "cpu" else str(self.device)
            return f"int8 weights: {kernel} ({where})"
        return f"{str(self.dtype).removeprefix('torch.')}: plain ({self.device})"

    @property
    def kv_cache_bytes(self) -> int:
        return sum(k.numel() * k.element_size() * 2 for k, _ in self.kv_caches)

    def decode_row(self, s) -> tuple:
        """(token, position, slot, block table, context length) of a one-token step of a request."""
        seq, pos, bs = s.seq, s.start, self.block_size
        return seq.token_ids[pos], pos, seq.block_table[pos // bs] * bs + pos % bs, seq.block_table, pos + 1

    def prepare(self, out: SchedulerOutput) -> PreparedStep:
        """Lay out the step: decode tokens first, then prefill chunks; build positions and slots."""
        bs = self.block_size
        decodes = [s for s in out.scheduled if s.num_tokens == 1]
        prefills = [s for s in out.scheduled if s.num_tokens > 1]
        input_ids, positions, slots, logits_rows = [], [], [], []
        prompt_rows = []                        # (seq, first position, ...): prompt_logprobs rows, after the samplers'
        for s in decodes + prefills:
            seq, row0 = s.seq, len(input_ids)
            input_ids.extend(s.token_ids)
            for pos in range(s.start, s.start + s.num_tokens):
                positions.append(pos)
                slots.append(seq.block_table[pos // bs] * bs + pos % bs)
            if s.samples:   # the last row, and the rows before it that verify drafts (spec_decode/)
                logits_rows.extend(range(row0 + s.num_tokens - 1 - len(s.spec_token_ids),
                                         row0 + s.num_tokens))
            if seq.prompt_logprobs is not None:  # positions whose next token is a prompt token not yet scored
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
            padded = [t + [0] * (width - len(t)) for t in tables]          # block 0: never read past a context
            if self.decode_attention is not None:                       # chapter 3's exercise
                decode = CustomDecode(self.decode_attention, tensor(padded), lens)
            elif self.attention_backend == "paged":                     # in place (attention_paged.py)
                decode = PagedDecode(torch.tensor(padded, dtype=torch.int32, device=dev),
                                     torch.tensor(lens, dtype=torch.int32, device=dev))
            else:                                                       # groups of similar length
                cfg = self.model.config
                decode = gathered_decode(tables, lens, bs, cfg.num_heads > cfg.num_kv_heads, dev)
        chunks, row = [], len(decodes)
        for s in prefills:
            cached = tensor([s.seq.block_table]) if s.start > 0 else None   # the table covers this step
            chunks.append(PrefillChunk(row, row + s.num_tokens, s.start + s.num_tokens, cached))
            row += s.num_tokens
        logits_rows += [r + p for _, first, r, last in prompt_rows for p in range(first, last)]
        batch = ForwardBatch(positions=tensor(positions), slot_mapping=tensor(slots), num_decodes=len(decodes),
                             decode=decode, prefills=chunks, logits_indices=tensor(logits_rows), block_size=bs)
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
            logits = self.graphs.run([self.decode_row(s) for s in steps])   # one row per request
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
            tokens = {q.request_id: t if isinstance(t, Exception) else [t] for q, t in zip(seqs, sampled)}
            for row, q, t in zip(logits, seqs, sampled):   # logprobs of the raw logits (logprobs.py)
                if q.params.logprobs is not None and not isinstance(t, Exception):
                    lps = row.float().log_softmax(-1)
                    logprobs[q.request_id] = [token_logprobs(lps, t, q.params.logprobs)]
        errors = {rid: f"sampling failed: {type(t).__name__}: {t}"   # this request alone fails
                  for rid, t in tokens.items() if isinstance(t, Exception)}
        return ModelRunnerOutput({rid: t for rid, t in tokens.items() if rid not in errors}, errors,
                                 logprobs, prompt_lps)
