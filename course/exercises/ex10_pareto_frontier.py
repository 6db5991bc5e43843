"""Exercise 10 (chapter 10): pareto_frontier(points) -> indices of the non-dominated points, both axes higher-is-better.

Graded on hand cases (ties, duplicates, one point, empty), random point sets on a small integer grid (many ties) and
the simulator's sweep (tok/s/user against output tok/s/GPU, two configurations pooled), each against a brute-force
reference written here, not taken from the learner's code.
"""
from __future__ import annotations

import random

from course.exercises.checks import case, failed_call, run
from course.exercises.kit import Grader


def reference(points) -> list[int]:
    """Brute force: i is kept unless some j is >= on both axes and > on one."""
    return [i for i, (x, y) in enumerate(points)
            if not any(a >= x and b >= y and (a > x or b > y) for a, b in points)]


SWEEP = dict(model="llama-3.3-70b", gpu="H200", weight_dtype="fp8", kv_dtype="fp8", input_len=1024, output_len=1024,
             concurrencies=(1, 2, 4, 8, 16, 32, 64, 128, 256))
SWEEP_NAME = "シミュレーターのスイープ（Llama 3.3 70B・1k/1k・FP8、H200×1 と H200×2 TP2、予測）"


def sweep_points() -> list[tuple[float, float]]:
    """(tok/s/user, output tok/s/GPU) of the simulator's sweeps (predicted) of Llama 3.3 70B 1k/1k FP8 on one H200
    and on two H200 with TP2, the lesson's section-1 pair: both trace a curve and they cross."""
    from minimal_engine.calculators.simulator import simulate_sweep
    rows = (simulate_sweep(num_gpus=1, tp=1, **SWEEP) + simulate_sweep(num_gpus=2, tp=2, **SWEEP))
    return [(r["interactivity"], r["output_tok_s_per_gpu"]) for r in rows if r.get("fits", True)]


def _indices(got):
    """A list of integers (Python or numpy) as Python ints; None if it is not one."""
    import numbers
    if not isinstance(got, (list, tuple)) or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool)
                                                      for i in got):
        return None
    return [int(i) for i in got]


def _other_container(got) -> bool:
    """A numpy array, a set or an iterator (a generator): the indices may be right, the container is not."""
    import collections.abc
    return (type(got).__name__ == "ndarray" or isinstance(got, (set, frozenset))
            or isinstance(got, collections.abc.Iterator))


def _cases():
    rng = random.Random(10)
    hand = [("点が1つ", [(1.0, 1.0)]), ("点がない", []),
            ("同じ点が2つ（支配し合わない）", [(2.0, 3.0), (2.0, 3.0), (1.0, 1.0)]),
            ("片方の軸だけ同じ（x が同じで y が小さい点は支配される）", [(2.0, 1.0), (2.0, 3.0), (3.0, 0.5)]),
            ("トレードオフの階段", [(1.0, 5.0), (2.0, 4.0), (3.0, 3.0), (2.5, 2.0), (4.0, 1.0)])]
    rand = [(f"ランダムな {n} 点（整数の格子、重なりあり）", [(float(rng.randint(0, 5)), float(rng.randint(0, 5)))
                                              for _ in range(n)]) for n in (8, 20, 40)]
    return hand + rand


def check(fn, ctx=None) -> list:
    out = []
    sets = _cases()
    try:
        sets.append((SWEEP_NAME, sweep_points()))
    except Exception as e:            # the simulator is read-only here; its failure is not the learner's
        out.append(case("シミュレーターのスイープ", "simulate_sweep()", "-", "-", True, f"スキップ: {e}"))
    for name, pts in sets:
        inp = repr([(round(x, 1), round(y, 1)) for x, y in pts]) if len(pts) <= 20 else f"{len(pts)} 点"
        want = reference(pts)
        ok, got, msg = run(fn, list(pts))
        if not ok:
            out.append(failed_call(name, inp, str(want), msg))
            continue
        idx = _indices(got)
        good = isinstance(got, list) and idx == want
        if good:
            message = ""
        elif _other_container(got):
            message = ("番号は list で返してください（numpy の配列なら `.tolist()`、set なら `sorted(...)`、"
                       "ジェネレーターなら `list(...)` で list にできます）。")
        elif idx is None:
            message = "点そのものではなく、点の番号（int）のリストを返してください（numpy の整数でもかまいません）。"
        elif not isinstance(got, list):
            message = "番号は list で返してください（tuple などではなく）。"
        elif sorted(set(idx)) == want:
            message = "番号は重複なく小さい順に並べてください。"
        elif set(want) - set(idx) and any(pts[i] == pts[j] for i in want for j in want if i != j):
            message = "同じ座標の点どうしは支配し合いません。両方ともフロンティアに残してください。"
        elif set(idx) - set(want):
            message = ("支配される点が残っています。片方の軸が同じでもう一方が小さい点も支配されます"
                       "（「以上」と「より大きい」の組み合わせを確かめてください）。")
        else:
            message = "フロンティアの点が足りません。支配されない点をすべて返してください。"
        out.append(case(name, inp, str(want), repr(got)[:200], good, message))
    return out


GRADER = Grader(id="10_pareto_frontier", chapter=10, title_ja="パレートフロンティアの点を選ぶ", check=check, hints=[
    "点 i を残すのは、ほかのどの点にも支配されないときです。支配は「両方の軸で以上、かつ片方でより大きい」です。",
    "同じ座標の点は互いに支配しません（どちらも「より大きい」軸がないため）。番号は小さい順に返します。",
    "二重ループで書けます: 各 i について、any(a >= x and b >= y and (a > x or b > y) for a, b in points) が偽なら残します。",
])
