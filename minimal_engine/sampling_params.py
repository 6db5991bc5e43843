"""SamplingParams: how to pick each next token and when to stop (vLLM's names and meanings)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SamplingParams:
    temperature: float = 1.0          # 0 = greedy (argmax)
    top_k: int = -1                   # -1 = all tokens; otherwise keep the k most likely
    top_p: float = 1.0                # keep the smallest set whose probability reaches top_p
    max_tokens: int = 16              # at most this many new tokens
    seed: int | None = None           # per-request seed: same seed, same tokens
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False          # benchmarks: always generate max_tokens
    skip_special_tokens: bool = True

    def __post_init__(self):
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 means greedy), got {self.temperature!r}")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or (self.top_k < 1 and self.top_k != -1):
            raise ValueError(f"top_k must be -1 (disabled) or an integer >= 1, got {self.top_k!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")
        self.stop_token_ids = list(self.stop_token_ids or [])

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
