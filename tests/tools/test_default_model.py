"""同梱の既定モデル (minimal_engine/default_model) と学習スクリプト minimal_engine/tools/train.py のテスト。

どれもオフラインで動き、2 コアの CPU で合計 1 分以内に終わる大きさにしてある。
"""
import gzip
import json
import math
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from minimal_engine.tools import train  # noqa: E402

MODEL_DIR = Path(__file__).resolve().parents[2] / "minimal_engine" / "default_model"

ROUND_TRIP = [
    "吾輩は猫である。名前はまだ無い。",
    "東京の空は、きょうも青い。",
    "ｶﾀｶﾅ（半角）とカタカナ（全角）",
    "ＡＢＣ１２３　全角英数と全角スペース",
    "ASCII: Hello, world! 1+1=2 <tag> & \"quote\" 'x'",
    "一行目\n二行目\n\n  先頭に空白\t タブ\r\nCRLF",
    "推論とは、学習済みのモデルで次のトークンを予測することだ。",
    "ひらがな・カタカナ・漢字・〓・※・「」『』【】…―ー〜",
    " 先頭と末尾の空白 ",
    "絵文字😀と記号①②③、旧字體の國",
    "",
]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(MODEL_DIR)


def test_files_and_size():
    for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json", "train_log.json", "loss_curve.png", "README.md"]:
        assert (MODEL_DIR / name).is_file(), name
    total = sum(p.stat().st_size for p in MODEL_DIR.iterdir() if p.is_file())
    assert total <= 60 * 1024 * 1024, f"default_model is {total / 2**20:.1f} MiB"


def test_config_is_llama():
    cfg = json.loads((MODEL_DIR / "config.json").read_text())
    assert cfg["model_type"] == "llama"
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["max_position_embeddings"] >= 512


def test_model_loads_offline_and_runs(tokenizer):
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR).eval()
    n = sum(p.numel() for p in model.parameters())
    assert 5e6 < n < 40e6
    ids = tokenizer("吾輩は", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)
    assert torch.isfinite(logits).all()
    # 512 位置の入力を受け付ける
    with torch.no_grad():
        assert model(torch.zeros(1, 512, dtype=torch.long)).logits.shape[1] == 512


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_tokenizer_round_trip(tokenizer, text):
    ids = tokenizer(text).input_ids
    assert tokenizer.decode(ids) == text


def test_tokenizer_special_tokens(tokenizer):
    assert tokenizer.eos_token == train.EOS
    assert tokenizer.pad_token_id == tokenizer.eos_token_id
    # BOS は付けない: 「吾輩は」の先頭トークンは普通の文字片
    ids = tokenizer("吾輩は").input_ids
    assert tokenizer.eos_token_id not in ids
    assert len(tokenizer) <= 9000


def _final_metrics():
    return json.loads((MODEL_DIR / "train_log.json").read_text(encoding="utf-8"))["final"]


def test_train_log_metrics():
    f = _final_metrics()
    assert f["model_nats_per_char"] < f["bigram_nats_per_char"]  # 少なくとも文字バイグラムには勝つ
    assert abs(f["reduction_pct"] - 100 * (1 - f["model_nats_per_char"] / f["bigram_nats_per_char"])) < 1e-6
    card = (MODEL_DIR / "README.md").read_text(encoding="utf-8")
    assert f"{f['model_nats_per_char']:.4f}" in card and f"{f['bigram_nats_per_char']:.4f}" in card


def test_model_is_25_percent_better_than_bigram():
    f = _final_metrics()
    assert f["model_nats_per_char"] <= 0.75 * f["bigram_nats_per_char"]


def test_bigram_by_hand():
    # 学習 "abab": 文字 {a, b} + UNK で |V| = 3。文脈の数: <s>:1, a:2, b:1。対: (<s>,a):1, (a,b):2, (b,a):1。
    bg = train.fit_bigram(["abab"])
    assert bg["V"] == 3
    # 検証 "ab": P(a|<s>) = (1+1)/(1+3), P(b|a) = (2+1)/(2+3)
    want = -(math.log(2 / 4) + math.log(3 / 5)) / 2
    assert train.bigram_nats_per_char(bg, ["ab"]) == pytest.approx(want)
    # 未知の文字 "z" は UNK: P(UNK|b) = (0+1)/(1+3)、その次の "a" は未知の文脈 UNK から: 1/3
    want = -(math.log(2 / 4) + math.log(3 / 5) + math.log(1 / 4) + math.log(1 / 3)) / 4
    assert train.bigram_nats_per_char(bg, ["abza"]) == pytest.approx(want)


def test_split_is_deterministic_and_disjoint():
    works = [f"作品{i}" for i in range(100)]
    tr, va = train.split_works(works, seed=0, val_frac=0.03)
    assert len(va) == 3 and len(tr) == 97 and not set(tr) & set(va)
    assert train.split_works(works, seed=0, val_frac=0.03) == (tr, va)
    assert train.split_works(works, seed=1, val_frac=0.03)[1] != va


def test_model_nats_per_char_uniform():
    """一様分布を出すモデルなら、損失は (作品のトークン数 × ln V) / 文字数 になる。"""
    V = 11

    class Uniform(torch.nn.Module):
        def forward(self, x):
            return type("Out", (), {"logits": torch.zeros(*x.shape, V)})()

    import numpy as np
    ids = np.array([0, 5, 6, 7, 0, 8, 9], dtype=np.uint16)
    mask = ids != 0
    got = train.model_nats_per_char(Uniform(), ids, mask, n_chars=10, seq_len=4, batch=2)
    assert got == pytest.approx(5 * math.log(V) / 10, rel=1e-5)


def _tiny_corpus(path):
    docs = ["吾輩は猫である。名前はまだ無い。\nどこで生れたかとんと見当がつかぬ。",
            "東京の空は青い。ＡＢＣとabc、ｶﾅとカナ。",
            "山の上に小さな家があった。そこに老人が住んでいた。",
            "推論とは、モデルが次の語を予測することである。",
            "その夜、私は長い手紙を書いた。\n\n　翌朝、それを出した。"]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i, d in enumerate(docs * 4):
            f.write(json.dumps({"rank": i, "title": "t", "author": "a", "aozora_card": "", "source": "",
                                "text": d}, ensure_ascii=False) + "\n")


def test_smoke_training_run(tmp_path):
    corpus, out = tmp_path / "c.jsonl.gz", tmp_path / "out"
    _tiny_corpus(corpus)
    train.main(["--corpus", str(corpus), "--out", str(out), "--vocab", "300", "--d", "32", "--layers", "1",
                "--heads", "2", "--ff", "64", "--ctx", "512", "--seq-len", "32", "--micro-batch", "2",
                "--accum", "1", "--steps", "3", "--warmup", "1", "--val-frac", "0.1", "--eval-docs", "1"])
    for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json", "train_log.json", "loss_curve.png"]:
        assert (out / name).is_file(), name
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.max_position_embeddings == 512
    assert tok.decode(tok("東京の空は\n").input_ids) == "東京の空は\n"
    log = json.loads((out / "train_log.json").read_text(encoding="utf-8"))
    assert log["steps"] == 3 and log["final"]["model_nats_per_char"] > 0
    # --evaluate は保存済みのモデルを同じ検証用作品で測り直す: 学習の最後の値と一致する
    before = log["final"]
    train.main(["--corpus", str(corpus), "--out", str(out), "--evaluate", "--seq-len", "32", "--val-frac", "0.1",
                "--eval-docs", "1"])
    after = json.loads((out / "train_log.json").read_text(encoding="utf-8"))["final"]
    assert after["model_nats_per_char"] == pytest.approx(before["model_nats_per_char"], rel=1e-5)
    assert after["bigram_nats_per_char"] == before["bigram_nats_per_char"]
    # 別の分け方 (--split-seed) で前処理済みトークンを使い回そうとすると、学習の前に止まる
    with pytest.raises(ValueError, match="another train/validation split"):
        train.main(["--corpus", str(corpus), "--out", str(out), "--resume", "--split-seed", "1",
                    "--val-frac", "0.1", "--seq-len", "32", "--steps", "1"])
    # 第 2 段: --init-from で重みと履歴を引き継ぎ、新しい最適化 (Muon) で続ける。学習率 0 なら重みは変わらない
    out2 = tmp_path / "out2"
    train.main(["--corpus", str(corpus), "--out", str(out2), "--init-from", str(out), "--optimizer", "muon",
                "--lr", "0", "--vocab", "300", "--d", "32", "--layers", "1", "--heads", "2", "--ff", "64",
                "--ctx", "512", "--seq-len", "32", "--micro-batch", "2", "--accum", "1", "--steps", "2",
                "--warmup", "1", "--val-frac", "0.1", "--eval-docs", "1"])
    w1, w2 = load_file(out / "model.safetensors"), load_file(out2 / "model.safetensors")
    assert w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1)
    log2 = json.loads((out2 / "train_log.json").read_text(encoding="utf-8"))
    assert log2["steps"] == 5 and [p["steps"] for p in log2["phases"]] == [3, 2]
    assert log2["curve"][-1]["tokens"] == 5 * 2 * 32 and log2["curve"][:len(log["curve"])] == log["curve"]
    # --card はマーカーの間だけを書き換える
    (out / "README.md").write_text("前\n<!-- metrics:begin -->\n古い\n<!-- metrics:end -->\n中\n"
                                   "<!-- samples:begin -->\n<!-- samples:end -->\n後\n", encoding="utf-8")
    train.main(["--card", "--out", str(out)])
    card = (out / "README.md").read_text(encoding="utf-8")
    assert card.startswith("前\n") and card.endswith("後\n") and "古い" not in card
    assert all(f"「{p}」" in card for p in train.PROMPTS) and "nats/文字" in card


def test_distillation_mode(tmp_path):
    """--distill-from: the loss is KL(teacher || student); --init-layers copies the teacher's embedding, norm and
    layers (a student that is the teacher has KL 0); a fresh student's KL falls; a wrong shape is refused."""
    corpus, teacher = tmp_path / "c.jsonl.gz", tmp_path / "teacher"
    _tiny_corpus(corpus)
    shape = ["--vocab", "300", "--heads", "2", "--ctx", "512", "--seq-len", "32", "--micro-batch", "2", "--accum",
             "1", "--warmup", "1", "--val-frac", "0.1", "--eval-docs", "1"]
    train.main(["--corpus", str(corpus), "--out", str(teacher), "--d", "32", "--layers", "2", "--ff", "64",
                "--steps", "30", "--lr", "1e-2", *shape])              # a teacher far from uniform
    copy = tmp_path / "copy"
    (copy / "work").mkdir(parents=True)
    (copy / "work" / "tokenizer.json").write_bytes((teacher / "tokenizer.json").read_bytes())
    common = ["--corpus", str(corpus), "--resume", "--distill-from", str(teacher), *shape]
    train.main(["--out", str(copy), "--d", "32", "--layers", "2", "--ff", "64", "--init-layers", "0,1", "--lr", "0",
                "--steps", "2", *common])
    log = json.loads((copy / "train_log.json").read_text(encoding="utf-8"))
    assert all(abs(loss) < 1e-3 for _, loss in log["train_loss"])          # the student is the teacher
    wt, ws = load_file(teacher / "model.safetensors"), load_file(copy / "model.safetensors")
    assert all(torch.equal(wt[k], ws[k]) for k in wt)
    fresh = tmp_path / "fresh"
    (fresh / "work").mkdir(parents=True)
    (fresh / "work" / "tokenizer.json").write_bytes((teacher / "tokenizer.json").read_bytes())
    train.main(["--out", str(fresh), "--d", "16", "--layers", "1", "--ff", "32", "--lr", "1e-2", "--steps", "30",
                *common])
    losses = [loss for _, loss in json.loads((fresh / "train_log.json").read_text(encoding="utf-8"))["train_loss"]]
    assert losses[0] > 0.1 and sum(losses[-5:]) / 5 < 0.8 * losses[0]
    with pytest.raises(ValueError, match="--init-layers"):
        train.main(["--out", str(fresh), "--d", "16", "--layers", "1", "--ff", "32", "--init-layers", "0",
                    "--steps", "1", *common])
    with pytest.raises(SystemExit, match="--distill-from"):
        train.main(["--corpus", str(corpus), "--out", str(fresh), "--init-layers", "0"])
