"""Exercise 04 (chapter 4): block_hashes(token_ids, block_size) -> chained hashes of the full blocks only.

The hash of block i covers block i-1's hash and block i's tokens, so equal hashes mean equal whole prefixes.
Graded on behaviour, not on hash values (any hash function works): the count (full blocks only), equal
prefixes give equal hashes, a change in an early block changes every later hash, equal blocks after different
prefixes differ, swapped blocks and reordered tokens inside a block differ (an XOR or sum chain, or a
sorted or summed block, makes the engine reuse the wrong K/V), token digits joined without a separator
collide ([1, 23, ...] and [12, 3, ...]: a string hash must keep the token and block boundaries); then the engine's prefix cache (BlockManager(block_hashes=...)) runs on the learner's hashes
over a set of prompts (A+B+C and A+X+C among them) and must reuse exactly the blocks it reuses with its
built-in hash (the cached-token counts and every block table), not only as many tokens.
"""
from __future__ import annotations

import random

from course.exercises.kit import Case, Grader, call, failed_call_case
from minimal_engine.engine.block_manager import BlockManager
from minimal_engine.engine.sequence import Sequence
from minimal_engine.sampling_params import SamplingParams


def _get(fn, ids, bs, t):
    r = call(fn, list(ids), bs, timeout_s=t)
    if r.ok:
        try:
            vals = list(r.value)
            [hash(v) for v in vals]
        except TypeError:
            return r, None
        return r, vals
    return r, None


def _bad(name, inp, exp, r, vals):
    if not r.ok:
        return failed_call_case(name, inp, exp, r)
    return Case("戻り値の型", inp, "ハッシュできる値（int や tuple）の list", repr(r.value)[:80], False,
                "戻り値はハッシュできる値（int や tuple）の list にしてください")


def check(fn, ctx: dict) -> list[Case]:
    t = ctx.get("timeout_s", 5.0)
    rng = random.Random(ctx.get("seed", 4))
    bs = 4
    a = [rng.randrange(1000) for _ in range(18)]         # 4 full blocks + 2 tokens
    cases = []
    inp = f"token_ids=（長さ 18）, block_size={bs}"
    r, h = _get(fn, a, bs, t)
    if h is None:
        return [_bad("満杯のブロックの数", inp, "4 個", r, h)]
    cases.append(Case("満杯のブロックの数", inp, "4 個", f"{len(h)} 個", len(h) == 4,
                      "OK" if len(h) == 4 else "満杯のブロックだけをハッシュしてください（端数の 2 トークンは含めません）"))
    b = a[:12] + [x + 1 for x in a[12:]]
    r, hb = _get(fn, b, bs, t)
    same = hb is not None and len(hb) >= 3 and hb[:3] == h[:3]
    cases.append(Case("先頭の3ブロックが同じ", "token_ids の 13 番目以降だけが違う", "先頭3つのハッシュが一致",
                      "一致" if same else "不一致", same,
                      "OK" if same else "同じ先頭のブロックには同じハッシュを返してください（乱数や id() を使っていませんか）"))
    c = [a[0] + 1] + a[1:]
    r, hc = _get(fn, c, bs, t)
    all_diff = hc is not None and len(hc) == len(h) and all(x != y for x, y in zip(h, hc))
    cases.append(Case("最初のブロックだけが違う", "token_ids[0] だけを変える", "4つのハッシュがすべて変わる",
                      "すべて変わった" if all_diff else "変わらないハッシュがある", all_diff,
                      "OK" if all_diff else "1つ前のブロックのハッシュを、次のブロックのハッシュに含めてください（連鎖）"))
    d = a[4:8] + a[4:8]                                   # the same block twice: positions differ by prefix
    r, hd = _get(fn, d, bs, t)
    chained = hd is not None and len(hd) == 2 and hd[0] != hd[1]
    cases.append(Case("同じトークンのブロックが2回続く", f"token_ids={d}", "2つのハッシュが違う",
                      repr(hd)[:60], chained,
                      "OK" if chained else "ブロックのトークンだけでなく、前のブロックのハッシュも含めてください"))
    x, y = a[:4], a[4:8]                                  # two different blocks, in both orders
    r, hxy = _get(fn, x + y, bs, t)
    r2, hyx = _get(fn, y + x, bs, t)
    ordered = hxy is not None and hyx is not None and len(hxy) == len(hyx) == 2 and hxy[1] != hyx[1]
    cases.append(Case("2つのブロックの順番を入れ替える", "A+B と B+A（A、B は4トークンのブロック）",
                      "2つ目のハッシュが違う", "違う" if ordered else "同じ", ordered,
                      "OK" if ordered else "A のあとの B と、B のあとの A は違う先頭です。XOR や足し算のように"
                      "順番を入れ替えても同じになる組み合わせ方ではなく、(前のハッシュ, ブロック) の tuple を"
                      "ハッシュしてください"))
    cases.append(_middle_block_case(fn, a, bs, t))
    r, hp = _get(fn, x[::-1] + y, bs, t)
    inside = hxy is not None and hp is not None and len(hp) == 2 and hp[0] != hxy[0]
    cases.append(Case("ブロックの中のトークンの順番を変える", f"{x} と {x[::-1]}", "1つ目のハッシュが違う",
                      "違う" if inside else "同じ", inside,
                      "OK" if inside else "ブロックのトークンは順番ごとハッシュしてください（sorted や sum を"
                      "使うと、順番の違うトークン列が同じブロックになります）"))
    cases += _ambiguous_cases(fn, t)
    cases.append(_engine_case(fn, rng, t))
    return cases


def _middle_block_case(fn, a, bs, t) -> Case:
    """A+B+C and A+X+C share only block A: C's hash must differ (a hash anchored to block 0, or to the
    block's index, gives C the same hash after B and after X, and the engine reuses C's K/V computed after B)."""
    blk_a, blk_b, blk_c = a[:bs], a[bs:2 * bs], a[2 * bs:3 * bs]
    blk_x = [v + 1 for v in blk_b]
    r, h1 = _get(fn, blk_a + blk_b + blk_c, bs, t)
    r2, h2 = _get(fn, blk_a + blk_x + blk_c, bs, t)
    ok = h1 is not None and h2 is not None and len(h1) == len(h2) == 3 and h1[0] == h2[0] and h1[2] != h2[2]
    return Case("真ん中のブロックだけが違う", "A+B+C と A+X+C（4トークンのブロック、共通は A だけ）",
                "1つ目は同じ、3つ目のハッシュが違う", "そうなった" if ok else "3つ目が同じ（または1つ目が違う）", ok,
                "OK" if ok else "ブロック i のハッシュは、直前のブロック i−1 のハッシュから作ってください。最初の"
                "ブロックのハッシュや位置の番号につなぐだけでは、B のあとの C と X のあとの C が同じになり、"
                "エンジンが別の先頭で計算した K/V を使ってしまいます")


def _ambiguous_cases(fn, t) -> list[Case]:
    """Digits joined without a separator collide: [1, 23, ...] and [12, 3, ...] are both "123...".

    The same within a block and across the boundary of two blocks ([1,2,3,4 | 56,...] and [1,2,3,45 | 6,...]).
    An exact multiple of block_size (16 -> 4) catches a (len - 1) // B count that 18 tokens hide.
    """
    out = []
    n16 = list(range(100, 116))
    r, h16 = _get(fn, n16, 4, t)
    ok = h16 is not None and len(h16) == 4
    out.append(Case("割り切れる長さのブロックの数", "token_ids=（長さ 16）, block_size=4", "4 個",
                    f"{len(h16)} 個" if h16 is not None else repr(r.value)[:60], ok,
                    "OK" if ok else "長さ 16 なら満杯のブロックは 16 // 4 = 4 個です（(len − 1) // B は、"
                    "エンジンの lookup が最後の 1 トークンを残すための数え方で、ハッシュの数ではありません）"))
    why = ("トークンを区切りなしで文字列につなげていませんか。{} は同じ文字列になり、先頭の違うプロンプトが"
           "同じ K/V を使ってしまいます。ブロックは tuple のままハッシュするか、トークンの間とブロックの境目に区切りを入れてください")
    for name, p, q, i in [("数字をつなげると同じになるブロック", [1, 23, 4, 5], [12, 3, 4, 5], 0),
                          ("ブロックの境目をまたいで同じ数字の列", [1, 2, 3, 4, 56, 7, 8, 9], [1, 2, 3, 45, 6, 7, 8, 9], 1)]:
        r, hp = _get(fn, p, 4, t)
        r2, hq = _get(fn, q, 4, t)
        ok = hp is not None and hq is not None and len(hp) == len(hq) == i + 1 and hp[i] != hq[i]
        out.append(Case(name, f"{p} と {q}（block_size=4）", f"{i + 1}つ目のハッシュが違う",
                        "違う" if ok else "同じ（または数が違う）", ok,
                        "OK" if ok else why.format(f"{p} と {q}")))
    return out


def _engine_case(fn, rng, t) -> Case:
    """The engine's prefix cache on the learner's hashes: the same cached tokens as with its own hash."""
    bs = 4
    base = [rng.randrange(1000) for _ in range(16)]
    prompts = [base + [rng.randrange(1000) for _ in range(k)] for k in (3, 6, 1)]
    prompts += [base[:8] + [7] * 9, [base[0] + 1] + base[1:] + [5]]
    prompts += [base[4:8] + [2, 3, 4, 5, 6], base[4:8] + base[:4] + [8]]   # B..., then B+A: not A+B
    x = [v + 1 for v in base[4:8]]                                          # A+B+C, A+X+C: only A is shared
    prompts += [base[:12] + [0], base[:4] + x + base[8:12] + [0], base[:4] + x + base[8:12] + [1]]
    inp = f"{len(prompts)} 個のプロンプト（共通の先頭 16 トークン、A+B+C と A+X+C など）、block_size={bs}"

    def run(hasher):                       # per prompt: cached tokens, and the block table it ends up with
        bm = BlockManager(64, bs, True, block_hashes=hasher)
        out = []
        for i, p in enumerate(prompts):
            seq = Sequence(str(i), None, p, SamplingParams())
            hits = bm.take_cached(seq)
            bm.allocate(seq, len(p))
            out.append((hits, list(seq.block_table)))
            bm.free(seq)
        return out
    expected = run(None)
    counts = [h for h, _ in expected]
    name = "エンジンのプレフィックスキャッシュで使う"
    r = call(run, fn, timeout_s=t)
    if not r.ok:
        return failed_call_case(name, inp, str(counts), r)
    got = [h for h, _ in r.value]
    if got != counts:
        return Case(name, inp, f"キャッシュから得たトークン数 {counts}", f"{got}", False,
                    "エンジンのキャッシュの当たり方が、組み込みのハッシュのときと違います")
    bad = [i for i, (e, g) in enumerate(zip(expected, r.value)) if e[1] != g[1]]
    if bad:
        i = bad[0]
        return Case(name, inp, f"プロンプト {i + 1} のブロックテーブル {expected[i][1]}", f"{r.value[i][1]}", False,
                    "キャッシュから得たトークン数は同じですが、再利用したブロックが違います。先頭の違うプロンプトが"
                    "計算した K/V を使っています。ブロック i のハッシュは、直前のブロックのハッシュから作ってください")
    return Case(name, inp, f"キャッシュから得たトークン数 {counts}、ブロックテーブルも組み込みのハッシュと同じ",
                f"{got}、ブロックテーブルも同じ", True, "OK")


GRADER = Grader(
    id="04_block_hashes", chapter=4, title_ja="プレフィックスキャッシュのハッシュの連鎖",
    check=check,
    hints=["ハッシュするのは満杯のブロック（len(token_ids) // block_size 個）だけです。",
           "ブロック i のハッシュは (ブロック i−1 のハッシュ, ブロック i のトークンの tuple) から作ります。",
           "prev を 0 から始め、満杯のブロックを前から順に見て、prev を「(prev, そのブロックの tuple) のハッシュ」に"
           "置き換えるたびに結果の列へ足します。tuple をそのままキーにすると、数字の区切りの問題も起きません。"])
