"""Lab 7's readings and predictions (course/labs/lab07_explain.py): each verdict follows the
measured numbers, the explanations name causes that can raise the ratio, and the saved notebook's
verdicts agree with the numbers saved beside them."""
import json
from pathlib import Path
from types import SimpleNamespace

from course.labkit.predictions import HELD, MISSED
from course.labs import lab07
from course.labs import lab07_explain as ex

ROOT = Path(__file__).resolve().parents[2]


def fake_res(tp1_decode=2.2, tpn_decode=15.0, decode_comm=9.0, prefill_comm=12.0, same=True):
    """A run as lab07.run_tp_lab returns it (prompt 256, batch 1, TP=2, the default 6 layers)."""
    runs = {1: {"decode_ms": tp1_decode, "prefill_ms": 20.0, "decode_comm_ms": 0.0,
                "prefill_comm_ms": 0.0},
            2: {"decode_ms": tpn_decode, "prefill_ms": 40.0, "decode_comm_ms": decode_comm,
                "prefill_comm_ms": prefill_comm}}
    for r in runs.values():
        r["decode_comm_share"] = r["decode_comm_ms"] / r["decode_ms"]
        r["prefill_comm_share"] = r["prefill_comm_ms"] / r["prefill_ms"]
    return {"tp": 2, "runs": runs, "allreduces_per_step": 12, "same_tokens": same,
            "decode_allreduce_bytes": 15_360, "prefill_allreduce_bytes": 15_360 * 256,
            "threads_per_config": {1: (2, 1), 2: (1, 2)}, "lm_head_share": 0.26,
            "decode_compute_ratio": (tpn_decode - decode_comm) / tp1_decode,
            "prefill_compute_ratio": (40.0 - prefill_comm) / 20.0}


def held(res):
    return [p.held for p in ex.tp_predictions(ex.facts(res))]


def test_verdicts_follow_the_numbers():
    assert held(fake_res()) == [True, True, True, True]
    assert held(fake_res(tp1_decode=20.0))[0] is False                    # TP=2 faster: planted
    assert held(fake_res(decode_comm=2.0, prefill_comm=30.0))[1] is False  # prefill share higher
    # per call: decode 0.75 ms, prefill 100 ms: grows with the 256x bytes, as a link-bound one would
    assert held(fake_res(prefill_comm=1200.0))[2] is False
    assert held(fake_res(same=False))[3] is False
    missed = ex.tp_predictions(ex.facts(fake_res(tp1_decode=20.0)))[0].verdict()
    assert missed.startswith(MISSED) and "TP=1 20.0 ms" in missed and "考えられる理由" in missed


def test_facts_line_round_trips():
    f = ex.facts(fake_res())
    back = ex.parse_facts_line(ex.facts_line(f))
    assert back["tp"] == 2 and back["same_tokens"] is True
    assert all(abs(back[k] - v) <= 1e-5 * abs(v) for k, v in f.items() if isinstance(v, float))


def test_lm_head_share_of_the_default_shape_by_hand():
    cfg = SimpleNamespace(hidden_size=320, head_dim=64, num_heads=5, num_kv_heads=5,
                          intermediate_size=864, num_layers=6, vocab_size=8192)
    per_layer = 4 * 320 * 320 + 3 * 320 * 864                  # q, k, v, o + gate, up, down
    assert abs(lab07.lm_head_share(cfg) - 8192 * 320 / (6 * per_layer + 8192 * 320)) < 1e-12


def test_ratio_reading_names_what_only_tp_n_has():
    text = ex.ratio_reading(fake_res())
    assert "打ち消し合います" in text and "lm_head" in text and "26%" in text
    assert "1 スレッドで計算" in text and "1 を超えた分は" in text
    assert "層ごとの固定の時間と、プロセスどうしの待ち合わせ" not in text


def test_ratio_reading_does_not_explain_an_excess_the_run_did_not_show():
    text = ex.ratio_reading(fake_res(tp1_decode=200.0))          # TP=1 slowed down (a busy machine)
    assert "1 以下" in text and "1 を超えた分は" not in text


def test_batch_and_tp_dp_readings_print_the_numbers():
    hist = [{"batch_size": b, "tp_size": k, "decode_ms": d, "decode_comm_share": s}
            for b, k, d, s in ((1, 1, 2.2, 0), (1, 2, 21.5, 0.82), (16, 1, 5.2, 0),
                               (16, 2, 30.0, 0.74))]
    assert "82%・74%" in ex.batch_reading(hist) and "2.2 ms" in ex.batch_reading(hist)
    rows = [{"num_gpus": 4, "tp": 4, "tpot_ms": 24.61, "output_tok_s_per_gpu": 1.0},
            {"num_gpus": 8, "tp": 8, "tpot_ms": 15.84, "output_tok_s_per_gpu": 251.49},
            {"num_gpus": 8, "tp": 4, "tpot_ms": 30.0, "output_tok_s_per_gpu": 177.04}]
    text = ex.tp_dp_reading(rows)
    assert "TP=4 24.6 ms → TP=8 15.8 ms" in text and "TP=8 251.5" in text
    assert "DP=2 177.0" in text


def saved_stream(rel: str, marker: str) -> str:
    nb = json.loads((ROOT / rel).read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"]
                if c["cell_type"] == "code" and marker in "".join(c["source"]))
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")


def test_lab7_saved_verdicts_agree_with_its_saved_numbers():
    text = saved_stream("labs/07_parallelism_lab.ipynb", "tp_predictions")
    line = next(x for x in text.splitlines() if x.startswith("判定に使った値"))
    derived = ex.tp_predictions(ex.parse_facts_line(line))
    saved = [x for x in text.splitlines() if x.startswith((HELD, MISSED))]
    assert len(saved) == len(derived) == 4
    for s, p in zip(saved, derived):
        assert s.startswith(HELD if p.held else MISSED) and p.text in s, (s, p)
