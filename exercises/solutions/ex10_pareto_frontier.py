"""第10章の演習の解答例：パレートフロンティアにある点の番号を求めます（両軸とも大きいほどよい）。"""


def pareto_frontier(points: list[tuple[float, float]]) -> list[int]:
    """点 i は、別の点 j が両方の軸で i 以上で、少なくとも一方で i より大きいとき支配されます。
    同じ座標の点どうしは支配し合いません。支配されない点の番号を小さい順に返します。"""
    keep = []
    for i, (x, y) in enumerate(points):
        dominated = any(a >= x and b >= y and (a > x or b > y) for j, (a, b) in enumerate(points) if j != i)
        if not dominated:
            keep.append(i)
    return keep
