"""What LLM(...) does before the request path starts (read after the core path): pick the device,
load the model (a folder, a hub id or "synthetic:NAME"), fit max_model_len to it, size the KV
pool, and build the collaborators of chapters 7 and 8 (tensor parallelism, speculative decoding)."""
from __future__ import annotations

from dataclasses import replace

import torch

from minimal_engine.config import EngineConfig, ModelConfig
from minimal_engine.engine.kv_cache import kv_bytes_per_value
from minimal_engine.model.loader import load_model, resolve_dtype, resolve_model_path
from minimal_engine.model.tokenizer import Tokenizer

CPU_KV_BUDGET = 1 << 30          # 1 GiB of KV pool on the CPU unless told otherwise
GPU_KV_FRACTION = 0.5            # half of the free GPU memory after loading the weights


def mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def available_devices() -> list[str]:
    """The devices this machine and this PyTorch build can run the engine on."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out += [f"cuda (cuda:0..cuda:{torch.cuda.device_count() - 1})"]
    if mps_available():
        out += ["mps"]
    return out


def resolve_device(device) -> torch.device:
    """None or "auto": CUDA, else MPS, else the CPU. Anything else must exist here."""
    if device is None or device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if mps_available() else torch.device("cpu")
    here = f"available here: {', '.join(available_devices())}"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r} "
                         f"({here})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        build = ("this PyTorch is a CPU build" if torch.version.cuda is None
                 else "no CUDA GPU was found")
        raise ValueError(f"device 'cuda' was asked for but {build}; {here}: use device='cpu' or "
                         "'auto'")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r} was asked for but there are "
                         f"{torch.cuda.device_count()} GPU(s); {here}")
    if dev.type == "mps" and not mps_available():
        raise ValueError(f"device 'mps' was asked for but Apple's MPS is not available; {here}: "
                         "use device='cpu' or 'auto'")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'mps', got {device!r} ({here})")
    return dev


def load(model, dtype, device: torch.device, seed: int):
    """-> (ModelConfig, the network, Tokenizer, dtype, the model folder; None if synthetic)."""
    if isinstance(model, str) and model.startswith("synthetic:"):
        from minimal_engine.model.synthetic import build_synthetic
        name = model.split(":", 1)[1]
        model_config, net, tokenizer, dtype = build_synthetic(name, dtype, device, seed)
        return model_config, net, tokenizer, dtype, None
    path = resolve_model_path(model)
    model_config = ModelConfig.from_folder(path)
    dtype = resolve_dtype(dtype, device, model_config)
    net = load_model(path, model_config, dtype, device)
    return model_config, net, Tokenizer(path), dtype, path


def fit_to_model(config: EngineConfig, mc: ModelConfig) -> EngineConfig:
    """max_model_len: the model's limit when not given; never beyond it or a sliding window."""
    limit = mc.max_position_embeddings
    if config.max_model_len is not None and config.max_model_len > limit:
        raise ValueError(f"max_model_len={config.max_model_len} exceeds the model's limit of "
                         f"{limit} positions")
    if config.max_model_len is None:
        config = replace(config, max_model_len=limit)
    window = mc.sliding_window
    if window is not None and config.max_model_len > window:
        raise ValueError(f"config.json: sliding_window={window} is active, but this engine "
                         f"computes full attention, which differs beyond {window} tokens; pass "
                         f"max_model_len<={window}")
    return config


def auto_num_blocks(mc: ModelConfig, config: EngineConfig, dtype: torch.dtype,
                    device: torch.device) -> int:
    """Enough blocks for max_num_seqs requests of max_model_len tokens, within a memory budget."""
    per_token = mc.kv_bytes_per_token(kv_bytes_per_value(config.kv_cache_dtype, dtype))
    per_block = per_token * config.block_size
    wanted = config.max_num_seqs * -(-config.max_model_len // config.block_size)
    budget = config.kv_cache_memory
    if budget is None:
        if device.type == "cuda":
            budget = int(torch.cuda.mem_get_info(device)[0] * GPU_KV_FRACTION)
        else:
            budget = CPU_KV_BUDGET
    return max(1, min(wanted, budget // per_block))


def tensor_parallel(net, config: EngineConfig, size: int, model, seed: int, dtype, device,
                    num_blocks: int):
    """Chapter 7: the model (`model`: its folder, or "synthetic:NAME") split over `size` processes
    (features/tensor_parallel/) -> (the TensorParallelModel, the config without CUDA graphs: a TP
    step goes through pipes)."""
    if config.quantization or config.kv_cache_dtype != "auto":
        raise ValueError("tensor_parallel_size > 1 runs unquantized weights and KV only: "
                         "pass quantization=None and kv_cache_dtype='auto' with it")
    config = replace(config, cuda_graphs=False)
    from minimal_engine.features.tensor_parallel.model import TensorParallelModel
    if isinstance(model, str) and model.startswith("synthetic:"):
        spec = ("synthetic", model.split(":", 1)[1], seed)
    else:
        spec = ("path", model)
    return TensorParallelModel(net, spec, size, dtype, device, config, num_blocks), config


def spec_decoder(speculative_config: dict, rejection_sampler, mc: ModelConfig, tokenizer,
                 config: EngineConfig, num_blocks: int, dtype, device):
    """Chapter 8: the SpecDecoder the engine is given (features/spec_decode/); rejection_sampler
    None means rejection_sample."""
    from minimal_engine.features.spec_decode.decoder import SpecDecoder
    from minimal_engine.features.spec_decode.proposers import TargetInfo
    target = TargetInfo(mc, tokenizer, config, num_blocks, dtype, device)
    return SpecDecoder(speculative_config, target, rejection_sampler)
