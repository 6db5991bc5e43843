"""Lab 7's GPU contrast (予測): the course simulator's communication share of one decode step on a GPU
TP group, per batch, printed beside the CPU batch sweep (``labs/07_parallelism_lab.ipynb``)::

    print(gpu_share_line("llama-3.3-70b", "H100", 8, gpu_comm_shares("llama-3.3-70b", "H100", 8)))

While decode is memory-bound and the weights dominate, a larger batch hardly lengthens the step (the weights
are read once for the whole batch), and the all-reduces' count and latency stay, so the share stays about flat.
At hundreds of requests both terms grow: the KV reads lengthen the step, and each all-reduce carries batch x
hidden values, so its bytes grow too; the share can fall (8B, TP=2) or rise (70B, TP=8: 32% -> 34% at 256).

Provenance of ``allreduce_latency_us`` (26.25 us): ``sim_calibration.fit()`` fits it jointly with the other
constants on all ``fit`` points; its TP>1 rows are gpt-fast Llama-2-70B TP2/4/8 on A100, TensorRT-LLM
Llama-3.3-70B TP2 on H200 and InferenceX DeepSeek-R1 TP4 on MI355X. Holding the other constants and scanning
0-60 us in 1.25 us steps (checked 2026-12-07): the A100 gpt-fast rows alone are best at 15.0 us, the MI355X rows
alone at 27.5 us, all fit points but the MI355X rows at 13.75 us. So the value is not an A100 (hybrid cube mesh)
value; the lab's text says so.
"""
from __future__ import annotations


def gpu_comm_shares(model: str = "llama-3.3-70b", gpu: str = "H100", tp: int = 8, batches=(1, 16, 256),
                    context: int = 1024) -> dict:
    """The simulator's communication share of one decode step on a GPU TP group, per batch
    (``sim_step.step_time_s``): t_comm / t. About flat while the weight reads dominate; with hundreds of
    requests it moves either way (KV reads lengthen the step, the all-reduce bytes grow with the batch)."""
    from minimal_engine.calculators.sim_step import get_hardware, get_sim_model, step_time_s
    m, hw = get_sim_model(model), get_hardware(gpu)
    out = {}
    for b in batches:
        r = step_time_s(m, hw, tp, b, context, 0, context, "bf16", "bf16")
        out[b] = {"share": r["t_comm"] / r["t"], "step_ms": 1000 * r["t"], "bound": r["bound"]}
    return out


def gpu_share_line(model: str, gpu: str, tp: int, shares: dict) -> str:
    bound = {"memory": "メモリ帯域律速", "compute": "演算律速"}
    return (f"{model} / {gpu} / TP={tp}（予測、コンテキスト 1024、BF16、all-reduce の定数は A100・H200・MI355X の TP の公開値にまとめて当てはめた値）の Decode の通信の割合: " + "、".join(
        f"バッチ {b} で {100 * v['share']:.0f}%（1ステップ {v['step_ms']:.1f} ms、{bound[v['bound']]}）"
        for b, v in shares.items()))


__all__ = ["gpu_comm_shares", "gpu_share_line"]
