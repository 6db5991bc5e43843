"""minimal_engine: a small, readable LLM inference engine for Llama-family models (vLLM's API shape).

Follow one request: llm.py (LLM.generate) -> llm_engine.py (LLMEngine.step) -> scheduler.py (which tokens run)
-> block_manager.py (KV blocks) -> model_runner.py (tensors) -> models/llama.py -> attention.py -> sampler.py.
"""
from minimal_engine.llm import LLM
from minimal_engine.engine.llm_engine import LLMEngine, RequestOutput
from minimal_engine.sampling_params import SamplingParams

__all__ = ["LLM", "LLMEngine", "RequestOutput", "SamplingParams"]
