"""KV connector: how a request's KV blocks travel from a prefill engine to a decode engine (chapter 9).

Disaggregated serving (disagg/llm.py) runs prefill and decode on different engines. After the prefill engine has
computed a prompt, the K and V of every layer for that prompt sit in its paged KV pool; the decode engine needs
them in *its* pool, in blocks it allocated itself. Three steps, each a small function here:

    extract_kv_blocks(runner, block_table)      prefill side: gather the request's blocks out of the pool
    connector.send_kv(request_id, kv, meta)     the transport (this file's KVConnector)
    inject_kv_blocks(runner, block_table, kv)   decode side: scatter them into the blocks it allocated

The payload is whole blocks (as vLLM and NIXL move them), all layers, K and V:
    kv: [layers, 2, kv_heads, num_blocks, block_size, head_dim]
so a request of n prompt tokens moves ceil(n / block_size) x block_size x (KV bytes per token) bytes
(``minimal_engine.calculators.transfer.kv_transfer_bytes``; the link arithmetic is there too, plain Python).

`KVConnector` is the interface; `PipeKVConnector` is the one transport built here: a multiprocessing pipe
between two processes on one machine (the tensor's raw bytes, no pickling of the data). Real systems plug other
transports in at exactly this place: vLLM's KVConnector API (`NixlConnector` over NIXL/UCX with RDMA,
`P2pNcclConnector`, `LMCacheConnectorV1`, `MooncakeConnector`, `MooncakeStoreConnector`) moves the same blocks,
each its own way: NIXL and P2pNccl GPU-to-GPU over NVLink or InfiniBand without the CPU; LMCache through CPU
memory, disk or a remote store; `MooncakeConnector` point to point with Mooncake's Transfer Engine (RDMA by
default): the decode side sends the addresses of the blocks it allocated, the prefill side writes its blocks
there (`batch_transfer_sync_write`) and frees them only after; the DRAM/SSD pool is `MooncakeStoreConnector`
(MooncakeDistributedStore). Sources, read 2026-12-07: vllm/distributed/kv_transfer/kv_connector/v1/
mooncake_connector.py at vllm-project/vllm commit 009d7c7601cad032a0a2158e5a66455f4afb1f14, and
https://docs.vllm.ai/en/latest/features/mooncake_store_connector_usage/ ("Unlike MooncakeConnector which does
direct point-to-point KV transfer between prefiller and decoder, ..."). vLLM splits the interface into a
scheduler side (`request_finished`, which may delay freeing the blocks until they are sent) and a worker side
(`save_kv_layer`, `wait_for_layer_load`: per-layer hooks that let a connector overlap the transfer with the
forward pass, which NIXL's and Mooncake's leave empty; `start_load_kv`, which in both starts the asynchronous block
transfer); here one call moves all layers at once.
"""
from __future__ import annotations

import time

import torch

# ---------------------------------------------------------------- the pool <-> a payload tensor
def _blocked(cache: torch.Tensor, block_size: int) -> torch.Tensor:
    """[kv_heads, slots, head_dim] -> a view [kv_heads, blocks, block_size, head_dim]."""
    h, slots, d = cache.shape
    return cache.view(h, slots // block_size, block_size, d)


def extract_kv_blocks(runner, block_table: list[int]) -> torch.Tensor:
    """Copy a request's blocks out of the pool: [layers, 2, kv_heads, len(block_table), block_size, head_dim]."""
    idx = torch.tensor(block_table, dtype=torch.long, device=runner.device)
    bs = runner.block_size
    return torch.stack([torch.stack([_blocked(k, bs)[:, idx], _blocked(v, bs)[:, idx]])
                        for k, v in runner.kv_caches])


def inject_kv_blocks(runner, block_table: list[int], kv: torch.Tensor) -> None:
    """Write received blocks into this engine's pool, at the blocks it allocated (same order)."""
    layers, two, heads, nb, bs, d = kv.shape
    k0 = runner.kv_caches[0][0]
    if (layers, heads, bs, d) != (len(runner.kv_caches), k0.shape[0], runner.block_size, k0.shape[2]) \
            or nb != len(block_table):
        raise ValueError(f"KV payload of shape {tuple(kv.shape)} does not fit this engine's pool "
                         f"({len(runner.kv_caches)} layers, {k0.shape[0]} KV heads, block size {runner.block_size}, "
                         f"head dim {k0.shape[2]}) and {len(block_table)} blocks")
    idx = torch.tensor(block_table, dtype=torch.long, device=runner.device)
    kv = kv.to(device=runner.device, dtype=k0.dtype)
    for (k, v), src in zip(runner.kv_caches, kv):
        _blocked(k, bs)[:, idx] = src[0]
        _blocked(v, bs)[:, idx] = src[1]


# ---------------------------------------------------------------- the transport
class KVConnector:
    """Moves (request id, KV blocks, metadata) from a producer (prefill) to a consumer (decode).

    send_kv: producer side, returns the bytes sent. recv_kv: consumer side, waits at most `timeout` seconds and
    returns (request_id, kv, meta) or None. meta is a small picklable dict (the first token, timings).
    A NIXL, Mooncake or NCCL transport would implement these two methods (and usually move GPU memory directly).
    """

    def send_kv(self, request_id: str, kv: torch.Tensor, meta: dict) -> int:
        raise NotImplementedError

    def recv_kv(self, timeout: float | None = None):
        raise NotImplementedError

    def close(self) -> None:
        pass


_DTYPES = {str(t): t for t in (torch.float32, torch.bfloat16, torch.float16)}


class PipeKVConnector(KVConnector):
    """One end of a multiprocessing pipe: metadata pickled, the tensor as raw bytes (one copy, no pickle).

    Both processes hold a PipeKVConnector over the two ends of one `multiprocessing.Pipe(duplex=False)`;
    time.perf_counter is the system's monotonic clock, so timestamps compare across the two processes."""

    def __init__(self, conn):
        self.conn = conn

    def send_kv(self, request_id: str, kv: torch.Tensor, meta: dict) -> int:
        data = kv.detach().to("cpu").contiguous()
        raw = data.view(-1).view(torch.uint8).numpy()      # 1-D: the bytes of the tensor, no copy
        head = dict(meta, request_id=request_id, shape=tuple(data.shape), dtype=str(data.dtype),
                    nbytes=raw.nbytes, sent_at=time.perf_counter())
        self.conn.send(("kv", head))
        self.conn.send_bytes(raw)
        return raw.nbytes

    def recv_kv(self, timeout: float | None = None):
        if not self.conn.poll(timeout):
            return None
        kind, head = self.conn.recv()
        if kind != "kv":
            raise RuntimeError(f"the prefill engine reported: {head}")
        buf = bytearray(self.conn.recv_bytes())        # writable, so torch.frombuffer owns no read-only memory
        kv = torch.frombuffer(buf, dtype=torch.uint8).view(_DTYPES[head["dtype"]]).view(head["shape"])
        head["recv_done"] = time.perf_counter()
        return head.pop("request_id"), kv, head

    def send_error(self, message: str) -> None:
        self.conn.send(("error", message))

    def close(self) -> None:
        self.conn.close()


def receive_loop(connector: KVConnector, inbox, poll_s: float = 0.2) -> None:
    """A receiver thread on the consumer side: reads hand-offs as soon as they arrive (the prefill side never waits for a
    decode step to end), and puts (request id, kv, meta), or ("error", message) at the end, into `inbox`."""
    while True:
        try:
            item = connector.recv_kv(poll_s)
        except (EOFError, OSError, TypeError):
            inbox.put(("error", None, "the prefill engine's pipe closed"))
            return
        except RuntimeError as e:
            inbox.put(("error", None, str(e)))
            return
        if item is not None:
            inbox.put(item)


def transfer_summary(outputs) -> dict:
    """Per-request KV hand-off of finished outputs: mean bytes, mean and max transfer time (ms), GB/s."""
    ms = [o.metrics for o in outputs if getattr(o.metrics, "kv_transfer_bytes", 0)]
    if not ms:
        return {"requests": 0, "mean_bytes": 0.0, "mean_ms": float("nan"), "max_ms": float("nan"), "gb_s": float("nan")}
    total_b, total_s = sum(m.kv_transfer_bytes for m in ms), sum(m.kv_transfer_s for m in ms)
    return {"requests": len(ms), "mean_bytes": total_b / len(ms), "mean_ms": 1e3 * total_s / len(ms),
            "max_ms": 1e3 * max(m.kv_transfer_s for m in ms), "gb_s": total_b / total_s / 1e9 if total_s else float("nan")}


__all__ = ["KVConnector", "PipeKVConnector", "extract_kv_blocks", "inject_kv_blocks", "receive_loop", "transfer_summary"]
