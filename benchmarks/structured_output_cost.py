"""What a structured-output constraint costs per token: TPOT with and without a JSON schema, same process, same model.

    python benchmarks/structured_output_cost.py [--repeats 5] [--tokens 64] [--out benchmarks/results]

Both runs decode `--tokens` tokens from the same prompt at batch 1 (the constrained one cannot finish early: the
schema asks for more array items than fit). They alternate, `--repeats` times each; the report gives the median TPOT
of each, their ratio and min-max, and the time of the mask alone: the constrained run's tokens replayed through a fresh
matcher, timing GrammarMatcher.mask (llguidance's bitmask + the -inf fill) at every step.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minimal_engine import LLM, SamplingParams  # noqa: E402
from minimal_engine.sampling_params import StructuredOutputsParams  # noqa: E402

SCHEMA = {"type": "object", "properties": {"数": {"type": "array", "items": {"type": "integer", "minimum": 0,
                                                                           "maximum": 9}, "minItems": 200}},
          "required": ["数"], "additionalProperties": False}
PROMPT = "吾輩は猫である。"


def cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def run(llm, params) -> tuple[float, list[int]]:
    out = llm.generate([PROMPT], params, use_tqdm=False)[0]
    return out.metrics.tpot, out.token_ids


def mask_times(llm, so, tokens: list[int]) -> list[float]:
    matcher = llm.engine.grammars.matcher(so)
    row = torch.zeros(llm.model_config.vocab_size)
    times = []
    for t in tokens:
        start = time.perf_counter()
        matcher.mask(row)
        times.append(time.perf_counter() - start)
        matcher.accept(t)
    return times


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    llm = LLM()
    so = StructuredOutputsParams(json=SCHEMA)
    plain = SamplingParams(temperature=0, max_tokens=args.tokens, ignore_eos=True)
    constrained = SamplingParams(temperature=0, max_tokens=args.tokens, structured_outputs=so)
    run(llm, plain), run(llm, constrained)                      # warm-up
    tpot = {"plain": [], "json_schema": []}
    tokens = None
    for _ in range(args.repeats):
        tpot["plain"].append(run(llm, plain)[0])
        t, tokens = run(llm, constrained)
        tpot["json_schema"].append(t)
    masks = mask_times(llm, so, tokens)
    med = {k: statistics.median(v) * 1000 for k, v in tpot.items()}
    res = {"cpu": cpu_model(), "torch_capability": torch.backends.cpu.get_cpu_capability(),
           "threads": args.threads, "tokens": args.tokens, "repeats": args.repeats, "model": llm.model_name,
           "tpot_ms_median": med, "tpot_ms_min_max": {k: [min(v) * 1000, max(v) * 1000] for k, v in tpot.items()},
           "ratio_json_to_plain": med["json_schema"] / med["plain"],
           "mask_ms_median": statistics.median(masks) * 1000, "mask_ms_max": max(masks) * 1000,
           "constrained_text": llm.tokenizer.decode(tokens)[:80]}
    print(json.dumps(res, ensure_ascii=False, indent=1))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "structured_output_cost.json").write_text(json.dumps(res, ensure_ascii=False, indent=1) + "\n")
    return res


if __name__ == "__main__":
    main()
