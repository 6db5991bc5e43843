"""Tensor parallelism (chapter 7): the model wrapper of rank 0, the worker processes, the sharding rules.
"""
