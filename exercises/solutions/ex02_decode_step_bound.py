"""Model solution of exercise 02 (chapter 2): the roofline lower bound of one decode step."""


def decode_step_bound(params: float, bytes_per_param: float, kv_bytes_per_token: float, batch: int,
                      context: int, peak_flops: float, bandwidth: float) -> float:
    # 重みは、バッチ全体で1ステップに1回だけ読みます。
    weight_bytes = params * bytes_per_param
    # KV キャッシュはリクエストごとに別で、各リクエストが文脈の全トークン分を読みます。
    kv_bytes = kv_bytes_per_token * context * batch
    # 演算はリクエストごとに、1パラメータあたり掛け算と足し算の 2 FLOPs です。
    flops = 2 * params * batch
    # 読み出しと演算は重なって進むので、下限は遅いほう（max）です。
    return max((weight_bytes + kv_bytes) / bandwidth, flops / peak_flops)
