"""What a checkpoint becomes: the Llama-family network, its attention over the paged KV pool, weight loading,
the tokenizer, randomly initialised shapes (synthetic) and the probed CPU kernels for its Linear layers.
"""
