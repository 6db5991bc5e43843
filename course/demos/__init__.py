"""Helpers the lessons call to show one idea: generation without a KV cache (``no_cache``), the tensor shapes
of one decode step (``decode_shapes``), a contiguous vs paged KV simulation (``kv_sim``), pictures of the
engine's block pool (``block_pool``), number formats and rounding (``formats``)."""
