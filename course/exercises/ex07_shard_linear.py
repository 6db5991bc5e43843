"""Exercise 7 (chapter 7): shard_columns, shard_rows and combine for a tensor-parallel SwiGLU MLP.

The learner passes shard_columns with shard_rows= and combine= as options (grade() takes only a function; check() also
takes an object/dict with the three, as the tests do). Weights are [out, in] like nn.Linear:
column split = output features (dim 0), row split = input features (dim 1); an uneven split gives the first ranks one
more, as the engine's minimal_engine/features/tensor_parallel/sharding.split_sizes does. The grader checks each shard
against split_sizes, then runs a sharded MLP with the learner's functions for world 1, 2, 3 (3 splits the
intermediate size 10 unevenly) and compares it with the unsharded MLP; a rank outside [0, world) (2 and -1 for world 2)
must be refused by both shard functions. A shard of the right shape with the wrong rows (an interleaved w[r::world]) is told that shards are contiguous.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course.exercises.checks import case, failed_call, run
from course.exercises.kit import Grader
from minimal_engine.features.tensor_parallel.sharding import split_sizes

NAMES = ("shard_columns", "shard_rows", "combine")


def _parts(obj, ctx):
    """grade("07_shard_linear", shard_columns, shard_rows=..., combine=...) or an object/dict with the three."""
    if callable(obj) and not hasattr(obj, "shard_rows"):
        ctx = ctx if isinstance(ctx, dict) else {}
        return {"shard_columns": obj, "shard_rows": ctx.get("shard_rows"), "combine": ctx.get("combine")}
    get = obj.get if isinstance(obj, dict) else (lambda k: getattr(obj, k, None))
    return {k: get(k) for k in NAMES}


def _weights():
    g = torch.Generator().manual_seed(7)
    hidden, inter = 6, 10
    return (torch.randn(3, hidden, generator=g), torch.randn(inter, hidden, generator=g),
            torch.randn(inter, hidden, generator=g), torch.randn(hidden, inter, generator=g))


def _mlp_sharded(fns, x, gate, up, down, world):
    partial, hs = [], []
    for r in range(world):
        h = F.silu(x @ fns["shard_columns"](gate, r, world).T) * (x @ fns["shard_columns"](up, r, world).T)
        hs.append(h)
        partial.append(h @ fns["shard_rows"](down, r, world).T)
    return fns["combine"](hs, "columns"), fns["combine"](partial, "rows")


def _placement_message(w, got, dim: int, r: int, world: int, start: int, n: int) -> str:
    """Right shape, wrong rows/columns: an interleaved w[r::world], a contiguous block at the wrong offset (e.g. the
    remainder given to the last rank), or something else (blind reading 2026-12-07d ch07 #5)."""
    head = f"形は合っていますが、中身が違います。各ランクは連続した区間を持ちます（ランク {r} は {dim} 次元の {start} から {n} 個）。"
    inter = torch.equal(got, w.index_select(dim, torch.arange(r, w.shape[dim], world)))
    offs = [o for o in range(w.shape[dim] - n + 1) if torch.equal(got, w.narrow(dim, o, n))]
    if offs:
        also = "（w[r::world] の飛び飛びの取り方でも、ここでは同じ中身になります）" if inter else ""
        return (head + f"取り出した区間は {offs[0]} から始まっています{also}。ランク {r} の始まりは、"
                "それより前のランクの大きさの合計です（余りは先頭のランクから1つずつ配ります）。")
    return head + ("w[r::world] のような飛び飛びの取り方になっています。" if inter else "")


def check(fn, ctx=None) -> list:
    fns = _parts(fn, ctx)
    missing = [k for k, v in fns.items() if not callable(v)]
    if missing:
        return [case("関数がそろっているか", "grade(\"07_shard_linear\", shard_columns, shard_rows=…, combine=…)", ", ".join(NAMES), "足りない: " + ", ".join(missing),
                     False, f"{', '.join(missing)} が見つかりません。grade に shard_rows=shard_rows, combine=combine も渡してください。")]
    out, bad_shards = [], set()          # which shard functions failed a case: the MLP message points there
    w = torch.arange(5 * 4, dtype=torch.float32).reshape(5, 4)
    for kind, dim in (("shard_columns", 0), ("shard_rows", 1)):
        for world in (2, 3):
            size = w.shape[dim]
            sizes = split_sizes(size, world)
            for r in range(world):
                start = sum(sizes[:r])
                want = w.narrow(dim, start, sizes[r])
                inp = f"{kind}(w [5, 4], rank={r}, world={world})"
                ok, got, msg = run(fns[kind], w.clone(), r, world)
                if not ok:
                    bad_shards.add(kind)
                    out.append(failed_call(f"{kind} のシャード", inp, f"形 {list(want.shape)}", msg))
                    continue
                good = isinstance(got, torch.Tensor) and got.shape == want.shape and torch.equal(got, want)
                bad_shards |= set() if good else {kind}
                if good:
                    message = ""
                elif isinstance(got, torch.Tensor) and got.shape[1 - dim] != w.shape[1 - dim]:
                    message = ("分ける次元が違います。重みは [出力, 入力] です。列分割は出力（0 次元）、"
                               "行分割は入力（1 次元）で分けます。")
                elif isinstance(got, torch.Tensor) and got.shape == want.shape:
                    message = _placement_message(w, got, dim, r, world, start, sizes[r])
                else:
                    message = (f"割り切れないときは先頭のランクから1つずつ多く持たせます（{size} を {world} つに分けると "
                               f"{sizes}）。端数を捨てたり最後のランクに寄せたりしていませんか。")
                out.append(case(f"{kind} のシャード", inp, f"形 {list(want.shape)}（{dim} 次元の {start} から {sizes[r]} 個）",
                                f"形 {list(got.shape)}" if isinstance(got, torch.Tensor) else repr(got)[:80], good, message))
    x, gate, up, down = _weights()
    h_full = F.silu(x @ gate.T) * (x @ up.T)
    y_full = h_full @ down.T
    for world in (1, 2, 3):
        inp = f"SwiGLU MLP（hidden 6, intermediate 10）、world={world}"
        ok, got, msg = run(_mlp_sharded, fns, x, gate, up, down, world)
        if not ok:
            out.append(failed_call("分けた MLP = 分けない MLP", inp, "同じ出力", msg))
            continue
        h, y = got
        h_ok = isinstance(h, torch.Tensor) and h.shape == h_full.shape and torch.allclose(h, h_full, atol=1e-5)
        y_ok = isinstance(y, torch.Tensor) and y.shape == y_full.shape and torch.allclose(y, y_full, atol=1e-4)
        if h_ok and y_ok:
            message = ""
        elif bad_shards:
            message = (f"{'・'.join(sorted(bad_shards))} のシャードの確かめで不合格になっています。まずそちらを直してください"
                       "（シャードが違うと、combine が正しくても MLP の出力は合いません）。")
        elif not h_ok:
            message = "列分割した層の出力は、各ランクが別々の列を持つので、最後の次元で連結（combine(..., \"columns\")）します。"
        else:
            message = "行分割した層の出力は部分和です。連結ではなく、全ランクの分を足し合わせます（GPU では all-reduce）。"
        if not h_ok:     # the columns' combine failed: show h (y may still match when the rows' combine is right)
            got_s = ("列分割の出力 h の最大の差 " + f"{(h - h_full).abs().max():.2e}" if isinstance(h, torch.Tensor)
                     and h.shape == h_full.shape else f"列分割の出力 h の形 {list(getattr(h, 'shape', []))}（正しくは {list(h_full.shape)}）")
        elif isinstance(y, torch.Tensor) and y.shape == y_full.shape:
            got_s = f"最大の差 {(y - y_full).abs().max():.2e}"
        else:
            got_s = f"形 {list(getattr(y, 'shape', []))}"
        out.append(case("分けた MLP = 分けない MLP", inp, f"形 {list(y_full.shape)}、差 ≤ 1e-4", got_s, h_ok and y_ok, message))
    for rank in (2, -1):                 # -1: a tensor_split(...)[rank] would return the last shard
        for kind in ("shard_columns", "shard_rows"):
            ok, got, msg = run(fns[kind], w.clone(), rank, 2)
            out.append(case("範囲外のランクを断る", f"{kind}(w, rank={rank}, world=2)", "ValueError",
                            msg if not ok else "例外なし", not ok and "ValueError" in msg,
                            "rank は 0〜world−1 です。範囲外（負の数も）なら ValueError で伝えてください。"))
    return out


GRADER = Grader(id="07_shard_linear", chapter=7, title_ja="MLP の重みをテンソル並列に分ける", check=check, hints=[
    "gate と up は出力で分け（列分割、通信なし）、down は入力で分けます（行分割、部分和を足し合わせる）。",
    "重みは [出力, 入力] です。列分割は w[start:start+n]、行分割は w[:, start:start+n]。割り切れないときは先頭のランクが1つ多く持ちます。",
    "sizes = [total // world + (1 if r < total % world else 0) for r in range(world)]; start = sum(sizes[:rank])。"
    "combine は \"columns\" なら torch.cat(parts, -1)、\"rows\" なら torch.stack(parts).sum(0) です。",
])
