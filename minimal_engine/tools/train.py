"""Train the course's tiny Japanese default model (tokenizer + Llama-shaped LM) on a CPU.

    python -m minimal_engine.tools.train --corpus aozora-ja.jsonl.gz --out /tmp/train_run --minutes 60 --seed 0

Steps:
1. Read the corpus (gzip JSON lines, one work per line, field ``text``) and hold out whole works for
   validation: a shuffle of the works seeded by ``--split-seed`` (default 0; ``--seed`` only drives the
   training), the first ``--val-frac`` of them (at least one) are held out.
2. Train a byte-level BPE tokenizer (``tokenizers``) on the training works only. There is no normalizer,
   so ``decode(encode(s)) == s`` for any string (full/half width, kana, kanji, ASCII, spaces, newlines).
   The only special token is ``<|endoftext|>`` (EOS, also used as pad); the tokenizer adds NO BOS.
3. Pre-tokenize once (cached as numpy arrays in ``--work``), pack all training works separated by EOS into
   one token stream, and train ``LlamaForCausalLM`` on random ``--seq-len`` windows of it with AdamW
   (``--optimizer muon``: Muon for the layers' weight matrices, AdamW for the rest), linear warmup and
   cosine decay to 10 %. With ``--minutes`` the schedule runs on elapsed wall time (progress = elapsed /
   budget), otherwise on ``--steps``. Checkpoints (``ckpt.pt``) allow ``--resume``; ``--init-from DIR``
   starts a new phase from a finished run's weights and history with a fresh optimizer and schedule.
4. Evaluate held-out cross-entropy in NATS PER CHARACTER: the held-out works are joined as
   ``EOS w1 EOS w2 ...``, cut into windows of ``--seq-len`` tokens (each window starts with fresh
   context), and the NLL of every token of the works (not of the EOS separators) is summed and divided
   by the number of characters in the works. The baseline is a character bigram with add-one (Laplace)
   smoothing fitted on the same training works: vocabulary V = training characters + one UNK (held-out
   characters never seen in training map to UNK), a start symbol as the context of each work's first
   character, P(c|p) = (n(p,c) + 1) / (n(p) + |V|); an unseen context gives the uniform 1/|V|.
5. Save an HF folder: config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
   generation_config.json, train_log.json and loss_curve.png.

Distillation (a draft model for speculative decoding, chapter 8): ``--distill-from TEACHER`` trains on
KL(teacher || student) over the same corpus windows instead of the next-token cross-entropy; with ``--init-layers
0,..`` the student (the teacher's width) starts from the teacher's embedding, final norm and those layers.

``--card --out DIR`` instead rewrites the generated sections of DIR/README.md (metrics, sample continuations).
The pieces live beside this file: train_data.py (corpus, split, tokenizer, bigram baseline) and train_model.py
(model, loss, optimizers, nats/char, ``--evaluate``); this file is the command line and the training loop.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

from minimal_engine.tools.model_card import PROMPTS, fill_card, plot_curve  # noqa: F401  (PROMPTS: used by tests)
from minimal_engine.tools.train_data import (EOS, bigram_nats_per_char, encode_stream, fit_bigram,  # noqa: F401
                                             load_works, split_works, train_tokenizer, wrap_tokenizer)
from minimal_engine.tools.train_model import (cpu_name, distill_loss, evaluate_folder, held_out_metrics,
                                              load_teacher, lm_loss, make_model, make_optimizers, model_nats_per_char)

# (EOS, split_works, fit_bigram, bigram_nats_per_char, encode_stream, model_nats_per_char: importable from here, as
# tests and notebooks call them `train.<name>`)


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", help="cache/checkpoint dir (default OUT/work)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--val-frac", type=float, default=0.025)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--d", type=int, default=320)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=5)
    ap.add_argument("--ff", type=int, default=864)
    ap.add_argument("--ctx", type=int, default=512, help="max_position_embeddings")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--minutes", type=float, help="wall-clock budget (sets the LR schedule)")
    ap.add_argument("--steps", type=int, default=1000, help="step budget when --minutes is not given")
    ap.add_argument("--eval-every", type=float, default=300, help="seconds between evaluations")
    ap.add_argument("--eval-docs", type=int, default=4, help="held-out works used for periodic eval")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--tokenizer-only", action="store_true")
    ap.add_argument("--card", action="store_true")
    ap.add_argument("--split-seed", type=int, default=0,
                    help="seed of the train/validation split of works (--seed only drives the training)")
    ap.add_argument("--evaluate", action="store_true",
                    help="only evaluate the finished run in --out on the held-out works; rewrites its final metrics")
    ap.add_argument("--optimizer", choices=["adamw", "muon"], default="adamw")
    ap.add_argument("--compile", action="store_true", help="torch.compile the loss (about 1.2x on CPU)")
    ap.add_argument("--init-from", help="a finished run's output folder: continue from its weights and history "
                                        "with a fresh optimizer and schedule")
    ap.add_argument("--distill-from", help="a teacher model folder: train on KL(teacher || student) instead of the "
                                           "corpus's next token (a draft model for speculative decoding)")
    ap.add_argument("--init-layers", help="with --distill-from: start from the teacher's embedding, final norm and "
                                          "these layers (comma-separated indices, e.g. 0,5)")
    return ap


def get_tokenizer(a, work, train_texts):
    """The run's tokenizer: the one of --init-from's weights, the cached one (--resume) or a new one."""
    from tokenizers import Tokenizer
    tok_path = os.path.join(work, "tokenizer.json")
    if a.init_from:     # the weights come with their tokenizer
        return Tokenizer.from_file(os.path.join(a.init_from, "tokenizer.json"))
    if a.resume and os.path.exists(tok_path):
        return Tokenizer.from_file(tok_path)
    tok = train_tokenizer(train_texts, a.vocab)
    tok.save(tok_path)
    return tok


def token_streams(a, work, tok, train_texts, val_texts):
    """(train ids, held-out ids, held-out mask), cached in WORK/tokens.npz (reused with --resume)."""
    cache = os.path.join(work, "tokens.npz")
    if a.resume and os.path.exists(cache):
        z = np.load(cache)
        tr, va, vm = z["tr"], z["va"], z["vm"]
        if not np.array_equal(va, encode_stream(tok, val_texts)[0]):   # cached tokens of another split
            raise ValueError(f"{cache} was made from another train/validation split (--split-seed, --val-frac) "
                             "or tokenizer: delete it or use the split it was made from")
        return tr, va, vm
    tr, _ = encode_stream(tok, train_texts)
    va, vm = encode_stream(tok, val_texts)
    np.savez(cache, tr=tr, va=va, vm=vm)
    return tr, va, vm


def start_state(a, model, opts, rng, ckpt):
    """(step, elapsed, log) to start from: a fresh run, --init-from's weights and history, or --resume's checkpoint
    (which also restores the model, the optimizers and `rng`)."""
    step, elapsed, log = 0, 0.0, dict(curve=[], train_loss=[], phases=[])
    base = dict(step=0, tokens=0, minutes=0.0)  # where this phase starts in the whole history
    if a.init_from:  # continue a finished run: its weights and history, a fresh optimizer and schedule
        from safetensors.torch import load_file
        model.load_state_dict(load_file(os.path.join(a.init_from, "model.safetensors")), strict=False)
        model.tie_weights()
        prev = json.load(open(os.path.join(a.init_from, "train_log.json"), encoding="utf-8"))
        phases = prev.get("phases") or [
            dict(command=prev["command"], steps=prev["steps"], tokens=prev["tokens_seen"], minutes=prev["minutes"])]
        log = dict(curve=prev["curve"], train_loss=prev["train_loss"], phases=phases)
        base = dict(step=prev["steps"], tokens=prev["tokens_seen"], minutes=prev["minutes"])
    log["base"] = base
    if a.resume and os.path.exists(ckpt):
        st = torch.load(ckpt, weights_only=False)
        model.load_state_dict(st["model"])
        rng.bit_generator.state = st["rng"]
        for o, so in zip(opts, st["opt"] if isinstance(st["opt"], list) else [st["opt"]]):
            o.load_state_dict(so)
        step, elapsed, log = st["step"], st["elapsed"], st["log"]
    return step, elapsed, log


def main(argv=None):
    a = build_parser().parse_args(argv)
    if a.card:
        print(fill_card(a.out))
        return
    if a.init_layers and not a.distill_from:
        raise SystemExit("--init-layers copies a teacher's layers: it needs --distill-from TEACHER")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    work = a.work or os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    train_texts, val_texts = split_works(load_works(a.corpus), a.split_seed, a.val_frac)
    if a.evaluate:
        return evaluate_folder(a.out, train_texts, val_texts, a.seq_len, a.eval_docs)
    print(f"works: {len(train_texts)} train, {len(val_texts)} held out", file=sys.stderr)

    tok = get_tokenizer(a, work, train_texts)
    wrap_tokenizer(tok).save_pretrained(a.out)
    if a.tokenizer_only:
        return
    tr, va, vm = token_streams(a, work, tok, train_texts, val_texts)
    sub = val_texts[:a.eval_docs]
    sva, svm = encode_stream(tok, sub)
    n_val_chars, n_sub_chars = sum(map(len, val_texts)), sum(map(len, sub))
    bigram = bigram_nats_per_char(fit_bigram(train_texts), val_texts)
    print(f"train tokens {len(tr):,}, val tokens {len(va):,}, val chars {n_val_chars:,}; "
          f"bigram {bigram:.4f} nats/char", file=sys.stderr)

    eos_id = tok.token_to_id(EOS)
    model = make_model(tok.get_vocab_size(), a.d, a.layers, a.heads, a.ff, a.ctx, eos_id)
    n_params = sum(p.numel() for p in model.parameters())
    opts = make_optimizers(model, a.optimizer, a.lr)
    rng = np.random.default_rng(a.seed)
    ckpt = os.path.join(work, "ckpt.pt")
    step, elapsed, log = start_state(a, model, opts, rng, ckpt)
    base = log["base"]
    tokens_per_step = a.micro_batch * a.accum * a.seq_len
    budget = a.minutes * 60 if a.minutes else None

    def progress():
        return elapsed / budget if budget else step / a.steps

    def evaluate():
        v = model_nats_per_char(model, sva, svm, n_sub_chars, a.seq_len)
        log["curve"].append(dict(step=base["step"] + step, tokens=base["tokens"] + step * tokens_per_step,
                                 minutes=base["minutes"] + elapsed / 60, val_nats_per_char_subset=v))
        print(f"\nstep {step} ({elapsed / 60:.1f} min): held-out subset {v:.4f} nats/char", file=sys.stderr)

    from tqdm import tqdm
    bar = tqdm(total=a.steps if not budget else int(budget), unit="step" if not budget else "s", initial=0)
    model.train()
    last_eval, t0 = elapsed, time.time() - elapsed
    loss_fn = torch.compile(lm_loss) if a.compile else lm_loss
    if a.distill_from:
        layers = [int(i) for i in a.init_layers.split(",")] if a.init_layers and step == 0 else None
        teacher = load_teacher(a.distill_from, layers, model)
        loss_fn = lambda m, x: distill_loss(m, teacher, x)  # noqa: E731
    if step == 0 and not a.init_from:
        evaluate()
    while progress() < 1:
        p = progress()
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))
        for o in opts:
            for g in o.param_groups:
                g["lr"] = lr
        tot = 0.0
        for _ in range(a.accum):
            s = rng.integers(0, len(tr) - a.seq_len - 1, a.micro_batch)
            x = torch.from_numpy(np.stack([tr[i:i + a.seq_len + 1] for i in s]).astype(np.int64))
            loss = loss_fn(model, x)
            (loss / a.accum).backward()
            tot += loss.item() / a.accum
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for o in opts:
            o.step()
            o.zero_grad(set_to_none=True)
        step += 1
        prev, elapsed = elapsed, time.time() - t0
        log["train_loss"].append([base["step"] + step, round(tot, 4)])
        bar.update(1 if not budget else int(elapsed) - int(prev))
        bar.set_postfix(loss=f"{tot:.3f}", lr=f"{lr:.1e}", step=step)
        if elapsed - last_eval >= a.eval_every:
            evaluate()
            last_eval = elapsed
            torch.save(dict(model=model.state_dict(), opt=[o.state_dict() for o in opts], rng=rng.bit_generator.state,
                            step=step, elapsed=elapsed, log=log), ckpt)
    bar.close()
    evaluate()
    command = "python -m minimal_engine.tools.train " + " ".join(argv if argv is not None else sys.argv[1:])
    log.update(final=dict(held_out_metrics(model, va, vm, val_texts, bigram, a.seq_len),
                          train_works=len(train_texts), train_tokens=len(tr)),
               bigram_nats_per_char=bigram, units="nats per character (natural log)",
               steps=base["step"] + step, tokens_seen=base["tokens"] + step * tokens_per_step,
               tokens_per_step=tokens_per_step, minutes=base["minutes"] + elapsed / 60, n_params=n_params,
               args=vars(a), command=command,
               hardware=f"{cpu_name()}, {a.threads} CPU threads, torch {torch.__version__}")
    log["phases"].append(dict(command=command, steps=step, tokens=step * tokens_per_step, minutes=elapsed / 60))
    print(json.dumps(log["final"], indent=1), file=sys.stderr)
    model.generation_config.update(bos_token_id=None, eos_token_id=eos_id, pad_token_id=eos_id)
    model.save_pretrained(a.out)
    json.dump(log, open(os.path.join(a.out, "train_log.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
    plot_curve(log, os.path.join(a.out, "loss_curve.png"))


if __name__ == "__main__":
    main()
