"""Benchmark workloads: the requests a run sends, made once and replayed through every backend.

As InferenceX and vLLM's `random` dataset do: prompts of random token ids (so no prefix-cache hits), input
length uniform in [range_ratio x L, L], output length fixed or uniform in [output_range_ratio x O, O], always
generated in full (ignore_eos). Or prompts from a jsonl file with a "prompt" field (and optionally
"output_len"). The same BenchRequest list, with the same token ids and output lengths, goes to our engine,
to transformers' baselines and (as text) to an OpenAI-compatible server.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path


@dataclass
class BenchRequest:
    prompt_ids: list[int]
    output_len: int
    prompt_text: str | None = None     # for servers; decoded from prompt_ids when not given

    @property
    def input_len(self) -> int:
        return len(self.prompt_ids)


def uniform_lengths(num: int, length: int, range_ratio: float, rng: random.Random) -> list[int]:
    """num integers uniform in [max(1, round(range_ratio * length)), length]."""
    if not 0 < range_ratio <= 1:
        raise ValueError(f"range ratio must be in (0, 1], got {range_ratio}")
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    low = max(1, round(range_ratio * length))
    return [rng.randint(low, length) for _ in range(num)]


def random_requests(num: int, input_len: int, output_len: int, vocab_size: int, range_ratio: float = 1.0,
                    output_range_ratio: float | None = None, seed: int = 0, avoid_ids=()) -> list[BenchRequest]:
    """Random-token prompts. output_range_ratio defaults to range_ratio (as vLLM's random dataset)."""
    rng = random.Random(seed)
    ins = uniform_lengths(num, input_len, range_ratio, rng)
    outs = uniform_lengths(num, output_len, range_ratio if output_range_ratio is None else output_range_ratio, rng)
    avoid = set(avoid_ids)
    allowed = [t for t in range(vocab_size) if t not in avoid] if avoid else None
    reqs = []
    for n, o in zip(ins, outs):
        ids = [rng.choice(allowed) for _ in range(n)] if allowed else [rng.randrange(vocab_size) for _ in range(n)]
        reqs.append(BenchRequest(ids, o))
    return reqs


def dataset_requests(path: str | Path, num: int, tokenizer, output_len: int, output_range_ratio: float = 1.0,
                     seed: int = 0, max_input_len: int | None = None) -> list[BenchRequest]:
    """Prompts from a jsonl file ({"prompt": ..., "output_len": optional}), cycled up to num requests."""
    rows = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{i + 1} is not valid JSON: {e}") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"]:
            raise ValueError(f"{path}:{i + 1} needs a non-empty string field 'prompt'")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path} has no prompts")
    rng = random.Random(seed)
    outs = uniform_lengths(num, output_len, output_range_ratio, rng)
    reqs = []
    for i in range(num):
        row = rows[i % len(rows)]
        ids = tokenizer.encode(row["prompt"])[:max_input_len]
        reqs.append(BenchRequest(ids, int(row.get("output_len", outs[i])), row["prompt"]))
    return reqs


def prompt_inputs(requests: list[BenchRequest], tokenizer, endpoint: str = "/v1/completions") -> list:
    """What to send for each request: token ids where the endpoint takes them (/v1/completions, as vLLM's bench
    can), so a random prompt arrives at exactly its input_len (decoded text re-tokenizes to another count:
    --input-len 64 arrived as ~90 tokens); text for chat and for dataset prompts."""
    if endpoint.endswith("chat/completions"):
        return prompt_texts(requests, tokenizer)
    return [r.prompt_text if r.prompt_text is not None else list(r.prompt_ids) for r in requests]


def prompt_texts(requests: list[BenchRequest], tokenizer) -> list[str]:
    """Text for each request (servers take text): the dataset text, or the random ids decoded.
    A decoded random prompt re-tokenizes to a different count; servers report the real count in usage."""
    return [r.prompt_text if r.prompt_text is not None else tokenizer.decode(r.prompt_ids) for r in requests]
