"""Speculative decoding (chapter 8): proposers (n-gram, draft model), verification and rejection sampling.
"""
