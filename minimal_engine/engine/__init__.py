"""The request path (chapters 3-5): LLMEngine steps Scheduler -> BlockManager -> ModelRunner -> Sampler.

Reading order: llm_engine.py, scheduler.py, block_manager.py (+ prefix_cache.py), sequence.py, model_runner.py,
sampler.py, then kv_cache.py, cuda_graphs.py, logprobs.py, stop_strings.py, metrics.py.
"""
