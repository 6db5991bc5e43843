"""Model solution of exercise 02 (chapter 2): the roofline lower bound of one decode step."""


def decode_step_bound(weight_bytes: float, kv_bytes: float, flops: float, peak_flops: float,
                      bandwidth: float) -> float:
    # メモリ側：1ステップで重みを1回と、各リクエストの KV キャッシュを読みます。
    memory_s = (weight_bytes + kv_bytes) / bandwidth
    # 演算側：そのステップの FLOPs をピーク演算性能で割ります。
    compute_s = flops / peak_flops
    # 読み出しと演算は重なって進むので、下限は遅いほう（max）です。
    return max(memory_s, compute_s)
