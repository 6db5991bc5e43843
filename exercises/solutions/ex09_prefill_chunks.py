"""第9章の演習の解答例：長いプロンプトの Prefill を、Decode を止めないチャンクに分ける計画と、
Disaggregation で、そのプロンプトの KV を Decode 側に運ぶ時間です。"""


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


def handoff_ms(layers: int, kv_heads: int, head_dim: int, prompt_len: int, link_gb_s: float,
               bytes_per_value: int = 2, block_size: int = 16) -> float:
    """プロンプトの KV をブロック単位（block_size トークン）で、全層の K と V をまとめて運ぶ時間 [ms]。
    帯域だけで割った下限です（遅延や、Prefill の計算との重ね合わせは入れません）。"""
    tokens = -(-prompt_len // block_size) * block_size          # ブロック単位に切り上げる
    num_bytes = tokens * layers * 2 * kv_heads * head_dim * bytes_per_value
    return num_bytes / (link_gb_s * 1e9) * 1e3
