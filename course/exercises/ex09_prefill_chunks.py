"""Exercise 9 (chapter 9): chunk_plan(prompt_len, decode_batch, token_budget) -> chunk sizes of a long prefill.

Stall-free batching (Sarathi-Serve, the engine's chunked prefill): every step the decode_batch running requests take
one token each first, and the rest of the budget, token_budget - decode_batch, goes to the next prefill chunk. The
grader checks the plan's sum, that no step exceeds the budget, that the plan uses the fewest steps (any such plan
passes, e.g. an even split), and that an impossible budget is refused with a ValueError; the last case compares with
the chunks the engine really makes, which fill the room from the front and leave the remainder last.
"""
from __future__ import annotations

import numbers

from course.exercises.checks import TIMEOUT_S, case, failed_call, run
from course.exercises.kit import Case, Grader

CASES = [(1000, 8, 256), (512, 0, 128), (100, 4, 512), (2048, 31, 64), (7, 6, 7), (33, 1, 17)]
REFUSED = [(100, 8, 8), (100, 16, 8)]


def reference(prompt_len: int, decode_batch: int, token_budget: int) -> list[int]:
    room = token_budget - decode_batch
    return [room] * (prompt_len // room) + ([prompt_len % room] if prompt_len % room else [])


ENGINE_CASE = (300, 4, 68)         # prompt_len, decode_batch, token_budget: fits the default model's 512 positions


def engine_chunks(prompt_len: int, decode_batch: int, token_budget: int) -> tuple[list[int], float]:
    """The engine's own chunked prefill (max_num_batched_tokens=token_budget) of a prompt_len-token prompt while
    decode_batch requests decode: the prefill tokens of each step until its first token, and the longest of those
    steps in seconds (each decoding request waits that long for its next token: the worst ITL, measured after a
    warm-up step of the same size)."""
    import time

    from minimal_engine import LLM, SamplingParams
    llm = LLM(max_num_batched_tokens=token_budget, max_model_len=512)
    eng = llm.engine
    # warm-up, not measured: a first step of a new shape pays one-off costs (allocations, kernel choice), far above a
    # steady step; a full-budget step (the size of the measured steps) and a few decodes take them here
    llm.generate([[(5 * i) % 500 + 20 for i in range(token_budget)]] + [[11, 12, 13]] * decode_batch,
                 SamplingParams(temperature=0, max_tokens=2, ignore_eos=True), use_tqdm=False)
    decoding = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
    started = set()
    ids = [eng.add_request([11 + i, 12, 13], decoding) for i in range(decode_batch)]
    while len(started) < decode_batch:
        started |= {o.request_id for o in eng.step() if o.token_ids}
    long_id = eng.add_request([(7 * i) % 500 + 20 for i in range(prompt_len)], SamplingParams(temperature=0, max_tokens=1))
    chunks, worst = [], 0.0
    while True:
        t0 = time.perf_counter()
        outs = eng.step()
        worst = max(worst, time.perf_counter() - t0)
        chunks.append(eng.last_step.num_scheduled_tokens - decode_batch)
        if any(o.request_id == long_id for o in outs):
            break
    for rid in ids:
        eng.abort_request(rid)
    llm.close()
    return chunks, worst


def _positive_int(c) -> bool:
    """A positive integer: Python's int or numpy's (numbers.Integral), not a bool."""
    return isinstance(c, numbers.Integral) and not isinstance(c, bool) and c > 0


def check(fn, ctx=None) -> list:
    ctx = ctx if isinstance(ctx, dict) else {}
    limit = float(ctx.get("timeout_s", TIMEOUT_S))      # seconds each call of the learner's function may take
    out = []
    for args in CASES:
        L, d, b = args
        inp = f"prompt_len={L}, decode_batch={d}, token_budget={b}"
        want = reference(*args)
        ok, got, msg = run(fn, *args, timeout_s=limit)
        if not ok:
            out.append(failed_call("計画を作る", inp, str(want), msg))
            continue
        ints = isinstance(got, (list, tuple)) and all(_positive_int(c) for c in got)
        got = [int(c) for c in got] if ints else got         # numpy integers and a tuple are a plan too
        # any plan with the fewest steps that fits passes here; the engine case below asks for its order
        valid = ints and sum(got) == L and max(got) <= b - d and len(got) == len(want)
        if ints and got == want:
            message = ""
        elif valid:
            message = (f"OK（ステップ数 {len(got)} は最小で、予算にも収まっています。エンジンは前から残りの"
                       f"予算いっぱいに詰め、端数を最後に置きます: {want if len(want) <= 12 else want[:6]}）")
        elif not ints:
            message = "正の整数（各ステップのチャンクのトークン数）のリストを返してください。"
            if not isinstance(got, (list, tuple)):
                message += f"返り値の型は {type(got).__name__} でした（numpy の配列なら `.tolist()` でリストにできます）。"
        elif sum(got) != L:
            message = f"チャンクの合計 {sum(got)} がプロンプトの長さ {L} と違います（最後の端数を忘れていませんか）。"
        elif max(got) > b - d:
            message = (f"チャンク {max(got)} に Decode の {d} トークンを足すと予算 {b} を超えます。"
                       "Prefill に使えるのは予算から Decode の分を引いた残りです。")
        else:
            message = "ステップ数が最小ではありません。最後のチャンク以外は、残りの予算をいっぱいに使ってください。"
        shown = repr(got) if not isinstance(got, list) or len(got) <= 12 else f"{got[:6]}… ({len(got)} 個)"
        expected = str(want) if len(want) <= 12 else f"{want[:6]}… ({len(want)} 個)"
        out.append(Case("計画を作る", inp, expected, shown, True, message) if valid and got != want
                   else case("計画を作る", inp, expected, shown, valid, message))
    for L, d, b in REFUSED:
        inp = f"prompt_len={L}, decode_batch={d}, token_budget={b}"
        ok, got, msg = run(fn, L, d, b, timeout_s=limit)
        refused = not ok and "ValueError" in msg
        out.append(case("予算が Decode だけで尽きる", inp, "ValueError", msg if not ok else repr(got)[:100], refused,
                        "予算が Decode の分以下だと Prefill が進みません。ValueError で、何が足りないかを伝えてください。"))
    if ctx.get("engine") is False or not all(c.passed for c in out):
        return out
    L, d, b = ENGINE_CASE
    ok, plan, msg = run(fn, L, d, b)
    plan = [int(c) for c in plan] if ok and isinstance(plan, (list, tuple)) and all(map(_positive_int, plan)) else plan
    eok, res, emsg = run(engine_chunks, L, d, b, timeout_s=120.0)
    if ok and eok:
        chunks, worst = res
        out.append(case("エンジンの chunked prefill と同じ計画か（計測）", f"prompt_len={L}, decode_batch={d}, "
                        f"max_num_batched_tokens={b}", f"エンジンのチャンク {chunks}（最も長いステップ {worst * 1000:.1f} ms）",
                        repr(plan), plan == chunks, "エンジンが実際に分けたチャンクと、あなたの計画が違います。"
                        "エンジンは前から残りの予算いっぱいに詰め、端数を最後に置きます。"))
    return out


GRADER = Grader(id="09_prefill_chunks", chapter=9, title_ja="Prefill をチャンクに分ける計画", check=check, hints=[
    "1ステップの予算のうち、まず Decode 中のリクエストが1トークンずつ使います。Prefill に使えるのはその残りです。",
    "残り room = token_budget − decode_batch のチャンクを並べ、最後に端数を1つ足します。room が 1 未満なら ValueError です。",
    "full, rest = divmod(prompt_len, room); return [room] * full + ([rest] if rest else [])",
])
