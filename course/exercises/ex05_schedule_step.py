"""Exercise 05 (chapter 5): schedule_step(running, waiting, token_budget, max_num_seqs) -> one step's plan.

One continuous-batching step with chunked prefill, the engine's rule (minimal_engine/engine/scheduler.py):
running requests first, in order, each taking min(tokens left, budget left) (1 for a decode, a chunk for a
partly prefilled prompt); then waiting requests in arrival order, while budget and sequence slots last, each
taking min(tokens left, budget left). ``running`` and ``waiting`` are lists of (request_id, tokens left); the plan is
a list of (request_id, num_tokens) in that order.

Graded on hand cases (each breaks one habit: decodes first, the budget, max_num_seqs, chunking, arrival order),
then on random queues stepped until every request has finished: budget and slots never exceeded, decodes
first, nobody starved, the plan equal to the rule's at every step. Then the engine runs with the learner's
function as its scheduling policy (LLM(scheduler_policy=...)): the greedy tokens must be those of the engine's
own scheduler, and the report shows both runs' output tok/s (measured).
"""
from __future__ import annotations

import random
import time

from course.exercises.checks import TIMEOUT_S, case, failed_call, run
from course.exercises.kit import Grader


def reference(running, waiting, token_budget, max_num_seqs):
    plan, budget = [], token_budget
    for rid, left in running:
        if budget == 0:
            break
        plan.append((rid, min(left, budget)))
        budget -= plan[-1][1]
    slots = max_num_seqs - len(running)
    for rid, left in waiting:
        if budget == 0 or slots == 0:
            break
        plan.append((rid, min(left, budget)))
        budget -= plan[-1][1]
        slots -= 1
    return plan


# (name, running, waiting, token_budget, max_num_seqs, message when the learner's plan differs)
CASES = [
    ("Decode 2件と新しいプロンプト", [("a", 1), ("b", 1)], [("c", 10)], 8, 4,
     "Decode 中のリクエストに1トークンずつ配ってから、残りの予算を新しいプロンプトのチャンクに使います。"),
    ("予算が Decode だけで尽きる", [("a", 1), ("b", 1), ("c", 1)], [("d", 5)], 2, 8,
     "予算を超えて配ってはいけません。Decode も予算の中で、先に来たものから配ります。"),
    ("max_num_seqs で受け入れが止まる", [("a", 1), ("b", 1)], [("c", 3), ("d", 3)], 100, 3,
     "同時に動くリクエストは max_num_seqs 件までです（実行中の件数も数えます）。"),
    ("途中まで Prefill したリクエスト", [("a", 1), ("p", 50)], [("q", 4)], 16, 4,
     "実行中でも Prefill が残っているリクエストは、残りの予算いっぱいのチャンクを取ります（1トークンではありません）。"),
    ("到着順に受け入れる", [], [("x", 5), ("y", 3), ("z", 2)], 6, 4,
     "待っているリクエストは到着順に受け入れ、予算が残る限り次のリクエストの先頭のチャンクも入れます。"),
    ("何も待っていない", [("a", 1)], [], 8, 4, "実行中のリクエストだけなら、それぞれに1トークンです。"),
]


def _plan(value):
    """The learner's plan as a list of (str, int) pairs, or None if it is not one."""
    try:
        pairs = [(rid, n) for rid, n in value]
    except (TypeError, ValueError):
        return None
    return pairs if all(isinstance(n, int) for _, n in pairs) else None


def _invariants(plan, running, waiting, budget, max_num_seqs) -> str:
    """What the plan breaks, in Japanese ('' when nothing)."""
    left = dict(running + waiting)
    if any(rid not in left or not 1 <= n <= left[rid] for rid, n in plan):
        return "計画に、知らない request_id か、残りより多い（または 1 未満の）トークン数があります。"
    if sum(n for _, n in plan) > budget:
        return f"計画の合計 {sum(n for _, n in plan)} トークンが予算 {budget} を超えています。"
    admitted = sum(rid in dict(waiting) for rid, _ in plan)
    if len(running) + admitted > max_num_seqs:
        return f"実行中 {len(running)} 件に {admitted} 件を足すと max_num_seqs={max_num_seqs} を超えます。"
    waiting_ids = {rid for rid, _ in waiting}
    first = next((i for i, (rid, _) in enumerate(plan) if rid in waiting_ids), None)
    if first is not None and (any(rid not in waiting_ids for rid, _ in plan[first:]) or first < len(running)):
        return "実行中のリクエスト（Decode）より先に、待っているリクエストを入れています。"
    return ""


def simulate(fn, rng: random.Random, limit: float) -> tuple[bool, str, int]:
    """Random queues stepped to the end with fn's plans: (ok, message, steps)."""
    for trial in range(12):
        budget, max_seqs = rng.choice([4, 8, 16, 32]), rng.choice([1, 2, 3, 4, 8])
        pending = [(f"r{trial}_{i}", rng.randint(1, 40), rng.randint(1, 6)) for i in range(rng.randint(1, 10))]
        running: list[list] = []            # [id, tokens left, output tokens still to make]
        waiting = [[rid, p, o] for rid, p, o in pending]
        steps = 0
        while running or waiting:
            steps += 1
            if steps > 2000:
                return False, "2,000 ステップたっても終わらないリクエストがあります（飢餓）。", steps
            r_in = [(rid, left) for rid, left, _ in running]
            w_in = [(rid, left) for rid, left, _ in waiting]
            ok, got, msg = run(fn, list(r_in), list(w_in), budget, max_seqs, timeout_s=limit)
            if not ok:
                return False, msg, steps
            plan = _plan(got)
            want = reference(r_in, w_in, budget, max_seqs)
            if plan is None:
                return False, "(request_id, トークン数) の組のリストを返してください。", steps
            broken = _invariants(plan, r_in, w_in, budget, max_seqs)
            if broken or plan != want:
                return False, (broken or f"ステップ {steps} で計画が規則と違います（実行中 {r_in}、待ち {w_in}、"
                               f"予算 {budget}、max_num_seqs {max_seqs}：期待 {want}、あなたの計画 {plan}）。"), steps
            given = dict(plan)
            for item in waiting[:]:
                if item[0] in given:
                    waiting.remove(item)
                    running.append(item)
            for item in running[:]:
                n = given.get(item[0], 0)
                item[1] -= n
                if n and item[1] == 0:           # the prompt (or the previous token) is computed: one token out
                    item[2] -= 1
                    item[1] = 1
                    if item[2] == 0:
                        running.remove(item)
    return True, "", steps


ENGINE_PROMPTS = ["吾輩は猫である。名前はまだ無い。", "どこで生れたかとんと見当がつかぬ。", "何でも薄暗いじめじめした所で",
                  "ニャーニャー泣いていた事だけは記憶している。", "吾輩はここで始めて人間というものを見た。"]


def engine_run(policy) -> tuple[list, float]:
    """The default model on ENGINE_PROMPTS (greedy, 24 tokens, budget 16, 3 slots): tokens and output tok/s."""
    from minimal_engine import LLM, SamplingParams
    llm = LLM(max_num_batched_tokens=16, max_num_seqs=3, max_model_len=256, scheduler_policy=policy)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    start = time.perf_counter()
    outs = llm.generate(ENGINE_PROMPTS, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    return [o.token_ids for o in outs], sum(len(o.token_ids) for o in outs) / elapsed


def check(fn, ctx=None) -> list:
    ctx = ctx if isinstance(ctx, dict) else {}
    limit = float(ctx.get("timeout_s", TIMEOUT_S))
    out = []
    for name, running, waiting, budget, max_seqs, hint in CASES:
        inp = f"running={running}, waiting={waiting}, token_budget={budget}, max_num_seqs={max_seqs}"
        want = reference(running, waiting, budget, max_seqs)
        ok, got, msg = run(fn, list(running), list(waiting), budget, max_seqs, timeout_s=limit)
        if not ok:
            out.append(failed_call(name, inp, str(want), msg))
            continue
        plan = _plan(got)
        message = ("(request_id, トークン数) の組のリストを返してください。" if plan is None
                   else _invariants(plan, running, waiting, budget, max_seqs) or hint)
        out.append(case(name, inp, str(want), repr(got)[:100], plan == want, message))
    ok, msg, steps = simulate(fn, random.Random(ctx.get("seed", 5)), limit)
    out.append(case("ランダムな待ち行列を最後まで進める（12 通り）", "予算 4〜32、max_num_seqs 1〜8、リクエスト 1〜10 件",
                    "毎ステップ規則どおり、全員が終わる", "全員が終わりました" if ok else f"ステップ {steps} で止まりました",
                    ok, msg))
    if ctx.get("engine") is False or not all(c.passed for c in out):
        return out
    ok, mine, msg = run(engine_run, fn, timeout_s=300.0)
    eok, base, emsg = run(engine_run, None, timeout_s=300.0)
    inp = f"同梱モデル、{len(ENGINE_PROMPTS)} プロンプト、greedy 24 トークン、max_num_batched_tokens=16、max_num_seqs=3"
    if not (ok and eok):
        out.append(failed_call("エンジンのスケジューラーとして動かす", inp, "同じトークン列", msg or emsg))
        return out
    same = mine[0] == base[0]
    out.append(case("エンジンのスケジューラーとして動かす", inp,
                    f"組み込みのスケジューラーと同じトークン列（出力 {base[1]:.0f} tok/s、計測）",
                    f"{'同じ' if same else '違う'}トークン列（出力 {mine[1]:.0f} tok/s、計測）", same,
                    "あなたの計画でエンジンを動かすと、生成されるトークン列が変わりました。"))
    return out


GRADER = Grader(id="05_schedule_step", chapter=5, title_ja="continuous batching の1ステップを計画する", check=check, hints=[
    "まず running を順に見て、それぞれに min(残り, 残りの予算) トークンを配ります（Decode なら 1 です）。",
    "次に waiting を到着順に見て、予算と空き枠（max_num_seqs − 実行中の件数）がある限り、min(残り, 残りの予算) を配ります。",
    "予算が 0 になったら、どちらのループもそこで止めます。戻り値は [(request_id, トークン数), ...] です。",
])
