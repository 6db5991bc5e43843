"""The training script's model side: the Llama-shaped LM, its loss and optimizers, and the held-out measure.

Used by ``python -m minimal_engine.tools.train`` (train.py's docstring describes the steps). The measure
(``model_nats_per_char``) is NATS PER CHARACTER over windows of the held-out stream, as ``tools.evaluate``
and the tests repeat it; ``evaluate_folder`` re-measures a finished run (``--evaluate``).
"""
import json
import os
import platform
import sys

import numpy as np
import torch

from minimal_engine.tools.model_card import plot_curve
from minimal_engine.tools.train_data import bigram_nats_per_char, encode_stream, fit_bigram


def make_model(vocab_size, d=320, layers=6, heads=5, ff=864, ctx=512, eos_id=0):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=d, intermediate_size=ff, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=ctx,
                      rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                      bos_token_id=None, eos_token_id=eos_id, pad_token_id=eos_id)
    return LlamaForCausalLM(cfg)


def lm_loss(model, x):
    """Next-token cross-entropy of a [B, T+1] batch under bf16 autocast (the loss itself in float32)."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x[:, :-1]).logits
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))


def distill_loss(model, teacher, x):
    """Distillation: KL(teacher || student) per token of a [B, T+1] batch's first T positions, both under bf16
    autocast (the softmaxes in float32). The student learns the target's whole next-token distribution, not only
    the corpus's next token: what a speculative-decoding draft needs (its proposals are kept when they agree with
    the target, DistillSpec, Zhou et al. 2023)."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        t_logits = teacher(x[:, :-1]).logits
    with torch.autocast("cpu", dtype=torch.bfloat16):
        s_logits = model(x[:, :-1]).logits
    v = s_logits.size(-1)
    return torch.nn.functional.kl_div(torch.log_softmax(s_logits.float().reshape(-1, v), -1),
                                      torch.log_softmax(t_logits.float().reshape(-1, v), -1),
                                      log_target=True, reduction="batchmean")


def load_teacher(path, layers=None, student=None):
    """The distillation teacher (an HF folder), frozen. With ``layers`` (teacher layer indices) and ``student``,
    the student starts from the teacher's embedding (tied with the output layer), final norm and those layers, so
    it must have the teacher's width, heads and FFN size and ``len(layers)`` layers."""
    from transformers import AutoModelForCausalLM
    teacher = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    teacher.requires_grad_(False)
    if layers:
        tc, sc = teacher.config, student.config
        shape = ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size")
        bad = [f"{k} {getattr(sc, k)} != {getattr(tc, k)}" for k in shape if getattr(sc, k) != getattr(tc, k)]
        if bad or len(layers) != sc.num_hidden_layers or max(layers) >= tc.num_hidden_layers:
            raise ValueError(f"--init-layers {layers}: the student must have the teacher's shape and one layer per "
                             f"index below {tc.num_hidden_layers} ({', '.join(bad) or 'layer count'})")
        student.model.embed_tokens.load_state_dict(teacher.model.embed_tokens.state_dict())
        student.model.norm.load_state_dict(teacher.model.norm.state_dict())
        for i, j in enumerate(layers):
            student.model.layers[i].load_state_dict(teacher.model.layers[j].state_dict())
        student.tie_weights()
    return teacher


def make_optimizers(model, kind="adamw", lr=2e-3):
    """AdamW for everything, or Muon for the 2-D weights inside the decoder layers and AdamW for the
    embedding (tied with the output layer) and the norm weights."""
    if kind == "adamw":
        return [torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)]
    hidden = [p for n, p in model.named_parameters() if p.ndim == 2 and ".layers." in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim == 2 and ".layers." in n)]
    return [torch.optim.Muon(hidden, lr=lr, weight_decay=0.1, adjust_lr_fn="match_rms_adamw"),
            torch.optim.AdamW(rest, lr=lr, betas=(0.9, 0.95), weight_decay=0.1)]


@torch.no_grad()
def model_nats_per_char(model, ids, mask, n_chars, seq_len=512, batch=8):
    """Sum of token NLL over work tokens / number of characters (windows of seq_len+1 overlapping by 1)."""
    model.eval()
    starts = list(range(0, len(ids) - 1, seq_len))
    total = 0.0
    for b in range(0, len(starts), batch):
        xs, ys, ms = [], [], []
        for s in starts[b:b + batch]:
            w = torch.from_numpy(ids[s:s + seq_len + 1].astype(np.int64))
            m = torch.from_numpy(mask[s + 1:s + seq_len + 1])
            pad = seq_len + 1 - len(w)
            xs.append(torch.nn.functional.pad(w[:-1], (0, pad)))
            ys.append(torch.nn.functional.pad(w[1:], (0, pad)))
            ms.append(torch.nn.functional.pad(m, (0, pad)))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(torch.stack(xs)).logits
        nll = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), torch.stack(ys), reduction="none")
        total += nll[torch.stack(ms)].sum().item()
    model.train()
    return total / n_chars


# ---------------------------------------------------------------- outputs
def cpu_name():
    try:
        return next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def held_out_metrics(model, va, vm, val_texts, bigram, seq_len=512):
    """The figures the model card reports: model vs bigram nats/char on all held-out works."""
    n_chars, n_tokens = sum(map(len, val_texts)), int(vm.sum())
    final = model_nats_per_char(model, va, vm, n_chars, seq_len)
    return dict(model_nats_per_char=final, bigram_nats_per_char=bigram, reduction_pct=100 * (1 - final / bigram),
                val_works=len(val_texts), val_chars=n_chars, val_tokens=n_tokens, chars_per_token=n_chars / n_tokens)


def evaluate_folder(out, train_texts, val_texts, seq_len=512, eval_docs=4):
    """Held-out nats/char of the saved model in OUT against the bigram; rewrites train_log.json["final"]
    and the last curve point (the subset value at the end of training)."""
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    va, vm = encode_stream(tok, val_texts)
    sva, svm = encode_stream(tok, val_texts[:eval_docs])
    sub = model_nats_per_char(model, sva, svm, sum(map(len, val_texts[:eval_docs])), seq_len)
    bigram = bigram_nats_per_char(fit_bigram(train_texts), val_texts)
    path = os.path.join(out, "train_log.json")
    log = json.load(open(path, encoding="utf-8"))
    log["final"].update(held_out_metrics(model, va, vm, val_texts, bigram, seq_len))
    log["bigram_nats_per_char"] = bigram
    log["curve"][-1]["val_nats_per_char_subset"] = sub
    json.dump(log, open(path, "w", encoding="utf-8"), ensure_ascii=False, indent=1)
    plot_curve(log, os.path.join(out, "loss_curve.png"))
    print(json.dumps(log["final"], indent=1), file=sys.stderr)
    return log["final"]
