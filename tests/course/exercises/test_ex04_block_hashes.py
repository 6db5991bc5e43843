"""Exercise 04: the model solution passes (also inside the engine's prefix cache); typical mistakes fail."""

import pytest

from course.exercises import grade
from solution_loader import load


def solution():
    return load("ex04_block_hashes", "block_hashes")


def test_solution_passes():
    r = grade("04_block_hashes", solution())
    assert r.passed, str(r)


def not_chained(ids, bs):
    return [hash(tuple(ids[i * bs:(i + 1) * bs])) for i in range(len(ids) // bs)]


def hashes_partial(ids, bs):
    out, prev = [], 0
    for i in range(0, len(ids), bs):
        prev = hash((prev, tuple(ids[i:i + bs])))
        out.append(prev)
    return out


def unhashable(ids, bs):
    return [list(ids[i * bs:(i + 1) * bs]) for i in range(len(ids) // bs)]


def xor_chain(ids, bs):           # blind reading 2026-12-07 ch4 #1: commutative, passed before
    out, prev = [], 0
    for i in range(len(ids) // bs):
        prev ^= hash(tuple(ids[i * bs:(i + 1) * bs]))
        out.append(prev)
    return out


def sum_chain(ids, bs):
    out, prev = [], 0
    for i in range(len(ids) // bs):
        prev += hash(tuple(ids[i * bs:(i + 1) * bs]))
        out.append(prev)
    return out


def sorted_block(ids, bs):       # order-blind inside a block: passed before
    out, prev = [], 0
    for i in range(len(ids) // bs):
        prev = hash((prev, tuple(sorted(ids[i * bs:(i + 1) * bs]))))
        out.append(prev)
    return out


def summed_block(ids, bs):
    out, prev = [], 0
    for i in range(len(ids) // bs):
        prev = hash((prev, sum(ids[i * bs:(i + 1) * bs])))
        out.append(prev)
    return out


def joined_digits(ids, bs):       # blind reading 2026-12-07 ch4b #1: [1,23,...] == [12,3,...], passed before
    out, p = [], ""
    for i in range(len(ids) // bs):
        p += "".join(map(str, ids[i * bs:(i + 1) * bs]))
        out.append(hash(p))
    return out


def joined_blocks(ids, bs):       # separator inside a block, none at the block boundary
    out, p = [], ""
    for i in range(len(ids) // bs):
        p += ",".join(map(str, ids[i * bs:(i + 1) * bs]))
        out.append(hash(p))
    return out


def separated(ids, bs):           # a string chain with separators everywhere is right
    out, p = [], ""
    for i in range(len(ids) // bs):
        p += "|" + ",".join(map(str, ids[i * bs:(i + 1) * bs]))
        out.append(hash(p))
    return out


def minus_one_count(ids, bs):     # the engine's lookup count (len - 1) // B, not the number of full blocks
    out, prev = [], 0
    for i in range((len(ids) - 1) // bs):
        prev = hash((prev, tuple(ids[i * bs:(i + 1) * bs])))
        out.append(prev)
    return out


def anchored_to_first(ids, bs):   # blind reading 2026-12-07c ch04 #1: h_i = hash(h_0, block_i), passed before
    out, first = [], 0
    for i in range(len(ids) // bs):
        h = hash((first, tuple(ids[i * bs:(i + 1) * bs])))
        first = h if i == 0 else first
        out.append(h)
    return out


def block_and_index(ids, bs):     # hash(block_0, block_i, i): also passed before
    return [hash((tuple(ids[:bs]), tuple(ids[i * bs:(i + 1) * bs]), i)) for i in range(len(ids) // bs)]


def whole_prefix(ids, bs):        # prefix-unique without a chain: right
    return [hash(tuple(ids[:(i + 1) * bs])) for i in range(len(ids) // bs)]


def test_whole_prefix_hash_passes():
    r = grade("04_block_hashes", whole_prefix)
    assert r.passed, str(r)


@pytest.mark.parametrize("fn", [anchored_to_first, block_and_index])
def test_hash_not_chained_to_the_previous_block_fails_twice(fn):
    r = grade("04_block_hashes", fn)
    failed = {c.name: c for c in r.cases if not c.passed}
    assert set(failed) == {"真ん中のブロックだけが違う", "エンジンのプレフィックスキャッシュで使う"}, str(r)
    engine = failed["エンジンのプレフィックスキャッシュで使う"]    # same counts, another block reused
    assert "再利用したブロックが違います" in engine.message and "ブロックテーブル" in engine.expected


def test_separated_string_chain_passes():
    r = grade("04_block_hashes", separated)
    assert r.passed, str(r)


@pytest.mark.parametrize("fn, promised", [(joined_digits, "区切りなしで"), (joined_blocks, "区切りなしで"),
                                          (minus_one_count, "16 // 4 = 4"),(not_chained, "前のブロックのハッシュも含め"),
                                          (hashes_partial, "満杯のブロックだけ"),
                                          (unhashable, "ハッシュできる値"),
                                          (xor_chain, "XOR や足し算"),
                                          (sum_chain, "XOR や足し算"),
                                          (sorted_block, "順番ごとハッシュ"),
                                          (summed_block, "順番ごとハッシュ")])
def test_wrong_solutions_fail_with_their_message(fn, promised):
    r = grade("04_block_hashes", fn)
    assert not r.passed
    assert any(promised in c.message for c in r.cases if not c.passed), str(r)


def test_raising_and_looping_are_reported():
    def looping(ids, bs):
        while True:
            pass
    r = grade("04_block_hashes", lambda ids, bs: 1 / 0)
    assert not r.passed and any("ZeroDivisionError" in c.message for c in r.cases)
    r = grade("04_block_hashes", looping, timeout_s=0.2)
    assert not r.passed and any("秒以内に終わりませんでした" in c.message for c in r.cases)


def test_unhashable_return_is_named_as_a_type_problem():
    # blind reading 2026-12-07b reviews6 ch04 #7: not "満杯のブロックの数 / 期待: 4 個"
    r = grade("04_block_hashes", unhashable)
    failed = [c for c in r.cases if not c.passed]
    assert [c.name for c in failed] == ["戻り値の型"], str(r)
    assert "ハッシュできる値" in failed[0].expected
