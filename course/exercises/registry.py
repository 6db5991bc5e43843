"""The exercises: id -> grader module of course.exercises (imported only when graded)."""

REGISTRY = {
    "01_request_metrics": "ex01_request_metrics",
    "02_decode_step_bound": "ex02_decode_step_bound",
    "03_attention_decode": "ex03_attention_decode",
    "04_block_hashes": "ex04_block_hashes",
    "05_schedule_step": "ex05_schedule_step",
    "06_quantize_int8": "ex06_quantize_int8",
    "07_shard_linear": "ex07_shard_linear",
    "08_rejection_sample": "ex08_rejection_sample",
    "09_prefill_chunks": "ex09_prefill_chunks",
    "10_pareto_frontier": "ex10_pareto_frontier",
}
EXERCISE_IDS = list(REGISTRY)
