"""第7章の演習の解答例：MLP の重みをテンソル並列のシャードに分け、結果を組み合わせます。

重みは nn.Linear と同じ向き [出力, 入力] です。列分割は出力（weight の 0 次元）で、行分割は入力（1 次元）で分けます。
割り切れないときは、エンジン（minimal_engine/features/tensor_parallel/sharding.py の split_sizes）と同じく、
先頭のランクから1つずつ多く持つ、ほぼ等しい連続した区間に分けます（例：5 を 2 つに分けると 3 と 2）。
"""
import torch


def _sizes(total: int, world: int) -> list[int]:
    return [total // world + (1 if r < total % world else 0) for r in range(world)]


def _check(rank: int, world: int, total: int) -> None:
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank は 0 以上 world 未満、world は 1 以上にしてください（rank={rank}, world={world}）")
    if world > total:
        raise ValueError(f"world={world} は分ける次元の大きさ {total} を超えています")


def shard_columns(w: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """列分割：出力の区間 rank を持ちます。w [out, in] -> [out の一部, in]。"""
    _check(rank, world, w.shape[0])
    sizes = _sizes(w.shape[0], world)
    start = sum(sizes[:rank])
    return w[start:start + sizes[rank]]


def shard_rows(w: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """行分割：入力の区間 rank を持ちます。w [out, in] -> [out, in の一部]。"""
    _check(rank, world, w.shape[1])
    sizes = _sizes(w.shape[1], world)
    start = sum(sizes[:rank])
    return w[:, start:start + sizes[rank]]


def combine(parts: list[torch.Tensor], split: str) -> torch.Tensor:
    """各ランクの出力を1つにします。列分割（"columns"）は最後の次元で連結、行分割（"rows"）は部分和なので足し合わせます
    （実際の GPU では all-reduce がこの足し算です）。"""
    if split == "columns":
        return torch.cat(parts, dim=-1)
    if split == "rows":
        return torch.stack(parts).sum(0)
    raise ValueError(f'split は "columns" か "rows" にしてください（{split!r}）')
