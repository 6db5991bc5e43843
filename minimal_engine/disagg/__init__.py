"""Disaggregated prefill and decode (chapter 9): an LLM made of two engines and the KV connector between them.
"""
