"""CUDA graphs for decode steps: capture a step once per padded batch size, then replay it.

A decode step of a small model launches hundreds of small kernels (norms, RoPE, residual adds, one attention
and a few matmuls per layer); on a GPU each launch costs a few microseconds of CPU time, often more than the
kernel itself. A CUDA graph records the whole sequence of kernels once and replays it with one launch.

A graph replays fixed kernels on fixed memory, so a capturable step needs:
  * fixed shapes: the batch is padded up to one of a few captured sizes (1, 2, 4, 8, 16, 32, ...);
  * fixed addresses: the step's inputs live in static buffers that every step overwrites in place
    (token ids, positions, KV slots, block tables, context lengths);
  * padding rows that harm nothing: they write their K/V into a scratch slot that belongs to no request
    and have context length 0 (their attention output is 0 and their logits are ignored);
  * attention that does not depend on the contexts' lengths: it reads each request's blocks through a
    block table of fixed width (attention_paged.py), not a gather padded to the longest request.

`DecodeGraphs(capture=False)` runs exactly the same static-buffer path without capturing: that is how the
CPU tests check the padding and the buffers (a CPU has no graphs to capture).
"""
from __future__ import annotations

import torch

from minimal_engine.model.attention import ForwardBatch, PagedDecode

CAPTURE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def cuda_graphs_wanted(requested: bool | None, device: torch.device, kv_quantized: bool) -> bool:
    """Decode steps through DecodeGraphs' static buffers: as requested (None: on CUDA only), never
    with a one-byte KV pool (its gather-and-dequantize decode changes shapes every step)."""
    if kv_quantized:
        return False
    return torch.device(device).type == "cuda" if requested is None else bool(requested)


def decode_graphs(model, kv_caches, config, num_blocks: int, device) -> DecodeGraphs:
    """DecodeGraphs for a runner's pool: block tables as wide as max_model_len needs; the scratch
    block (past num_blocks) takes the padding rows' K/V. Captured on CUDA only."""
    bs = config.block_size
    max_len = config.max_model_len or num_blocks * bs
    return DecodeGraphs(model, kv_caches, config.max_num_seqs, min(-(-max_len // bs), num_blocks),
                        bs, scratch_slot=num_blocks * bs, device=device,
                        capture=torch.device(device).type == "cuda")


def decode_row(s, block_size: int) -> tuple:
    """(token, position, slot, block table, context length) of a one-token step (a ScheduledSeq)."""
    seq, pos, bs = s.seq, s.start, block_size
    slot = seq.block_table[pos // bs] * bs + pos % bs
    return seq.token_ids[pos], pos, slot, seq.block_table, pos + 1


def graph_batch_sizes(max_num_seqs: int) -> list[int]:
    """Batch sizes to capture: the powers of two below max_num_seqs, and max_num_seqs itself."""
    return [s for s in CAPTURE_SIZES if s < max_num_seqs] + [max_num_seqs]


def padded_batch_size(sizes: list[int], n: int) -> int | None:
    """The smallest captured size that holds n requests (None: more than the largest, run eagerly)."""
    return next((s for s in sizes if s >= n), None)


class DecodeGraphs:
    """Static buffers for decode steps and, on CUDA, one captured graph per padded batch size.

    rows given to run(): one (token, position, slot, block_table, context_len) per decoding request.
    """

    def __init__(self, model, kv_caches, max_num_seqs: int, max_blocks_per_seq: int, block_size: int,
                 scratch_slot: int, device: torch.device, capture: bool):
        self.model, self.kv_caches, self.block_size = model, kv_caches, block_size
        self.sizes = graph_batch_sizes(max_num_seqs)
        self.scratch_slot, self.capture = scratch_slot, capture
        b, dev = self.sizes[-1], device
        self.input_ids = torch.zeros(b, dtype=torch.long, device=dev)
        self.positions = torch.zeros(b, dtype=torch.long, device=dev)
        self.slots = torch.full((b,), scratch_slot, dtype=torch.long, device=dev)
        self.block_tables = torch.zeros(b, max_blocks_per_seq, dtype=torch.int32, device=dev)
        self.context_lens = torch.zeros(b, dtype=torch.int32, device=dev)
        self.logits_indices = torch.arange(b, device=dev)
        self.graphs: dict[int, tuple] = {}        # padded size -> (CUDAGraph, its static logits)
        self.pool = None                           # one memory pool shared by all the graphs

    def fits(self, n: int) -> bool:
        return padded_batch_size(self.sizes, n) is not None

    def fill(self, rows: list[tuple]) -> int:
        """Write the rows into the static buffers, pad up to a captured size; returns that size.
        Only the block-table columns in use are written: columns past a row's context are never read."""
        n = len(rows)
        b = padded_batch_size(self.sizes, n)
        pad = b - n
        tokens, positions, slots, tables, lens = zip(*rows)
        width = max(len(t) for t in tables)
        if width > self.block_tables.shape[1]:
            raise ValueError(f"a request has {width} blocks, more than the {self.block_tables.shape[1]} of a table")

        def put(buf, values):                      # one small host -> device copy per buffer
            buf[:b].copy_(torch.tensor(values, dtype=buf.dtype), non_blocking=True)

        put(self.input_ids, list(tokens) + [0] * pad)
        put(self.positions, list(positions) + [0] * pad)
        put(self.slots, list(slots) + [self.scratch_slot] * pad)      # padding rows write to the scratch slot
        put(self.context_lens, list(lens) + [0] * pad)                # ... and attend to nothing
        padded = [list(t) + [0] * (width - len(t)) for t in tables] + [[0] * width] * pad
        self.block_tables[:b, :width].copy_(torch.tensor(padded, dtype=torch.int32), non_blocking=True)
        return b

    def batch(self, b: int) -> tuple[torch.Tensor, ForwardBatch]:
        """Views of the first b rows of the static buffers, as the model's inputs."""
        fb = ForwardBatch(positions=self.positions[:b], slot_mapping=self.slots[:b], num_decodes=b,
                          decode=PagedDecode(self.block_tables[:b], self.context_lens[:b]), prefills=[],
                          logits_indices=self.logits_indices[:b], block_size=self.block_size)
        return self.input_ids[:b], fb

    def run(self, rows: list[tuple]) -> torch.Tensor:
        """Logits [len(rows), vocab] of one decode step: replay the graph of the padded size (capture it on
        first use), or with capture=False run the model eagerly on the same static buffers."""
        b = self.fill(rows)
        if not self.capture:
            ids, fb = self.batch(b)
            return self.model(ids, fb, self.kv_caches)[:len(rows)]
        if b not in self.graphs:
            self.graphs[b] = self._capture(b)
        graph, logits = self.graphs[b]
        graph.replay()
        return logits[:len(rows)]

    def _capture(self, b: int):
        ids, fb = self.batch(b)
        stream = torch.cuda.Stream()               # warm up on a side stream (as PyTorch's docs do): Triton
        stream.wait_stream(torch.cuda.current_stream())   # compiles, lazy buffers move to the GPU
        with torch.cuda.stream(stream):
            self.model(ids, fb, self.kv_caches)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            logits = self.model(ids, fb, self.kv_caches)   # the same K/V writes as the warm-up: harmless
        self.pool = graph.pool()
        return graph, logits
