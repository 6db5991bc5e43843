"""Loading a Hugging Face checkpoint folder into our model: resolve the path, read safetensors, map names.

Checkpoint names follow transformers (`model.layers.0.self_attn.q_proj.weight`); our model keeps q/k/v in
one `qkv_proj` and gate/up in one `gate_up_proj`, so those tensors are copied into slices of the fused
weight. Every parameter must be filled exactly once; a missing one is an error that names it. A tensor
the model has no place for is an error too (it would be a part of the network this engine does not
compute, e.g. an MLP bias), except the few in IGNORED_TENSORS.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from minimal_engine.config import ModelConfig
from minimal_engine.model.llama import LlamaForCausalLM

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
IGNORED_TENSORS = ("rotary_emb.inv_freq",)   # recomputed from config.json; lm_head.weight when tied
HUB_PATTERNS = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt", "*.jinja"]


def resolve_model_path(model: str | Path) -> Path:
    """A local folder, or a hub id ("org/name") fetched with huggingface_hub (needs the network or its cache)."""
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise NotADirectoryError(f"model path {path} is a file: pass the folder that holds config.json")
        return path
    s = str(model)
    if s.count("/") == 1 and not s.startswith((".", "/", "~")):
        from huggingface_hub import snapshot_download
        try:
            return Path(snapshot_download(s, allow_patterns=HUB_PATTERNS))
        except Exception as e:  # offline, unknown repo, gated model, ...
            raise FileNotFoundError(f"could not get model {s!r} from the Hugging Face hub or its local "
                                    f"cache ({type(e).__name__}: {e}); pass a local folder instead") from None
    raise FileNotFoundError(f"model folder {path} does not exist: pass a folder with config.json and "
                            "*.safetensors, or a hub id like 'Qwen/Qwen3-0.6B'")


def resolve_dtype(dtype, device: torch.device, cfg: ModelConfig) -> torch.dtype:
    """None: the checkpoint's dtype (bfloat16 instead of float16 on the CPU). float16 on the CPU is an error."""
    if dtype is None:
        name = cfg.torch_dtype if cfg.torch_dtype in DTYPES else "float32"
        if name == "float16" and device.type == "cpu":
            name = "bfloat16"
        return DTYPES[name]
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
        dtype = DTYPES[dtype]
    if dtype not in DTYPES.values():
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    if dtype == torch.float16 and device.type == "cpu":
        raise ValueError("float16 is not allowed on the CPU (about 1000x slower than bfloat16 there); "
                         "use dtype='bfloat16' or 'float32', or float16 on CUDA")
    return dtype


def build_model(cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> LlamaForCausalLM:
    """Allocate the model without initialising it (weights are filled by load_weights or an init)."""
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to_empty(device=device).to(dtype)   # inv_freq is remade on first use (rope())
    if cfg.tie_word_embeddings:     # to_empty gave lm_head a tensor of its own: share the embedding's
        tied = {"lm_head.weight": model.embed_tokens.weight}
        model.load_state_dict(tied, strict=False, assign=True)
    return model.eval()


def _safetensors_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = [path / f for f in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{index.name} lists shards that are missing in {path}: {missing}")
        return files
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {path} (only safetensors checkpoints are supported)")
    return files


def iter_checkpoint(path: Path):
    """Yield (name, tensor) from every safetensors file; a broken file gets an error that names it."""
    for f in _safetensors_files(path):
        try:
            with safe_open(str(f), framework="pt") as st:
                for name in st.keys():
                    yield name, st.get_tensor(name)
        except (SafetensorError, OSError, RuntimeError, ValueError) as e:
            raise ValueError(f"cannot read weights from {f}: {e} (the file is truncated or corrupted; "
                             "download or save it again)") from None


def load_weights(model: LlamaForCausalLM, tensors) -> None:
    cfg = model.config
    h, kvh, dh, inter = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, cfg.head_dim, cfg.intermediate_size
    # checkpoint piece -> (our fused parameter, row offset, rows)
    pieces = {"q_proj": ("qkv_proj", 0, h), "k_proj": ("qkv_proj", h, kvh), "v_proj": ("qkv_proj", h + kvh, kvh),
              "gate_proj": ("gate_up_proj", 0, inter), "up_proj": ("gate_up_proj", inter, inter)}
    params = dict(model.named_parameters())
    filled: dict[str, int] = {}   # parameter name -> rows filled
    unexpected = []
    for name, tensor in tensors:
        name = name.removeprefix("model.")
        if name.endswith(IGNORED_TENSORS):
            continue
        target, offset, rows = name, 0, None
        for piece, (fused, off, n) in pieces.items():
            if f".{piece}." in name:
                target, offset, rows = name.replace(piece, fused), off, n
        if target == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        if target not in params:
            unexpected.append(name)
            continue
        p = params[target]
        rows = p.shape[0] if rows is None else rows
        if tuple(tensor.shape) != (rows, *p.shape[1:]):
            raise ValueError(f"weight {name} has shape {tuple(tensor.shape)}, config.json implies {(rows, *p.shape[1:])}")
        with torch.no_grad():
            p[offset:offset + rows].copy_(tensor)
        filled[target] = filled.get(target, 0) + rows
    if unexpected:
        raise ValueError(f"checkpoint has tensors this engine does not compute: {unexpected[:5]}"
                         f"{' ...' if len(unexpected) > 5 else ''}; refusing to run a different network")
    missing = [n for n, p in params.items() if filled.get(n, 0) != p.shape[0]]
    if missing:
        raise ValueError(f"checkpoint is missing weights: {missing[:5]}{' ...' if len(missing) > 5 else ''}")


def load_model(path: Path, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> LlamaForCausalLM:
    model = build_model(cfg, dtype, device)
    load_weights(model, iter_checkpoint(path))
    return model


def hf_state_dict(model: LlamaForCausalLM) -> dict[str, torch.Tensor]:
    """The inverse of load_weights: our fused tensors split back into transformers' names (used to give
    transformers the very same random weights as a synthetic model, for side-by-side benchmarks)."""
    cfg = model.config
    h, kvh, inter = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, cfg.intermediate_size
    splits = {"qkv_proj": (("q_proj", h), ("k_proj", kvh), ("v_proj", kvh)),
              "gate_up_proj": (("gate_proj", inter), ("up_proj", inter))}
    out = {}
    for name, t in model.state_dict().items():
        prefix = "" if name.startswith("lm_head") else "model."
        for fused, parts in splits.items():
            if f".{fused}." in name:
                for (piece, rows), chunk in zip(parts, t.split([r for _, r in parts])):
                    out[prefix + name.replace(fused, piece)] = chunk.clone()
                break
        else:
            out[prefix + name] = t
    return out
