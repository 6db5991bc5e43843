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
import statistics
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
     "Decode も予算の中で、先に来たものから配ります。予算が尽きたら、残りの Decode は次のステップです。"),
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


def _why(value) -> str:
    """What is wrong with a value that is not a plan: the count's type, or the shape."""
    try:
        counts = [n for _, n in value]
    except (TypeError, ValueError):
        return "(request_id, トークン数) の組のリストを返してください。"
    bad = next((n for n in counts if not isinstance(n, int)), None)
    return (f"トークン数は Python の int で返してください（{type(bad).__name__} が入っていました。"
            "numpy の整数なら int(...) で変換します）。")


FORMAT = -1                    # simulate's "rule" for a value that is not a list of (id, int) pairs
FORMAT_HINT = "戻り値は [(request_id, トークン数), ...] のリストで、トークン数は Python の int です。"
RULES = {1: "規則1：running を先に、順に min(残り, 残りの予算)", 2: "規則2：waiting を到着順に、予算と空き枠の限り",
         3: "規則3：予算が 0 になったら止める"}


def diagnose(plan, running, waiting, budget, max_num_seqs) -> tuple[str, int]:
    """(what is wrong, naming the entry, the rule it breaks (1-3)); ('', 0) when the plan keeps every rule.
    The rule number picks the hint (HINTS[rule - 1])."""
    left, waiting_ids = dict(running + waiting), {rid for rid, _ in waiting}
    for rid, n in plan:
        if rid not in left:
            return f"{(rid, n)!r}：この request_id は running にも waiting にもありません。", 1
        if n < 1:
            return (f"{(rid, n)!r}：{n} トークンの項目は計画に入れません。予算が 0 になったら、"
                    f"そこでループを止めます（{RULES[3]}）。"), 3
        if n > left[rid]:
            return f"{(rid, n)!r}：残り {left[rid]} トークンより多く配っています（min(残り, 残りの予算)）。", \
                2 if rid in waiting_ids else 1
    total = sum(n for _, n in plan)
    if total > budget:
        return f"計画の合計 {total} トークンが予算 {budget} を超えています（min(残り, 残りの予算) で配ります）。", 1
    admitted = [rid for rid, _ in plan if rid in waiting_ids]
    if len(running) + len(admitted) > max_num_seqs:
        return (f"実行中 {len(running)} 件に {admitted} の {len(admitted)} 件を足すと max_num_seqs={max_num_seqs} を"
                f"超えます（{RULES[2]}）。"), 2
    first = next((i for i, (rid, _) in enumerate(plan) if rid in waiting_ids), None)
    missing = [(rid, n) for rid, n in running if rid not in dict(plan)]
    if missing and (total < budget or first is not None):        # budget was left (or given to a waiting one)
        return (f"実行中の {missing[0]!r} が計画にありません。予算が残るうちは、実行中のリクエストは残り全部が入らなくても"
                f"入る分だけ入れます（{RULES[1]}）。"), 1
    if first is not None and (any(rid not in waiting_ids for rid, _ in plan[first:]) or first < len(running)):
        return f"待っている {plan[first]!r} を、実行中のリクエストより先に入れています（{RULES[1]}）。", 1
    return "", 0


def _differs(plan, want, running, waiting, budget, max_num_seqs) -> tuple[str, int]:
    """Why a plan that keeps the invariants still differs from the rule's (the first entry that differs)."""
    broken = diagnose(plan, running, waiting, budget, max_num_seqs)
    if broken[0]:
        return broken
    i = next((i for i, (a, b) in enumerate(zip(plan, want)) if a != b), min(len(plan), len(want)))
    if i >= len(plan):
        return (f"{want[i]!r} が計画にありません。予算と空き枠が残る限り配ります"
                f"（{RULES[1] if want[i][0] in dict(running) else RULES[2]}）。"), 1 if want[i][0] in dict(running) else 2
    if i >= len(want):
        return f"{plan[i]!r} は規則にない項目です（{RULES[3]}）。", 3
    rule = 1 if want[i][0] in dict(running) else 2
    return f"{i + 1} 番目が {plan[i]!r} ですが、規則では {want[i]!r} です（{RULES[rule]}）。", rule


def random_steps(fn, rng: random.Random, limit: float, n: int = 200) -> tuple[bool, str, int]:
    """Single random steps (several partly prefilled requests, tight budgets): (ok, message, rule)."""
    for k in range(n):
        running = [(f"r{i}", rng.choice([1, 1, rng.randint(2, 12)])) for i in range(rng.randint(0, 5))]
        waiting = [(f"w{i}", rng.randint(1, 12)) for i in range(rng.randint(0, 4))]
        budget, max_seqs = rng.randint(1, 12), rng.randint(max(1, len(running)), len(running) + 3)
        ok, got, msg = run(fn, list(running), list(waiting), budget, max_seqs, timeout_s=limit)
        if not ok:
            return False, msg, 0
        plan, want = _plan(got), reference(running, waiting, budget, max_seqs)
        if plan is None:
            return False, _why(got), FORMAT
        if plan != want:
            why, rule = _differs(plan, want, running, waiting, budget, max_seqs)
            return False, (f"running={running}, waiting={waiting}, token_budget={budget}, max_num_seqs={max_seqs}："
                           f"{why} 期待 {want}、あなたの計画 {plan}"), rule
    return True, "", 0


def simulate(fn, rng: random.Random, limit: float) -> tuple[bool, str, int]:
    """Random queues stepped to the end with fn's plans: (ok, message, rule broken: 1-3, FORMAT for a value that
    is not a plan, 0 when no rule is named), so the hint names the rule the plan broke (blind reading ch05 #12)."""
    for trial in range(12):
        budget, max_seqs = rng.choice([4, 8, 16, 32]), rng.choice([1, 2, 3, 4, 8])
        pending = [(f"r{trial}_{i}", rng.randint(1, 40), rng.randint(1, 6)) for i in range(rng.randint(1, 10))]
        running: list[list] = []            # [id, tokens left, output tokens still to make]
        waiting = [[rid, p, o] for rid, p, o in pending]
        steps = 0
        while running or waiting:
            steps += 1
            if steps > 2000:
                return False, "2,000 ステップたっても終わらないリクエストがあります（飢餓）。", 0
            r_in = [(rid, left) for rid, left, _ in running]
            w_in = [(rid, left) for rid, left, _ in waiting]
            ok, got, msg = run(fn, list(r_in), list(w_in), budget, max_seqs, timeout_s=limit)
            if not ok:
                return False, msg, 0
            plan = _plan(got)
            want = reference(r_in, w_in, budget, max_seqs)
            if plan is None:
                return False, _why(got), FORMAT
            if plan != want:
                why, rule = _differs(plan, want, r_in, w_in, budget, max_seqs)
                return False, (f"ステップ {steps}（実行中 {r_in}、待ち {w_in}、予算 {budget}、max_num_seqs {max_seqs}）："
                               f"{why} 期待 {want}、あなたの計画 {plan}"), rule
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
    return True, "", 0


ENGINE_PROMPTS = ["吾輩は猫である。名前はまだ無い。", "どこで生れたかとんと見当がつかぬ。", "何でも薄暗いじめじめした所で",
                  "ニャーニャー泣いていた事だけは記憶している。", "吾輩はここで始めて人間というものを見た。"]


def engine_run(policy) -> tuple[list, float]:
    """The default model on ENGINE_PROMPTS (greedy, 24 tokens, budget 16, 3 slots): tokens and output tok/s."""
    toks, speeds = engine_compare(policy, repeats=1)
    return toks[0], speeds[0][0]


def engine_compare(policy, repeats: int = 3) -> tuple[tuple[list, list], tuple[list, list]]:
    """Both schedulers on the same prompts, fairly: each engine built and warmed up first, then the runs
    alternate (built-in, yours, built-in, ...) ``repeats`` times. ((your tokens, built-in tokens),
    (your tok/s per run, built-in tok/s per run))."""
    from minimal_engine import LLM, SamplingParams
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    llms = [LLM(max_num_batched_tokens=16, max_num_seqs=3, max_model_len=256, scheduler_policy=p) for p in (policy, None)]
    for llm in llms:                                         # warm-up: first steps are slow, not measured
        llm.generate(ENGINE_PROMPTS[:2], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    toks, speeds = [None, None], [[], []]
    for _ in range(repeats):
        for i in (1, 0):
            start = time.perf_counter()
            outs = llms[i].generate(ENGINE_PROMPTS, params, use_tqdm=False)
            speeds[i].append(sum(len(o.token_ids) for o in outs) / (time.perf_counter() - start))
            toks[i] = [o.token_ids for o in outs]
    return (toks[0], toks[1]), (speeds[0], speeds[1])


def _speed(xs: list) -> str:
    return f"中央値 {statistics.median(xs):.0f}（{min(xs):.0f}〜{max(xs):.0f}）tok/s"


DEADLINE_S = 600.0      # the whole grading (hand cases, random queues, the engine): a report always comes back


def check(fn, ctx=None) -> list:
    ctx = ctx if isinstance(ctx, dict) else {}
    limit = float(ctx.get("timeout_s", TIMEOUT_S))
    deadline = time.monotonic() + float(ctx.get("deadline_s", DEADLINE_S))
    out = []
    for name, running, waiting, budget, max_seqs, note in CASES:
        inp = f"running={running}, waiting={waiting}, token_budget={budget}, max_num_seqs={max_seqs}"
        want = reference(running, waiting, budget, max_seqs)
        ok, got, msg = run(fn, list(running), list(waiting), budget, max_seqs, timeout_s=limit)
        if not ok:
            out.append(failed_call(name, inp, str(want), msg))
            continue
        plan = _plan(got)
        why, rule = (_why(got), 0) if plan is None else \
            _differs(plan, want, running, waiting, budget, max_seqs) if plan != want else ("", 0)
        c = case(name, inp, str(want), repr(got)[:100], plan == want, f"{why} {note}")
        c.hint = "" if c.passed else FORMAT_HINT if plan is None else GRADER.hints[rule - 1] if rule else ""
        out.append(c)
    for name, inp, expected, step in (
            ("ランダムな1ステップ（200 通り）", "実行中 0〜5 件（Prefill 途中を含む）、予算 1〜12", "毎回、規則どおりの計画",
             lambda: random_steps(fn, random.Random(ctx.get("seed", 5)), limit)),
            ("ランダムな待ち行列を最後まで進める（12 通り）", "予算 4〜32、max_num_seqs 1〜8、リクエスト 1〜10 件",
             "毎ステップ規則どおり、全員が終わる", lambda: simulate(fn, random.Random(ctx.get("seed", 5)), limit))):
        if time.monotonic() > deadline:
            out.append(case(name, inp, expected, "時間切れ", False, "採点の制限時間を過ぎたので、ここで打ち切りました。"))
            continue
        ok, msg, n = step()
        c = case(name, inp, expected, "規則どおりでした" if ok else "規則と違う計画がありました", ok, msg)
        if not ok and n:                        # both give the rule broken (FORMAT: not a plan at all)
            c.hint = FORMAT_HINT if n == FORMAT else GRADER.hints[n - 1]
        out.append(c)
    if ctx.get("engine") is False or not all(c.passed for c in out):
        return out
    repeats = int(ctx.get("repeats", 3))
    left = max(1.0, deadline - time.monotonic())
    ok, got, msg = run(engine_compare, fn, repeats, timeout_s=min(300.0, left))
    inp = (f"同梱モデル、{len(ENGINE_PROMPTS)} プロンプト、greedy 24 トークン、max_num_batched_tokens=16、"
           f"max_num_seqs=3（両方を先にウォームアップし、交互に {repeats} 回ずつ）")
    if not ok:
        out.append(failed_call("エンジンのスケジューラーとして動かす", inp, "同じトークン列", msg))
        return out
    (mine, base), (mine_s, base_s) = got
    same = mine == base
    c = case("エンジンのスケジューラーとして動かす", inp, f"組み込みのスケジューラーと同じトークン列（{_speed(base_s)}）",
             f"{'同じ' if same else '違う'}トークン列（{_speed(mine_s)}）", same,
             "あなたの計画でエンジンを動かすと、生成されるトークン列が変わりました。")
    if same:
        c.message += SPEED_NOTE
    out.append(c)
    return out


# The engine case's tok/s: the plans are the same, so are the steps (blind reading ch05 third #9)
SPEED_NOTE = ("（tok/s の読み方：計画が同じなのでステップも同じです。2つの tok/s の差は計測のばらつきと、あなたの関数を"
              "毎ステップ呼ぶ分の Python の処理で、どちらのスケジューラーが速いかを表すものではありません）")


GRADER = Grader(id="05_schedule_step", chapter=5, title_ja="連続バッチングの1ステップを計画する", check=check, hints=[
    "規則1：まず running を順に見て、それぞれに min(残り, 残りの予算) トークンを配ります（Decode なら 1 です）。",
    "規則2：次に waiting を到着順に見て、予算と空き枠（max_num_seqs − 実行中の件数）がある限り、min(残り, 残りの予算) を配ります。",
    "規則3：予算が 0 になったら、どちらのループもそこで止めます（0 トークンの項目は入れません）。"
    "戻り値は [(request_id, トークン数), ...] です。",
])
