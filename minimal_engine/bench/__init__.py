"""Benchmarks: offline sweeps of our engine, transformers baselines on the same requests, an online client.

    python -m minimal_engine.bench --model synthetic:llama-125m --dtype bfloat16 \\
        --input-len 512 --range-ratio 0.125 --output-len 256 --output-range-ratio 0.0625 \\
        --max-concurrency 1 4 16 --compare hf hf-cb --out benchmarks/results --name mixed
    python -m minimal_engine.bench --backend openai --base-url http://127.0.0.1:8000 --model NAME ...
    python -m minimal_engine.bench --model synthetic:llama-125m --shared-prefix-len 256 --input-len 32 \\
        --output-len 4 --num-prompts 8 --max-concurrency 4 --repeats 3    # TTFT, prefix caching off / on

workload.py (the requests) -> offline.py (our engine) / hf_baselines.py (transformers) / online.py (a server)
-> report.py (JSON with vLLM's field names, CSV, tables, the tok/s vs tok/s/user plot). __main__.py is the CLI.
prefix.py: every request starts with one shared system prompt; engines with prefix caching off and on alternate.
"""
from minimal_engine.bench.hf_baselines import hf_model_for, run_hf_continuous, run_hf_static
from minimal_engine.bench.offline import add_bounds, decode_step_time, run_offline, run_sweep
from minimal_engine.bench.online import run_online
from minimal_engine.bench.report import (format_median_ratios, format_ratios, format_table, median_ratios,
                     plot_throughput_vs_interactivity, ratios, save_results)
from minimal_engine.bench.workload import (BenchRequest, dataset_requests, prompt_inputs, prompt_texts,
                                          random_requests)

__all__ = ["BenchRequest", "random_requests", "dataset_requests", "prompt_inputs", "prompt_texts", "run_offline", "run_sweep",
           "add_bounds", "decode_step_time", "hf_model_for", "run_hf_static", "run_hf_continuous", "run_online",
           "save_results", "format_table", "ratios", "format_ratios", "median_ratios", "format_median_ratios",
           "plot_throughput_vs_interactivity"]
