"""A tensor-parallel worker process (ranks 1..N-1; rank 0 is the engine's own process, model.py).

    build the full model -> "loaded" -> join the process group -> keep this rank's shard (sharding.py)
    -> allocate a KV pool for its own KV heads -> "ready" -> loop: receive a step, run the forward pass

The worker has no scheduler and no sampler: the step's token ids and ForwardBatch come from rank 0 through
a pipe, and the forward pass meets the other ranks at the all-reduces. It exits when told to ("stop"), when
the pipe closes or its parent pid changes (the parent died), and after any error, which it first reports
through the pipe (rank 0 then raises it instead of waiting).
"""
from __future__ import annotations

import os
import pickle
import traceback


def _build(spec: tuple, dtype, device):
    """The same full model as rank 0: spec is ("synthetic", name, seed) or ("path", folder)."""
    if spec[0] == "synthetic":
        from minimal_engine.model.synthetic import build_synthetic
        return build_synthetic(spec[1], dtype, device, spec[2])[1]
    from minimal_engine.config import ModelConfig
    from minimal_engine.model.loader import load_model
    return load_model(spec[1], ModelConfig.from_folder(spec[1]), dtype, device)


def _send(conn, kind: str, payload) -> None:
    try:
        conn.send_bytes(pickle.dumps((kind, payload)))
    except (OSError, ValueError):                  # the parent is gone: nobody to tell
        pass


def worker_main(rank: int, world: int, port: int, spec: tuple, dtype, device_type: str, config, num_blocks: int,
                threads: int, conn, parent_pid: int, timeout_s: float) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    from minimal_engine.features.tensor_parallel.comm import Comm, batch_to, make_process_group
    from minimal_engine.engine.model_runner import ModelRunner
    from minimal_engine.features.tensor_parallel.sharding import shard_model
    from minimal_engine.model.cpu_linears import use_cpu_linears
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is rank 0's to handle; it then stops the workers
    torch.set_num_threads(threads)
    try:
        device = torch.device("cuda", rank) if device_type == "cuda" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        net = _build(spec, dtype, device)
        _send(conn, "loaded", rank)
        store = dist.TCPStore("127.0.0.1", port, world, False, timeout=datetime.timedelta(seconds=timeout_s))
        comm = Comm(make_process_group(store, rank, world, device, timeout_s))
        net = shard_model(net, rank, world, comm)
        use_cpu_linears(net)                       # CPU: this rank's Linear kernels
        runner = ModelRunner(net, config, num_blocks, dtype, device)   # KV pool: this rank's KV heads only
        _send(conn, "ready", torch.get_num_threads())
    except BaseException:
        _send(conn, "error", f"worker rank {rank} (pid {os.getpid()}) failed to start:\n{traceback.format_exc()}")
        return
    fail_next = False
    while True:
        try:
            if not conn.poll(1.0):
                if os.getppid() != parent_pid:     # the parent died (we were re-parented)
                    return
                continue
            kind, payload = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):                # the parent's end closed
            return
        if kind == "stop":
            return
        if kind == "fail":
            fail_next = True
            continue
        if kind == "trace":                        # payload True: start recording; False: stop and send them
            if payload:
                comm.start_trace()
            else:
                _send(conn, "trace", comm.stop_trace())
            continue
        try:
            input_ids, batch = payload
            if fail_next:
                raise RuntimeError("injected failure (TensorParallelModel.inject_failure, for tests)")
            batch = batch_to(batch, device)
            with torch.inference_mode():
                net(input_ids.to(device), batch, runner.kv_caches)
        except BaseException:
            _send(conn, "error", f"worker rank {rank} (pid {os.getpid()}) failed in a step:\n"
                                 f"{traceback.format_exc()}")
            conn.close()
            os._exit(1)                            # leave at once: rank 0's all-reduce sees the socket close
