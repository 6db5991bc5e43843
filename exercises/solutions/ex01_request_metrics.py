"""Model solution of exercise 01 (chapter 1): the four per-request metrics, as vLLM's benchmark defines them."""


def request_metrics(arrival_s: float, token_times_s: list[float]) -> dict:
    # TTFT: 到着から最初のトークンまで。Prefill の時間と待ち時間が入ります。
    ttft = token_times_s[0] - arrival_s
    # E2EL: 到着から最後のトークンまで。
    e2el = token_times_s[-1] - arrival_s
    # ITL: 連続する2トークンの間隔（1つ1つの値）。
    itl = [b - a for a, b in zip(token_times_s, token_times_s[1:])]
    # TPOT: 2トークン目以降の平均。1トークンだけのリクエストでは定義できないので None です。
    n = len(token_times_s)
    tpot = (e2el - ttft) / (n - 1) if n > 1 else None
    return {"ttft": ttft, "tpot": tpot, "itl": itl, "e2el": e2el}
