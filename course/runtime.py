"""Loaded models and devices, shared by the labs: one place that loads a model once and keeps it.

    llm = get_llm("default", "cpu")          # the shipped model; "synthetic:llama-125m" etc. for real shapes
    available_devices()                      # ["cpu"] plus "cuda" / "mps" where present

Every lab's menus offer ``MODEL_CHOICES`` and ``available_devices()``; ``check_model`` / ``check_device``
refuse anything else with a message in Japanese and English.

The one LLM cache (every lab's engines, not only ``get_llm``'s): ``cached_llm(key, make)`` returns the
engine stored under ``key`` or stores ``make()``; it keeps the ``LLM_CACHE_SIZE`` most recently used ones
and closes (``close()``) the ones it drops, so switching a lab's menus back and forth does not reload weights
and a session never piles up engines. Two bounds: ``LLM_CACHE_SIZE`` engines, the most one lab run uses at
once (chapter 5: the base model, two batching engines, transformers' model), so a run never loses an engine it
holds; and ``LLM_CACHE_BYTES`` of weights and KV pools (an 8 GB laptop): a large synthetic shape is kept
alone. ``clear_llm_cache(tag)`` closes one lab's engines (or all).
``COURSE_MODEL=/path/to/model`` replaces the default model (for instructors); ``COURSE_QUICK=1`` (set by
``make test``) asks the labs for smaller experiments.

Thread policy (the one place): ``COURSE_THREADS`` (default ``max(1, os.cpu_count() // 2)``) is the number
of PyTorch threads a course kernel uses; ``apply_thread_policy()`` sets it with ``torch.set_num_threads``
when the lab kit is imported and before every measurement (a lab's thread control passes its own value).
PyTorch's own default takes every core, and two kernels measuring at once then wreck each other's
numbers (runs 20x slower, the sweep's order lost); half the cores each keeps two open notebooks sensible.
"""
from __future__ import annotations

import atexit
import os
import random
from collections import OrderedDict
from pathlib import Path

import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.config import ModelConfig
from minimal_engine.llm import DEFAULT_MODEL
from minimal_engine.model.loader import resolve_dtype, resolve_model_path
from minimal_engine.model.synthetic import synthetic_config

MAX_CONTEXT = 1280                 # prompt + output tokens the labs allow (less if the model has fewer positions)
MAX_NUM_SEQS = 64                  # requests in one engine step (the engine's default)

# label shown in the menu -> model spec ("default", "synthetic:NAME" or a model folder)
MODEL_CHOICES = OrderedDict([
    ("既定モデル（minimal-ja・学習済み）", "default"),
    ("llama-125m の形（ランダム重み）", "synthetic:llama-125m"),
    ("SmolLM2-135M の形（ランダム重み）", "synthetic:smollm2-135m"),
    ("Qwen3-0.6B の形（ランダム重み・重い）", "synthetic:qwen3-0.6b"),
    ("Llama-3.2-1B の形（ランダム重み・重い）", "synthetic:llama-3.2-1b"),
])
LLM_CACHE_SIZE = 4                 # engines kept loaded, all labs together (each one takes memory)
LLM_CACHE_BYTES = 3 * 2**30        # ... and at most this much weights + KV pool among them (the newest always stays)
KV_POOL_LIMIT = 256 * 2**20        # at most 256 MiB of KV pool per model (beyond it: preemption, shown)


def is_quick() -> bool:
    """True when ``COURSE_QUICK=1`` (tests, CI): experiments use fewer and smaller runs."""
    return os.environ.get("COURSE_QUICK", "") not in ("", "0")


def default_threads() -> int:
    """Threads a course kernel uses when COURSE_THREADS is not set: half the cores, at least one."""
    return max(1, (os.cpu_count() or 1) // 2)


def course_threads() -> int:
    """``COURSE_THREADS`` when set (a positive integer), else ``default_threads()``."""
    raw = os.environ.get("COURSE_THREADS", "").strip()
    if not raw:
        return default_threads()
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"環境変数 COURSE_THREADS は 1 以上の整数で指定してください（今は {raw!r}）。"
                         f" / COURSE_THREADS must be a positive integer, got {raw!r}")
    return n


def apply_thread_policy(threads: int | None = None) -> int:
    """Set PyTorch's thread count: ``threads`` if given, else ``course_threads()``. Returns the count set."""
    n = course_threads() if threads is None else check_int(threads, "threads", "スレッド数", 1, 1024)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def available_devices() -> list[str]:
    """Devices this machine can run: always "cpu", plus "cuda" / "mps" when present."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def check_int(value, name: str, ja: str, lo: int, hi: int) -> int:
    """``value`` if it is an int in [lo, hi], else ValueError naming the control in Japanese and English."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{ja}（{name}）は {lo}〜{hi} の整数で指定してください。"
                         f" / {name} must be an integer in [{lo}, {hi}], got {value!r}")
    return value

def check_model(model) -> str:
    if isinstance(model, Path):
        model = str(model)
    if not isinstance(model, str) or not model:
        raise ValueError(f"モデル（model）は {list(MODEL_CHOICES.values())} のどれか、またはモデルのフォルダで"
                         f"指定してください。 / model must be one of those or a model folder, got {model!r}")
    if model in MODEL_CHOICES.values() or Path(model).is_dir():
        return model
    raise ValueError(f"モデル {model!r} は選べません。{list(MODEL_CHOICES.values())} のどれか、または"
                     f"存在するモデルのフォルダを指定してください。 / unknown model {model!r}: use one of "
                     f"{list(MODEL_CHOICES.values())} or an existing model folder")


def check_device(device) -> str:
    devices = available_devices()
    if device not in devices:
        raise ValueError(f"デバイス {device!r} はこのマシンでは使えません（使えるのは {devices}）。"
                         f" / device {device!r} is not available here; available: {devices}")
    return device


_LLM_CACHE: OrderedDict = OrderedDict()   # (tag, ...) -> engine, least recently used first


def _close(engine) -> None:
    close = getattr(engine, "close", None)
    if callable(close):
        close()


def engine_bytes(engine) -> int:
    """Weights plus KV pool of a cached engine (an LLM, a DisaggregatedLLM's decode side, a torch module)."""
    llm = getattr(engine, "llm", engine)
    runner = getattr(getattr(llm, "engine", None), "runner", None)
    model = getattr(runner, "model", None) if runner is not None else llm
    params = getattr(model, "parameters", None)
    weights = sum(p.numel() * p.element_size() for p in params()) if callable(params) else 0
    return weights + (getattr(runner, "kv_cache_bytes", 0) or 0)


def cached_llm(key: tuple, make):
    """The engine stored under ``key`` (a tuple whose first item names its lab, e.g. ``("lab8", "ngram", 4, 1,
    "cpu")``), else ``make()`` stored there. Keeps the ``LLM_CACHE_SIZE`` most recently used engines, within
    ``LLM_CACHE_BYTES``; the ones it drops are closed."""
    if key in _LLM_CACHE:
        _LLM_CACHE.move_to_end(key)
        return _LLM_CACHE[key]
    while _LLM_CACHE and len(_LLM_CACHE) >= LLM_CACHE_SIZE:
        _close(_LLM_CACHE.popitem(last=False)[1])
    engine = make()
    _LLM_CACHE[key] = engine
    while len(_LLM_CACHE) > 1 and sum(map(engine_bytes, _LLM_CACHE.values())) > LLM_CACHE_BYTES:
        _close(_LLM_CACHE.popitem(last=False)[1])
    return engine


def engine_model_arg(model: str):
    """What LLM(model=...) gets: None (the shipped default model) for "default", unless the instructor
    points COURSE_MODEL at another model folder."""
    if model == "default":
        return os.environ.get("COURSE_MODEL") or None
    return model


def model_config(arg) -> ModelConfig:
    """The model's shape, read without loading its weights (to size the KV pool)."""
    if isinstance(arg, str) and arg.startswith("synthetic:"):
        return synthetic_config(arg.split(":", 1)[1])
    return ModelConfig.from_folder(resolve_model_path(arg if arg is not None else DEFAULT_MODEL))


def max_model_len(model="default") -> int:
    """Longest prompt + output (tokens) the labs allow for this model: its context length, at most
    MAX_CONTEXT. Reads config.json only (no weights)."""
    cfg = model_config(engine_model_arg(check_model(model)))
    return min(MAX_CONTEXT, cfg.max_position_embeddings)


def get_llm(model: str = "default", device: str = "cpu") -> LLM:
    """Load a model once and keep it (in the one cache, ``cached_llm``); warm it up with a tiny request."""
    model, device = check_model(model), check_device(device)
    return cached_llm(("llm", model, device), lambda: _load(model, device))


def _load(model: str, device: str) -> LLM:
    arg = engine_model_arg(model)
    if arg is None and not (DEFAULT_MODEL / "config.json").is_file():
        raise ValueError("既定モデル（minimal_engine/default_model）が見つかりません。合成モデル"
                         "（synthetic:...）を選ぶか、既定モデルを入れてください。 / the default model is missing")
    cfg = model_config(arg)
    per_token = cfg.kv_bytes_per_token(torch.finfo(resolve_dtype(None, torch.device(device), cfg)).bits // 8)
    max_len = min(MAX_CONTEXT, cfg.max_position_embeddings)
    need = MAX_NUM_SEQS * max_len * per_token
    llm = LLM(arg, device=device, max_num_seqs=MAX_NUM_SEQS, max_model_len=max_len,
              kv_cache_memory=min(need, KV_POOL_LIMIT))
    warm = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)   # first steps are slow: not measured
    llm.generate(random_prompts(llm, min(32, max_len - 4), 2), warm, use_tqdm=False)
    return llm


def clear_llm_cache(tag: str | None = None) -> None:
    """Close and forget the engines of one lab (``tag``, the first item of their keys) or, without a tag,
    every engine (frees their memory; also done at exit)."""
    for key in [k for k in _LLM_CACHE if tag is None or k[0] == tag]:
        _close(_LLM_CACHE.pop(key))


atexit.register(clear_llm_cache)


def random_prompts(llm: LLM, prompt_len: int, concurrency: int, seed: int = 0) -> list[list[int]]:
    """``concurrency`` different prompts of ``prompt_len`` random token ids (no EOS, no shared prefix)."""
    rng = random.Random(seed)
    vocab = llm.model_config.vocab_size
    banned = set(llm.model_config.eos_token_ids)
    if llm.tokenizer.eos_token_id is not None:
        banned.add(llm.tokenizer.eos_token_id)
    prompts = []
    for _ in range(concurrency):
        ids = []
        while len(ids) < prompt_len:
            t = rng.randrange(vocab)
            if t not in banned:
                ids.append(t)
        prompts.append(ids)
    return prompts


__all__ = ["apply_thread_policy", "course_threads", "default_threads", "KV_POOL_LIMIT", "LLM_CACHE_BYTES", "LLM_CACHE_SIZE", "MAX_CONTEXT", "MAX_NUM_SEQS", "MODEL_CHOICES", "available_devices",
           "cached_llm", "check_device", "engine_bytes", "check_int", "check_model", "clear_llm_cache", "engine_model_arg", "get_llm",
           "is_quick", "max_model_len", "model_config", "random_prompts"]
