"""Exercise 9 (chapter 9): chunk_plan(prompt_len, decode_batch, token_budget) -> chunk sizes of a long prefill, and
handoff_ms(layers, kv_heads, head_dim, prompt_len, link_gb_s, bytes_per_value=2, block_size=16) -> the milliseconds
Disaggregation's KV hand-off of that prompt takes over a link (passed as ``grade(..., handoff_ms=handoff_ms)``).

Hand-off: whole blocks of block_size tokens, all layers, K and V, bandwidth only (no latency, no overlap), graded
against the project's calculators (calc.kv_transfer_bytes / calc.transfer_seconds) on named models' shapes, an FP8 KV
(1 byte per value), prompts that are not a multiple of the block and a block of 64 (the five HANDOFF_CASES).

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

    from course import runtime
    from minimal_engine import LLM, SamplingParams
    runtime.apply_thread_policy()   # the course's thread count (COURSE_THREADS), as the labs: torch's default takes
    # every core; on a loaded 2-core machine a 68-token step then took 0.9-2.0 s against 17-22 ms with 1 thread
    # (blind reading 2026-12-07c ch09 #5)
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


# handoff_ms cases: (model whose shape the calculators know, prompt_len, link name, KV dtype, block_size)
HANDOFF_CASES = [("Llama 3.1 8B", 8192, "InfiniBand NDR (400 Gb/s)", "bf16", 16),
                 ("Llama 3.3 70B", 8192, "InfiniBand NDR (400 Gb/s)", "bf16", 16),
                 ("Llama 3.1 8B", 8192, "NVLink (H100/H200)", "fp8", 16),
                 ("Qwen3-0.6B", 1000, "PCIe 5.0 x16", "bf16", 16),
                 ("Llama 3.1 8B", 100, "PCIe 5.0 x16", "bf16", 64)]
BYTES = {"bf16": 2, "fp8": 1, "float32": 4}


def handoff_reference(model: str, prompt_len: int, link: str, dtype: str, block_size: int) -> float:
    from minimal_engine import calculators as calc
    return calc.transfer_seconds(calc.kv_transfer_bytes(model, prompt_len, dtype, block_size), link) * 1e3


def _handoff_cases(fn, limit: float) -> list:
    from minimal_engine import calculators as calc
    out = []
    if fn is None:
        return [case("KV の受け渡しの時間", "grade(\"09_prefill_chunks\", chunk_plan, handoff_ms=handoff_ms)", "handoff_ms",
                     "渡されていません", False, "2つ目の関数 handoff_ms も grade に渡してください。")]
    for model, n, link, dtype, block in HANDOFF_CASES:
        shape = calc.get_model_shape(model)
        args = (shape.layers, shape.kv_heads, shape.head_dim, n, calc.LINKS_GB_S[link], BYTES[dtype], block)
        inp = (f"{model}（{shape.layers} 層、KV ヘッド {shape.kv_heads}、ヘッド次元 {shape.head_dim}）、{n} トークン、"
               f"{link} {calc.LINKS_GB_S[link]:g} GB/s、値 {BYTES[dtype]} バイト、ブロック {block}")
        want = handoff_reference(model, n, link, dtype, block)
        ok, got, msg = run(fn, *args, timeout_s=limit)
        if not ok:
            out.append(failed_call("KV の受け渡しの時間", inp, f"{want:.3f} ms", msg))
            continue
        num = isinstance(got, (int, float)) and not isinstance(got, bool)
        right = num and abs(got - want) <= 1e-6 * want
        why = ""
        if not num:
            why = "ミリ秒を1つの数（float）で返してください。"
        elif not right:
            tokens = -(-n // block) * block
            per = shape.layers * 2 * shape.kv_heads * shape.head_dim * BYTES[dtype]
            hints = [(n * per / (calc.LINKS_GB_S[link] * 1e9) * 1e3, "ブロック単位に切り上げていません（"
                      f"{n} トークン → {tokens} トークン分を送ります）。"),
                     (want / 2, "K と V の2つを数えてください（×2）。"), (want * 1e-3, "秒ではなくミリ秒で返してください。"),
                     (want / BYTES[dtype], "値のバイト数（bytes_per_value）を掛けてください。")]
            why = "".join(h for v, h in hints if v != want and abs(got - v) <= 1e-6 * v)
            if "K と V" in why and "値のバイト数" in why:           # BF16: both halve the bytes
                why = "半分の値です。K と V の2つ（×2）か、値のバイト数（bytes_per_value）が抜けていませんか。"
            why = why or ("転送量は ceil(prompt_len ÷ block_size) × block_size × 層数 × 2（K と V）× KV ヘッド数 × "
                          "ヘッド次元 × 値のバイト数で、それを帯域（GB/s × 10^9 B/s）で割ります。")
        out.append(case("KV の受け渡しの時間", inp, f"{want:.3f} ms", f"{got:.3f} ms" if num else repr(got)[:60],
                        bool(right), why))
    return out


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
    out += _handoff_cases(ctx.get("handoff_ms"), limit)
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
                        "エンジンは前から残りの予算いっぱいに詰め、端数を最後に置きます"
                        "（Sarathi-Serve のようにほぼ同じ大きさに分ける計画も正しい計画ですが、このエンジンの順番とは違います）。"))
    return out


GRADER = Grader(id="09_prefill_chunks", chapter=9, title_ja="Prefill をチャンクに分ける計画と KV の受け渡しの時間", check=check, hints=[
    "1ステップの予算のうち、まず Decode 中のリクエストが1トークンずつ使います。Prefill に使えるのはその残りです。",
    "残り room = token_budget − decode_batch のチャンクを並べ、最後に端数を1つ足します。room が 1 未満なら ValueError です。",
    "full, rest = divmod(prompt_len, room); return [room] * full + ([rest] if rest else [])。handoff_ms は "
    "-(-prompt_len // block_size) * block_size * layers * 2 * kv_heads * head_dim * bytes_per_value ÷ "
    "(link_gb_s * 1e9) × 1000",
])
