"""The OpenAI-compatible HTTP server: app (routes), protocol (request and response shapes), limits, engine_loop
(the one thread that owns the engine) and prometheus (/metrics).  `python -m minimal_engine.serve` starts it.
"""
