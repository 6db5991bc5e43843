"""Exercise 8 (chapter 8): rejection_sample(p_target, q_draft, draft_token, generator) -> (accepted, token).

Exactness is tested statistically: the grader draws the draft from q with its own generator, calls the learner's
function N times (fixed seeds), and compares the frequencies of the emitted tokens with p_target. Tolerance: every
token's frequency within 5 standard errors, 5 * sqrt(p (1 - p) / N) + 0.002, of p (a correct rule fails this with
probability below 1e-5 per token); the acceptance rate must match sum_x min(p(x), q(x)) within the same bound.
Biased rules (resampling from p instead of the residual, accepting when p >= q only, accepting with probability p)
move one of the two by far more than that.
"""
from __future__ import annotations

import math

import torch

from course.exercises.checks import case, failed_call, run
from course.exercises.kit import Grader

N_DRAWS = 12000


def _dists():
    t = lambda *v: torch.tensor(v, dtype=torch.float32)      # noqa: E731
    return [("p と q が違う（5 トークン）", t(0.4, 0.3, 0.15, 0.1, 0.05), t(0.1, 0.2, 0.3, 0.25, 0.15)),
            ("q が 1 つのトークンに集中", t(0.25, 0.25, 0.25, 0.25), t(0.85, 0.05, 0.05, 0.05)),
            ("q == p（いつも受理）", t(0.5, 0.3, 0.2), t(0.5, 0.3, 0.2)),
            ("p が 0 のトークンを q が提案する", t(0.0, 0.6, 0.4), t(0.5, 0.25, 0.25))]


def _sample_many(fn, p, q, n, seed):
    """n draws: the draft from q (the grader's generator), then the learner's rule (its own generator)."""
    g_draft, g_rule = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)
    counts, accepted = torch.zeros(p.numel()), 0
    for _ in range(n):
        d = int(torch.multinomial(q, 1, generator=g_draft))
        res = fn(p.clone(), q.clone(), d, g_rule)
        if not (isinstance(res, tuple) and len(res) == 2):
            raise TypeError(f"(受理したか, トークン) の tuple を返してください（{res!r} が返りました）")
        acc, tok = bool(res[0]), int(res[1])
        if acc and tok != d:
            raise ValueError(f"受理したのに、下書き {d} ではなく {tok} を返しました")
        counts[tok] += 1
        accepted += acc
    return counts / n, accepted / n


def _engine_run(fn):
    """The engine's speculative decoding (the shipped draft model, k=4, temperature 1) with the engine's rejection
    sampler and with the learner's rule (rejection.per_token_rule): measured acceptance rates and tokens made.
    ignore_eos: a correct rule that uses the random stream differently samples another text, and the default model
    emits EOS at temperature 1 in a few percent of 24-token requests; the token counts then differ by chance."""
    from minimal_engine import LLM, SamplingParams
    from minimal_engine.features.spec_decode.rejection import per_token_rule
    spec = {"method": "draft_model", "num_speculative_tokens": 4}
    params = SamplingParams(temperature=1.0, max_tokens=24, seed=8, ignore_eos=True)
    res = {}
    for name, sampler in (("engine", None), ("learner", per_token_rule(fn))):
        llm = LLM(speculative_config=spec, rejection_sampler=sampler)
        outs = llm.generate(["吾輩は猫である。", "むかしむかし、"], params, use_tqdm=False)
        drafts = sum(o.metrics.num_draft_tokens for o in outs)
        res[name] = (sum(o.metrics.num_accepted_tokens for o in outs) / max(drafts, 1),
                     sum(len(o.token_ids) for o in outs))
        llm.close()
    return res


def check(fn, ctx=None) -> list:
    ctx = ctx if isinstance(ctx, dict) else {}
    n = int(ctx.get("n_draws", N_DRAWS))
    out = []
    for i, (name, p, q) in enumerate(_dists()):
        inp = f"p={[round(v, 3) for v in p.tolist()]}, q={[round(v, 3) for v in q.tolist()]}, {n} 回"
        ok, res, msg = run(_sample_many, fn, p, q, n, 27 + i, timeout_s=120.0)
        if not ok:
            out.append(failed_call(name, inp, "出力の分布 = p", msg))
            continue
        freq, acc = res
        tol = 5 * torch.sqrt(p * (1 - p) / n) + 0.002
        want_acc = float(torch.minimum(p, q).sum())
        acc_tol = 5 * math.sqrt(max(want_acc * (1 - want_acc), 1e-4) / n) + 0.002
        dist_ok, acc_ok = bool(((freq - p).abs() <= tol).all()), abs(acc - want_acc) <= acc_tol
        if dist_ok and acc_ok:
            message = ""
        elif not acc_ok:
            message = (f"受理率 {acc:.3f} が正しい値 Σmin(p, q) = {want_acc:.3f} と違います。受理の確率は "
                       "min(1, p(x)/q(x)) です。一様乱数 u を引き、u < p(x)/q(x) なら受理します"
                       "（p >= q のときだけ受理したり、確率 p(x) で受理したりしていませんか）。")
        else:
            message = ("受理率は合っていますが、出力の分布が p と違います。棄却したときに引き直す分布が"
                       "違います。max(0, p − q) を正規化した残差の分布から引き直してください。")
        out.append(case(name, inp, f"頻度 ≈ {[round(v, 3) for v in p.tolist()]}、受理率 ≈ {want_acc:.3f}",
                        f"頻度 {[round(v, 3) for v in freq.tolist()]}、受理率 {acc:.3f}", dist_ok and acc_ok, message))
    if ctx.get("engine") is False or not all(c.passed for c in out):
        return out
    ok, res, msg = run(_engine_run, fn, timeout_s=180.0)
    if not ok:
        out.append(failed_call("エンジンの投機的デコード", "LLM(speculative_config=draft_model, k=4)", "最後まで生成", msg))
        return out
    (acc_e, n_e), (acc_l, n_l) = res["engine"], res["learner"]
    # a smoke test: only the token count is checked. The acceptance shares are not shown: over so few
    # draws they differ by chance (the distribution checks above are the statistical test)
    del acc_e, acc_l
    out.append(case("エンジンで最後まで生成できるか（ドラフトモデル、k=4、温度 1）",
                    "2 プロンプト × 24 トークン", f"{n_e} トークン", f"{n_l} トークン",
                    n_l == n_e, "エンジンがあなたの規則で最後まで生成できませんでした。"))
    return out


GRADER = Grader(id="08_rejection_sample", chapter=8, title_ja="棄却サンプリングで下書きを受理・棄却する", check=check,
                hints=[
    "出力の分布がターゲットの p と完全に一致するのが目標です。受理の確率と、棄却したときに引き直す分布の2つを確かめてください。",
    "受理の確率は min(1, p(x)/q(x))、棄却したら max(0, p − q) を正規化した分布から引き直します。",
    "u = torch.rand((), generator=generator); u * q[x] < p[x] なら (True, x)。そうでなければ "
    "r = (p - q).clamp_min(0) から torch.multinomial(r / r.sum(), 1, generator=generator) で引きます。",
])
