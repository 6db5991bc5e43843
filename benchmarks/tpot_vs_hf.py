"""Batch-1 decode speed: this engine vs transformers `generate`, same weights, same process.

    python benchmarks/tpot_vs_hf.py [--shape llama-125m] [--prompt-len 128] [--new-tokens 128] [--repeats 3]

Both run the randomly initialised ~125M Llama shape of ../shared/COURSE.md in bfloat16 on the CPU with the
very same weights. TPOT = (E2EL - TTFT) / (tokens - 1) for both (vLLM's formula): transformers' token times
come from a streamer that timestamps every token as generate() emits it. Runs alternate and the median of
each is reported, with the ratio engine / transformers (< 1 means the engine is faster). The machine is
shared and noisy: trust the ratio more than the absolute numbers.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


class TimingStreamer:
    """transformers streamer that records when each generated token arrives."""

    def __init__(self):
        self.times, self.prompt_seen, self.start = [], False, time.perf_counter()

    def put(self, value):
        if not self.prompt_seen:          # the first put() is the prompt itself
            self.prompt_seen = True
            return
        self.times.append(time.perf_counter())

    def end(self):
        pass


def hf_tpot(model, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    ids = torch.tensor([prompt])
    streamer = TimingStreamer()
    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       do_sample=False, streamer=streamer, pad_token_id=0)
    t = streamer.times
    ttft = t[0] - streamer.start
    return ttft, (t[-1] - t[0]) / (len(t) - 1)


def engine_tpot(llm, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    from minimal_engine import SamplingParams
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True), use_tqdm=False)[0]
    return out.metrics.ttft, out.metrics.tpot


def main():
    from minimal_engine import LLM
    from minimal_engine.bench.hf_baselines import hf_model_for
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="llama-125m")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    llm = LLM(f"synthetic:{args.shape}", dtype="bfloat16", device="cpu", max_model_len=2048, max_num_seqs=8)
    hf = hf_model_for(llm)                       # transformers model with the very same weights
    prompt = torch.randint(0, llm.model_config.vocab_size, (args.prompt_len,)).tolist()
    engine_tpot(llm, prompt, 8), hf_tpot(hf, prompt, 8)                       # warm-up
    eng, ref = [], []
    for _ in range(args.repeats):
        eng.append(engine_tpot(llm, prompt, args.new_tokens))
        ref.append(hf_tpot(hf, prompt, args.new_tokens))
    e_ttft, e_tpot = (statistics.median(x) * 1000 for x in zip(*eng))
    h_ttft, h_tpot = (statistics.median(x) * 1000 for x in zip(*ref))
    print(f"shape {args.shape}, bf16, CPU threads {torch.get_num_threads()}, prompt {args.prompt_len}, "
          f"{args.new_tokens} new tokens, batch 1, median of {args.repeats}")
    print(f"{'':14s}{'TTFT ms':>10s}{'TPOT ms':>10s}")
    print(f"{'transformers':14s}{h_ttft:10.2f}{h_tpot:10.2f}")
    print(f"{'minimal_engine':14s}{e_ttft:10.2f}{e_tpot:10.2f}")
    print(f"TPOT ratio engine / transformers = {e_tpot / h_tpot:.2f}  ({'not slower' if e_tpot <= h_tpot else 'SLOWER'})")


if __name__ == "__main__":
    main()
