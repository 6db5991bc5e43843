"""Model solution of exercise 05 (chapter 5): one continuous-batching step with chunked prefill, the engine's rule."""


def schedule_step(running, waiting, token_budget, max_num_seqs):
    plan = []
    budget = token_budget
    # 1) 実行中のリクエストが先：Decode なら 1 トークン、Prefill の途中なら残りの予算いっぱいのチャンク
    for request_id, left in running:
        if budget == 0:
            break
        n = min(left, budget)
        plan.append((request_id, n))
        budget -= n
    # 2) 待っているリクエストを到着順に：予算と空き枠（max_num_seqs − 実行中の件数）がある限り
    free_slots = max_num_seqs - len(running)
    for request_id, left in waiting:
        if budget == 0 or free_slots == 0:
            break
        n = min(left, budget)          # 入りきらなければ先頭のチャンクだけ（chunked prefill）
        plan.append((request_id, n))
        budget -= n
        free_slots -= 1
    return plan
