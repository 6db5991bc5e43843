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

``--card --out DIR`` instead rewrites the generated sections of DIR/README.md (metrics, sample continuations).
"""
import argparse, gzip, json, math, os, platform, random, sys, time

import numpy as np
import torch

from minimal_engine.tools.model_card import PROMPTS, fill_card, plot_curve  # noqa: F401  (PROMPTS: used by tests)

EOS = "<|endoftext|>"


def load_works(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def split_works(works, seed=0, val_frac=0.025):
    """Deterministic split of whole works: returns (train_texts, val_texts)."""
    idx = list(range(len(works)))
    random.Random(seed).shuffle(idx)
    n_val = max(1, round(len(works) * val_frac))
    val = set(idx[:n_val])
    return [w for i, w in enumerate(works) if i not in val], [works[i] for i in sorted(val)]


def train_tokenizer(texts, vocab_size=8192):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def wrap_tokenizer(tok):
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS,
                                   clean_up_tokenization_spaces=False, model_max_length=512)


def encode_stream(tok, texts):
    """EOS w1 EOS w2 ... as uint16, plus a mask of positions that belong to works (not EOS)."""
    eos = tok.token_to_id(EOS)
    ids, mask = [], []
    for enc in tok.encode_batch(texts):
        ids += [eos] + enc.ids
        mask += [False] + [True] * len(enc.ids)
    return np.array(ids, dtype=np.uint16), np.array(mask, dtype=bool)


# ---------------------------------------------------------------- character bigram baseline
def _codes(text):
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)


START = 0x110000  # beyond Unicode: context symbol before each work's first character


def fit_bigram(train_texts):
    prev, cur = [], []
    for t in train_texts:
        c = _codes(t)
        prev.append(np.concatenate([[START], c[:-1]])); cur.append(c)
    prev, cur = np.concatenate(prev), np.concatenate(cur)
    vocab = np.unique(cur)
    pairs, pair_n = np.unique(prev * (1 << 21) + cur, return_counts=True)
    ctx, ctx_n = np.unique(prev, return_counts=True)
    return dict(vocab=vocab, V=len(vocab) + 1, pairs=pairs, pair_n=pair_n, ctx=ctx, ctx_n=ctx_n)


def _lookup(keys, table, counts):
    i = np.clip(np.searchsorted(table, keys), 0, len(table) - 1)
    return np.where(table[i] == keys, counts[i], 0)


def bigram_nats_per_char(bg, texts):
    """Held-out cross-entropy (nats/char) of the add-one bigram; unseen characters map to UNK."""
    UNK = -1
    total, n = 0.0, 0
    for t in texts:
        c = _codes(t)
        c = np.where(_lookup(c, bg["vocab"], np.ones_like(bg["vocab"])) > 0, c, UNK)
        p = np.concatenate([[START], c[:-1]])
        n_pc = np.where((p == UNK) | (c == UNK), 0, _lookup(p * (1 << 21) + c, bg["pairs"], bg["pair_n"]))
        n_p = np.where(p == UNK, 0, _lookup(p, bg["ctx"], bg["ctx_n"]))
        total -= np.log((n_pc + 1) / (n_p + bg["V"])).sum()
        n += len(c)
    return total / n


# ---------------------------------------------------------------- model
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
            xs.append(torch.nn.functional.pad(w[:-1], (0, pad))); ys.append(torch.nn.functional.pad(w[1:], (0, pad)))
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


# ---------------------------------------------------------------- training
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus"); ap.add_argument("--out", required=True)
    ap.add_argument("--work", help="cache/checkpoint dir (default OUT/work)")
    ap.add_argument("--seed", type=int, default=0); ap.add_argument("--val-frac", type=float, default=0.025)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--d", type=int, default=320); ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=5); ap.add_argument("--ff", type=int, default=864)
    ap.add_argument("--ctx", type=int, default=512, help="max_position_embeddings")
    ap.add_argument("--seq-len", type=int, default=512); ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--accum", type=int, default=2); ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--minutes", type=float, help="wall-clock budget (sets the LR schedule)")
    ap.add_argument("--steps", type=int, default=1000, help="step budget when --minutes is not given")
    ap.add_argument("--eval-every", type=float, default=300, help="seconds between evaluations")
    ap.add_argument("--eval-docs", type=int, default=4, help="held-out works used for periodic eval")
    ap.add_argument("--threads", type=int, default=2); ap.add_argument("--resume", action="store_true")
    ap.add_argument("--tokenizer-only", action="store_true"); ap.add_argument("--card", action="store_true")
    ap.add_argument("--split-seed", type=int, default=0,
                    help="seed of the train/validation split of works (--seed only drives the training)")
    ap.add_argument("--evaluate", action="store_true",
                    help="only evaluate the finished run in --out on the held-out works; rewrites its final metrics")
    ap.add_argument("--optimizer", choices=["adamw", "muon"], default="adamw")
    ap.add_argument("--compile", action="store_true", help="torch.compile the loss (about 1.2x on CPU)")
    ap.add_argument("--init-from", help="a finished run's output folder: continue from its weights and history "
                                        "with a fresh optimizer and schedule")
    a = ap.parse_args(argv)
    if a.card:
        print(fill_card(a.out)); return
    torch.set_num_threads(a.threads); torch.manual_seed(a.seed)
    work = a.work or os.path.join(a.out, "work"); os.makedirs(work, exist_ok=True); os.makedirs(a.out, exist_ok=True)
    train_texts, val_texts = split_works(load_works(a.corpus), a.split_seed, a.val_frac)
    if a.evaluate:
        return evaluate_folder(a.out, train_texts, val_texts, a.seq_len, a.eval_docs)
    print(f"works: {len(train_texts)} train, {len(val_texts)} held out", file=sys.stderr)

    from tokenizers import Tokenizer
    tok_path = os.path.join(work, "tokenizer.json")
    if a.init_from:     # the weights come with their tokenizer
        tok = Tokenizer.from_file(os.path.join(a.init_from, "tokenizer.json"))
    elif a.resume and os.path.exists(tok_path):
        tok = Tokenizer.from_file(tok_path)
    else:
        tok = train_tokenizer(train_texts, a.vocab); tok.save(tok_path)
    wrap_tokenizer(tok).save_pretrained(a.out)
    if a.tokenizer_only:
        return
    cache = os.path.join(work, "tokens.npz")
    if a.resume and os.path.exists(cache):
        z = np.load(cache); tr, va, vm = z["tr"], z["va"], z["vm"]
        if not np.array_equal(va, encode_stream(tok, val_texts)[0]):   # cached tokens of another split
            raise ValueError(f"{cache} was made from another train/validation split (--split-seed, --val-frac) "
                             "or tokenizer: delete it or use the split it was made from")
    else:
        tr, _ = encode_stream(tok, train_texts); va, vm = encode_stream(tok, val_texts)
        np.savez(cache, tr=tr, va=va, vm=vm)
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
    step, elapsed, log = 0, 0.0, dict(curve=[], train_loss=[], phases=[])
    base = dict(step=0, tokens=0, minutes=0.0)  # where this phase starts in the whole history
    if a.init_from:  # continue a finished run: its weights and history, a fresh optimizer and schedule
        from safetensors.torch import load_file
        model.load_state_dict(load_file(os.path.join(a.init_from, "model.safetensors")), strict=False)
        model.tie_weights()
        prev = json.load(open(os.path.join(a.init_from, "train_log.json"), encoding="utf-8"))
        log = dict(curve=prev["curve"], train_loss=prev["train_loss"], phases=prev.get("phases") or [
            dict(command=prev["command"], steps=prev["steps"], tokens=prev["tokens_seen"], minutes=prev["minutes"])])
        base = dict(step=prev["steps"], tokens=prev["tokens_seen"], minutes=prev["minutes"])
    log["base"] = base
    ckpt = os.path.join(work, "ckpt.pt")
    if a.resume and os.path.exists(ckpt):
        st = torch.load(ckpt, weights_only=False)
        model.load_state_dict(st["model"]); rng.bit_generator.state = st["rng"]
        for o, so in zip(opts, st["opt"] if isinstance(st["opt"], list) else [st["opt"]]):
            o.load_state_dict(so)
        step, elapsed, log = st["step"], st["elapsed"], st["log"]
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
    if step == 0 and not a.init_from:
        evaluate()
    loss_fn = torch.compile(lm_loss) if a.compile else lm_loss
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
            (loss / a.accum).backward(); tot += loss.item() / a.accum
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for o in opts:
            o.step(); o.zero_grad(set_to_none=True)
        step += 1
        prev, elapsed = elapsed, time.time() - t0
        log["train_loss"].append([base["step"] + step, round(tot, 4)])
        bar.update(1 if not budget else int(elapsed) - int(prev))
        bar.set_postfix(loss=f"{tot:.3f}", lr=f"{lr:.1e}", step=step)
        if elapsed - last_eval >= a.eval_every:
            evaluate(); last_eval = elapsed
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
