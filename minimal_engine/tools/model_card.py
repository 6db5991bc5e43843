"""Outputs of a training run for people: the loss curve (PNG) and the generated parts of the model card.

Used by ``python -m minimal_engine.tools.train`` (see train.py); ``--card --out DIR`` calls ``fill_card``.
"""
import json
import math
import os

import torch

PROMPTS = ["吾輩は", "東京の空は", "推論とは", "その夜、私は", "山の上に"]


def plot_curve(log, path):
    import matplotlib; matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib_fontja  # noqa: F401  (日本語フォント)
    pts = log["curve"]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([p["tokens"] / 1e6 for p in pts], [p["val_nats_per_char_subset"] for p in pts], "o-",
            label="モデル (検証用作品の一部)")
    ax.axhline(log["bigram_nats_per_char"], ls="--", color="gray", label="文字バイグラム (加算スムージング)")
    ax.axhline(0.75 * log["bigram_nats_per_char"], ls=":", color="gray", label="目標 (バイグラムの 75 %)")
    edge = 0
    for i, ph in enumerate(log.get("phases", [])[:-1]):   # where a later phase (--init-from) started
        edge += ph["tokens"]
        ax.axvline(edge / 1e6, color="tab:orange", lw=1, label="段の切り替え (--init-from)" if i == 0 else None)
    ax.set_xlabel("学習トークン数 (百万)"); ax.set_ylabel("検証交差エントロピー (nats/文字)")
    ax.set_title("検証損失の推移"); ax.grid(alpha=.3); ax.legend()
    fig.tight_layout(); fig.savefig(path, dpi=110); plt.close(fig)


def fill_card(out):
    """Regenerate the marked sections of OUT/README.md: metrics table and sample continuations."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok, model = AutoTokenizer.from_pretrained(out), AutoModelForCausalLM.from_pretrained(out).float().eval()
    log = json.load(open(os.path.join(out, "train_log.json"), encoding="utf-8"))
    m = log["final"]
    metrics = (f"| 項目 | 値 |\n|---|---|\n"
               f"| パラメータ数 | {log['n_params']:,} (埋め込みと出力層は共有) |\n"
               f"| 学習ステップ数 | {log['steps']:,} (1 ステップ {log['tokens_per_step']:,} トークン) |\n"
               f"| 学習に使ったトークン数 | {log['tokens_seen']:,} (学習用トークン列 {m['train_tokens']:,} の "
               f"{log['tokens_seen'] / m['train_tokens']:.2f} 周分) |\n"
               f"| 学習時間 (壁時計、評価を含み、再開で捨てた分は含まない) | {log['minutes']:.1f} 分 |\n"
               f"| 検証用データ | {m['val_works']} 作品, {m['val_chars']:,} 文字, {m['val_tokens']:,} トークン "
               f"(1 トークンあたり {m['chars_per_token']:.2f} 文字) |\n\n"
               f"| 検証交差エントロピー | nats/文字 | bits/文字 |\n|---|---|---|\n"
               f"| 本モデル | {m['model_nats_per_char']:.4f} | {m['model_nats_per_char'] / math.log(2):.4f} |\n"
               f"| 文字バイグラム (加算スムージング) | {m['bigram_nats_per_char']:.4f} | "
               f"{m['bigram_nats_per_char'] / math.log(2):.4f} |\n\n"
               f"本モデルの値は文字バイグラムより **{m['reduction_pct']:.1f} % 低い**。")
    lines = []
    for i, p in enumerate(PROMPTS):
        x = tok(p, return_tensors="pt")
        g = model.generate(**x, max_new_tokens=48, do_sample=False, pad_token_id=tok.eos_token_id)
        torch.manual_seed(i)
        s = model.generate(**x, max_new_tokens=48, do_sample=True, temperature=0.8, top_k=50,
                           pad_token_id=tok.eos_token_id)
        for kind, ids in (("貪欲", g), ("サンプリング", s)):
            text = tok.decode(ids[0], skip_special_tokens=True).rstrip("\ufffd").replace("\n", "⏎")
            lines.append(f"- {kind}: 「{p}」→ `{text}`")
    samples = "\n".join(lines)
    path = os.path.join(out, "README.md")
    card = open(path, encoding="utf-8").read()
    for name, body in (("metrics", metrics), ("samples", samples)):
        a, b = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        card = card[:card.index(a) + len(a)] + "\n" + body + "\n" + card[card.index(b):]
    open(path, "w", encoding="utf-8").write(card)
    return samples
