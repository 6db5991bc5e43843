"""The prefill side of DisaggregatedLLM (chapter 9): the child process that runs a prefill-only engine.

Commands ("add", "abort", "stats", "close") arrive on a control pipe; each finished prefill's KV blocks and
first token leave through the KV connector before the engine frees the blocks (a finish listener).
"""
from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from dataclasses import replace

import torch

from minimal_engine.disagg.kv_connector import PipeKVConnector, extract_kv_blocks
from minimal_engine.llm import LLM

IDLE_POLL_S = 0.2            # how long an idle side waits for a message before checking the other is alive


def prefill_main(model, llm_kwargs: dict, threads: int, control, kv_end) -> None:
    """The child process: a prefill-only engine. Commands arrive on `control`; KV leaves through `kv_end`."""
    connector = PipeKVConnector(kv_end)
    parent = mp.parent_process()
    try:
        torch.set_num_threads(threads)
        engine = LLM(model, **llm_kwargs).engine

        def hand_off(seq) -> None:          # a finish listener: the request's blocks are still held here
            start = time.perf_counter()
            kv = extract_kv_blocks(engine.runner, seq.block_table)
            gen = seq.generator.get_state() if seq.params.seed is not None else None
            connector.send_kv(seq.request_id, kv, {
                "first_token": seq.token_ids[-1], "num_computed": seq.num_computed_tokens, "extract_start": start,
                "first_scheduled_time": seq.metrics.first_scheduled_time, "prefill_done": seq.metrics.token_times[-1],
                "generator_state": gen})

        engine.add_finish_listener(hand_off)
        control.send(("ready", engine.block_manager.num_blocks))
        while True:
            busy = engine.has_unfinished_requests()
            if control.poll(0 if busy else IDLE_POLL_S):
                cmd, *args = control.recv()
                if cmd == "add":
                    rid, ids, params, arrival = args
                    one = replace(params, max_tokens=1, min_tokens=min(params.min_tokens, 1))
                    engine.add_request(ids, one, rid, arrival)
                elif cmd == "abort":
                    engine.abort_request(args[0])
                elif cmd == "stats":
                    control.send(("stats", {"num_blocks": engine.block_manager.num_blocks,
                                            "free_blocks": engine.block_manager.num_free_blocks,
                                            "unfinished": engine.has_unfinished_requests()}))
                elif cmd == "close":
                    return
            elif busy:
                for out in engine.step():
                    if out.finish_reason == "error":
                        raise RuntimeError(f"request {out.request_id} failed in the prefill engine: {out.error}")
            elif parent is not None and not parent.is_alive():
                return                                       # the parent died: nobody to serve
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return                                               # the parent closed its ends
    except BaseException:
        try:
            connector.send_error(traceback.format_exc())
            control.send(("error", traceback.format_exc()))
        except OSError:
            pass
