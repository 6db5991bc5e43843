"""Lab 1 課題1 (course/labs/lab01_context.py): the K/V bytes a decode step copies out of the pool, the
reading and the predictions turning with planted numbers, and the saved verdicts agreeing with the saved
numbers."""
import json
import re
from pathlib import Path

from course.labkit.spread import verdict_state
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


def crow(p, ttft, tpot, kv=1e6, attn=0.5, **ranges):
    return {"prompt_len": p, "context": p + 16, "ttft_ms": ttft, "tpot_ms": tpot, "kv_bytes": kv,
            "weight_bytes": 40e6, "attn_ms": attn, "gpu_share": 0.004, **ranges}


def test_predictions_turn_with_a_planted_number():
    rows = [crow(16, 11.3, 6.8), crow(128, 39.1, 8.9), crow(448, 123.6, 9.5)]
    assert [p.held for p in lc.context_predictions(rows)] == [True, True]
    assert "28 倍" in lc.context_predictions(rows)[0].verdict()
    doubled = rows[:-1] + [crow(448, 123.6, 14.0)]                       # TPOT 2.06x
    assert [p.held for p in lc.context_predictions(doubled)] == [True, False]
    linear = rows[:-1] + [crow(448, 11.3 * 29, 9.5)]                    # TTFT grew more than the prompt
    assert lc.context_predictions(linear)[0].held is False
    fell = rows[:-1] + [crow(448, 123.6, 6.0)]                          # TPOT fell: 'grows' cannot hold
    assert lc.context_predictions(fell)[1].held is False and "短くなった" in lc.context_predictions(fell)[1].verdict()
    # the saved loaded run: the ranges overlap, so the run cannot say TPOT grew
    noisy = [crow(16, 24.1, 19.8, tpot_ms_min=16.3, tpot_ms_max=32.3), crow(128, 92.1, 26.6),
             crow(448, 267.7, 21.4, tpot_ms_min=20.3, tpot_ms_max=22.6)]
    p = lc.context_predictions(noisy)[1]
    assert p.held is None and p.verdict().startswith("判定できません") and "16.3〜32.3" in p.verdict()


def test_reading_prints_the_rise_and_the_attention_share():
    res = {"rows": [crow(16, 6.4, 5.0, 0.49e6, 0.40), crow(448, 94.8, 6.2, 7.13e6, 0.82)]}
    text = lc.context_reading(res)
    assert "TPOT +1.2 ms。このうち" in text and "+0.42 ms（35%）" in text and "重み 40 MB の 18%" in text
    assert "残りの +0.78 ms（65%）は、このセルでは内訳を出していません" in text and "確かめていません" in text
    assert "Llama 3.1 8B" in text and "0.4%" in text
    # the saved loaded run: 19.8 (16.3-32.3) -> 21.4 (20.3-22.6) ms, a rise within the noise: no share printed
    noisy = {"rows": [crow(16, 24.1, 19.8, 0.49e6, 0.52, tpot_ms_min=16.3, tpot_ms_max=32.3),
                      crow(448, 267.7, 21.4, 7.13e6, 1.11, tpot_ms_min=20.3, tpot_ms_max=22.6)]}
    text = lc.context_reading(noisy)
    assert "範囲内なので、内訳は出しません" in text and "%）。" not in text.splitlines()[2]


def test_measure_context_on_the_default_model():
    res = lc.measure_context(prompts=(8, 40), output_len=4, repeats=1)
    a, b = res["rows"]
    assert a["context"] == 10 and b["kv_bytes"] > a["kv_bytes"] and a["attn_ms"] > 0 and b["tpot_ms"] > 0


def test_lab1_saved_context_verdicts_agree_with_the_saved_numbers():
    nb = json.loads((ROOT / "labs/01_prefill_decode_lab.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and "context_predictions" in "".join(c["source"]))
    text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    ms = r"([\d.]+) ms(?:（([\d.]+)〜([\d.]+)）)?"
    found = re.findall(rf"^プロンプト +(\d+): TTFT {ms}、TPOT {ms}", text, re.M)
    rows = []
    for p, t, t0, t1, q, q0, q1 in found:
        ranges = {k: float(v) for k, v in zip(("ttft_ms_min", "ttft_ms_max", "tpot_ms_min", "tpot_ms_max"),
                                              (t0, t1, q0, q1)) if v}
        rows.append(crow(int(p), float(t), float(q), **ranges))
    saved = [x for x in text.splitlines() if verdict_state(x) != ""]
    assert len(rows) == 3 and len(saved) == 2, text
    for s, p in zip(saved, lc.context_predictions(rows)):
        assert verdict_state(s) is p.held and p.text in s, (s, p)
