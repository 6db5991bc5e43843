"""minimal_engine: a small, readable LLM inference engine for Llama-family models (vLLM's API shape).

Follow one request (README.md has the reading order): llm.py (LLM.generate) -> engine/llm_engine.py (LLMEngine.step)
-> engine/scheduler.py (which tokens run) -> engine/block_manager.py (KV blocks) -> engine/model_runner.py (tensors)
-> model/llama.py -> model/attention.py -> engine/sampler.py.
"""
from minimal_engine.llm import LLM
from minimal_engine.engine.llm_engine import LLMEngine, RequestOutput
from minimal_engine.sampling_params import SamplingParams

__all__ = ["LLM", "LLMEngine", "RequestOutput", "SamplingParams"]
