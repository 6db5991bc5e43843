"""Chapter 8: what one draft-model step costs against the target's decode step, for a few draft shapes, before any
training (untrained weights cost the same time as trained ones): how the draft model's size was chosen.

    PYTHONPATH=. python3 benchmarks/draft_shapes.py --threads 2 --rounds 2

Each shape is written as an HF folder (random weights, the default model's tokenizer) in a temporary directory and
loaded as the draft of `LLM(speculative_config={"method": "draft_model", "model": ...})`; its step is one
`DraftProposer.forward` of one token after a 32-token prompt (median of 40), the target's step is
`decode_step_time` at batch 1 (median of 20). c = draft step / target step, the cost in chapter 8's formula.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.bench.offline import decode_step_time
from minimal_engine.engine.sequence import Sequence
from minimal_engine.tools.train_model import make_model

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "minimal_engine" / "default_model"
SHAPES = {"d128 x 2 layers": (128, 2, 2, 384), "d320 x 1 layer": (320, 1, 5, 864), "d320 x 2 layers": (320, 2, 5, 864),
          "d256 x 1 layer": (256, 1, 4, 768), "d192 x 1 layer": (192, 1, 3, 512)}


def draft_step_ms(path: Path, prompt_len: int = 32, steps: int = 40) -> float:
    llm = LLM(None, max_num_seqs=1, kv_cache_memory=64 << 20,
              speculative_config={"method": "draft_model", "model": str(path), "num_speculative_tokens": 1})
    draft = llm.engine.speculator.draft
    ids = list(range(1, prompt_len + steps + 1))
    seq = Sequence("cost", None, ids[:prompt_len], SamplingParams(temperature=0))
    draft.bm.allocate(seq, len(ids))
    times = []
    with torch.inference_mode():
        draft.forward([(seq, 0, prompt_len)])
        for i in range(steps):
            seq.token_ids = ids[:prompt_len + i + 1]
            t = time.perf_counter()
            draft.forward([(seq, prompt_len + i, 1)])
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    target = LLM(None, max_num_seqs=1, kv_cache_memory=64 << 20)
    with tempfile.TemporaryDirectory() as tmp:
        folders = {}
        for name, (d, layers, heads, ff) in SHAPES.items():
            out = Path(tmp) / name.replace(" ", "_")
            make_model(8192, d, layers, heads, ff, 512, 0).save_pretrained(out)
            for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
                shutil.copy(DEFAULT_MODEL / f, out)
            folders[name] = out
        for r in range(a.rounds):
            t_target = decode_step_time(target, 1, 32, num_steps=20)["median_step_ms"]
            for name, path in folders.items():
                ms = draft_step_ms(path)
                print(f"round {r}: {name:16s} draft {ms:.2f} ms, target {t_target:.2f} ms, c = {ms / t_target:.2f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
