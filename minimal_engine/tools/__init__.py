"""Tools around the engine, not on the request path: training the default model, its model card, evaluation,
the simulator's calibration and the GGUF export.
"""
