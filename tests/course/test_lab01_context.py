"""Lab 1 課題1 (course/labs/lab01_context.py): the K/V bytes a decode step copies out of the pool, the
reading and the predictions turning with planted numbers, and the saved verdicts agreeing with the saved
numbers."""
import json
import re
from pathlib import Path

from course.labkit.predictions import HELD, MISSED
from course.labs import lab01_context as lc
from minimal_engine.config import ModelConfig

ROOT = Path(__file__).resolve().parents[2]


def test_kv_step_bytes_counts_whole_blocks_of_every_layer():
    cfg = ModelConfig(variant="llama", hidden_size=320, intermediate_size=864, num_layers=6, num_heads=5, num_kv_heads=5,
                      head_dim=64, vocab_size=8192)
    # 2 (K, V) x 6 layers x 5 heads x 64 x 4 bytes = 15,360 B per token; 464 tokens -> 29 blocks of 16
    assert lc.kv_step_bytes(cfg, 4, 464, 16) == 15360 * 464
    assert lc.kv_step_bytes(cfg, 4, 465, 16) == 15360 * 480             # a started block is copied whole
    assert 0.003 < lc.gpu_share(464) < 0.005                              # Llama 3.1 8B BF16: 0.4%


def crow(p, ttft, tpot, kv=1e6, attn=0.5):
    return {"prompt_len": p, "context": p + 16, "ttft_ms": ttft, "tpot_ms": tpot, "kv_bytes": kv,
            "weight_bytes": 40e6, "attn_ms": attn, "gpu_share": 0.004}


def test_predictions_turn_with_a_planted_number():
    rows = [crow(16, 11.3, 6.8), crow(128, 39.1, 8.9), crow(448, 123.6, 9.5)]
    assert [p.held for p in lc.context_predictions(rows)] == [True, True]
    assert "28 倍" in lc.context_predictions(rows)[0].verdict()
    doubled = rows[:-1] + [crow(448, 123.6, 14.0)]                       # TPOT 2.06x
    assert [p.held for p in lc.context_predictions(doubled)] == [True, False]
    linear = rows[:-1] + [crow(448, 11.3 * 29, 9.5)]                    # TTFT grew more than the prompt
    assert lc.context_predictions(linear)[0].held is False


def test_reading_prints_the_rise_and_the_attention_share():
    res = {"rows": [crow(16, 6.4, 5.0, 0.49e6, 0.40), crow(448, 94.8, 6.2, 7.13e6, 0.82)]}
    text = lc.context_reading(res)
    assert "TPOT +1.2 ms のうち" in text and "+0.42 ms（35%）" in text and "重み 40 MB の 18%" in text
    assert "Llama 3.1 8B" in text and "0.4%" in text


def test_measure_context_on_the_default_model():
    res = lc.measure_context(prompts=(8, 40), output_len=4, repeats=1)
    a, b = res["rows"]
    assert a["context"] == 10 and b["kv_bytes"] > a["kv_bytes"] and a["attn_ms"] > 0 and b["tpot_ms"] > 0


def test_lab1_saved_context_verdicts_agree_with_the_saved_numbers():
    nb = json.loads((ROOT / "labs/01_prefill_decode_lab.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and "context_predictions" in "".join(c["source"]))
    text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    found = re.findall(r"^プロンプト +(\d+): TTFT ([\d.]+) ms.*?TPOT ([\d.]+) ms", text, re.M)
    rows = [crow(int(p), float(t), float(q)) for p, t, q in found]
    saved = [x for x in text.splitlines() if x.startswith((HELD, MISSED))]
    assert len(rows) == 3 and len(saved) == 2, text
    for s, p in zip(saved, lc.context_predictions(rows)):
        assert s.startswith(HELD if p.held else MISSED) and p.text in s, (s, p)
