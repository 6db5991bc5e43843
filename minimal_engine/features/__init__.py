"""Features that plug into the engine through explicit collaborators: weight quantization (chapter 6),
tensor parallelism (chapter 7) and speculative decoding (chapter 8).
"""
