"""Scheduling policies (chapter 5's exercise): a function replacing the scheduler's token counts.

    Scheduler(config, block_manager, policy=schedule_step)
    schedule_step(running, waiting, token_budget, max_num_seqs) -> [(request_id, num_tokens), ...]

The policy gets (request_id, tokens left) pairs for the running and the waiting requests and
returns this step's plan; check_plan refuses a plan that breaks a rule, with what it broke.
Blocks, preemption and prefix caching stay the scheduler's. A policy whose plans schedule nothing MAX_IDLE_POLICY_STEPS
steps in a row stops the engine with an error instead of spinning (PolicyPlanner).
"""
from __future__ import annotations

MAX_IDLE_POLICY_STEPS = 1000    # a policy's empty steps in a row before the engine gives up


def check_plan(plan, running: list[tuple[str, int]], waiting: list[tuple[str, int]], budget: int,
               max_num_seqs: int) -> dict[str, int]:
    """A policy's plan -> {request_id: num_tokens}, or a ValueError saying what the plan broke."""
    left = dict(running + waiting)
    try:
        pairs = [(rid, n) for rid, n in plan]
    except (TypeError, ValueError):
        raise ValueError("the policy must return a list of (request_id, num_tokens) pairs, "
                         f"got {plan!r:.80}") from None
    out = dict(pairs)
    if not out and (running or waiting):
        raise ValueError("the policy scheduled nothing although requests are running or waiting: "
                         "they would wait forever")
    if len(out) != len(pairs):
        raise ValueError("the policy's plan names a request twice")
    for rid, n in pairs:
        if rid not in left:
            raise ValueError(f"the policy's plan names {rid!r}, which is neither running nor "
                             "waiting")
        if not isinstance(n, int) or not 1 <= n <= left[rid]:
            raise ValueError(f"the policy gives {rid!r} {n!r} tokens; it has {left[rid]} left "
                             f"(1..{left[rid]})")
    if sum(out.values()) > budget:
        raise ValueError(f"the policy's plan has {sum(out.values())} tokens, more than the budget "
                         f"of {budget}")
    admitted = [rid for rid, _ in waiting if rid in out]
    if admitted != [rid for rid, _ in waiting[:len(admitted)]]:
        raise ValueError("the policy must admit waiting requests in arrival order "
                         "(first come, first served)")
    if len(running) + len(admitted) > max_num_seqs:
        raise ValueError(f"the policy's plan admits {len(admitted)} requests beside {len(running)} "
                         f"running: more than max_num_seqs={max_num_seqs}")
    return out


class PolicyPlanner:
    """Asks the policy for each step's plan and checks it; gives up on a policy that never moves."""

    def __init__(self, policy, max_num_seqs: int):
        self.policy, self.max_num_seqs = policy, max_num_seqs
        self.idle_steps = 0                   # the policy's steps in a row that scheduled nothing

    def plan(self, running: list, waiting, budget: int, block_manager) -> dict[str, int]:
        """What each running request has left and each waiting one would compute -> the plan."""
        run = [(s.request_id, s.num_uncomputed_tokens) for s in running]
        wait = [(s.request_id, len(s) - block_manager.num_cached_tokens(s)) for s in waiting]
        return check_plan(self.policy(list(run), list(wait), budget, self.max_num_seqs), run, wait,
                          budget, self.max_num_seqs)

    def check_progress(self, scheduled: bool, plan: dict[str, int], num_running: int,
                       num_waiting: int, block_manager) -> None:
        """A plan that schedules nothing changes nothing, so the next plan is likely the same: after
        MAX_IDLE_POLICY_STEPS such steps in a row, stop with an error instead of spinning on."""
        self.idle_steps = 0 if scheduled else self.idle_steps + 1
        if self.idle_steps < MAX_IDLE_POLICY_STEPS:
            return
        self.idle_steps = 0
        bm = block_manager
        name = getattr(self.policy, "__name__", type(self.policy).__name__)
        raise ValueError(
            f"scheduler_policy {name!r} scheduled nothing in {MAX_IDLE_POLICY_STEPS} steps in a "
            f"row while {num_running} requests ran and {num_waiting} waited; its plan "
            f"was {list(plan.items())[:4]}, with {bm.num_free_blocks} of {bm.num_blocks} KV blocks "
            "free. "
            "A plan that gives the budget to waiting requests that cannot get KV blocks, while the "
            "running requests holding the blocks get none, never moves: schedule the running "
            "requests first, or leave budget for them")
