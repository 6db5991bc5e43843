"""第9章の演習の解答例：長いプロンプトの Prefill を、Decode を止めないチャンクに分ける計画です。"""


def chunk_plan(prompt_len: int, decode_batch: int, token_budget: int) -> list[int]:
    """各ステップでは Decode 中の decode_batch 個のリクエストが1トークンずつ先に予算を使い、
    残り token_budget - decode_batch トークンを Prefill のチャンクに使います（stall-free batching）。
    返り値はステップごとのチャンクの大きさ（合計は prompt_len）。"""
    room = token_budget - decode_batch
    if prompt_len < 1:
        raise ValueError(f"prompt_len は 1 以上にしてください（{prompt_len}）")
    if room < 1:
        raise ValueError(f"token_budget={token_budget} は decode_batch={decode_batch} より大きくしてください"
                         "（Decode だけで予算を使い切ると Prefill が進みません）")
    full, rest = divmod(prompt_len, room)
    return [room] * full + ([rest] if rest else [])
