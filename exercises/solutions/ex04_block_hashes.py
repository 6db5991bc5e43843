"""Model solution of exercise 04 (chapter 4): chained hashes of the full blocks, as vLLM's prefix caching."""


def block_hashes(token_ids: list[int], block_size: int) -> list:
    out = []
    prev = 0                                  # 最初のブロックの「1つ前のハッシュ」
    for i in range(len(token_ids) // block_size):   # 満杯のブロックだけ（端数はハッシュしません）
        block = tuple(token_ids[i * block_size:(i + 1) * block_size])
        # 1つ前のハッシュを含めるので、一致すれば先頭からすべて同じです。
        prev = hash((prev, block))
        out.append(prev)
    return out
