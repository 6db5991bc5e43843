"""Model code: the Llama-family network (llama.py) and weight loading (loader.py)."""
