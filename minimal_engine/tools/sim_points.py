"""The published points the simulator is fitted on and checked against (chapter 10): each with its setup,
metric, measured value, source and split. ``sim_calibration`` fits and reports; this module only lists.

The points are docs/published_points.md's rows (its row numbers, ``#``), plus one NVIDIA NIM table
that is not in that file (cited with its address). Each point is a setup the simulator can express and one
measured metric: batch-1 TPOT (gpt-fast), offline output tok/s per GPU (TensorRT-LLM ``trtllm-bench``, at the
largest concurrency that fits), and TPOT / TTFT / output tok/s per GPU at a known concurrency (InferenceX,
NIM), and batch-1 TTFT (TensorRT-LLM v0.5's low-latency table: one request on an idle engine). ``split="fit"``
points set the constants; ``split="held-out"`` points only measure the error. A held-out point is
``independent`` when its source table is none of the fit points' and its GPU or its model family is none of
theirs either (``mark_independent``); the others share a table, or a GPU and a family, with fit points.

Left out on purpose: MLPerf rows (their mean input length is not in published_points.md; the lesson uses
them for Server vs Interactive only), InferenceX row 87 (MTP: speculative decoding is not modelled), the
blog figures of §F2 (interpolated, not measured), §H (ratios, not points).
"""
from __future__ import annotations

_GF = "gpt-fast README (A100-80GB at 330 W), published_points.md §C"
_TRT = "TensorRT-LLM perf-overview (trtllm-bench), published_points.md §B1"
_IX = "InferenceX benchmarks.json (DeepSeek-R1-0528), published_points.md §F1"
_NIM = ("NVIDIA NIM LLM benchmarking 1.0.0, Llama-3.3-70B 2xH100 FP8 TP2 5000/500 "
        "(docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance)")

_TRT05 = ("TensorRT-LLM v0.5 low-latency table (batch 1, 1st token latency, gptSessionBenchmark), "
          "NVIDIA/TensorRT-LLM docs/source/performance.md @138f96d, published_points.md §B2")

# The serving stack behind each source (what an "independent" point checks besides the GPU). NIM's
# optimised profiles are TensorRT-LLM engines (docs.nvidia.com/nim, "Model Profiles", read by the ch. 10 review).
STACKS = {_GF: "gpt-fast (PyTorch)", _TRT: "TensorRT-LLM", _IX: "SGLang, ATOM (InferenceX)",
          _NIM: "NVIDIA NIM (TensorRT-LLM engine)", _TRT05: "TensorRT-LLM v0.5"}
# The vendor and architecture of each GPU in the simulator's table (sim_tables.SIM_GPUS).
ARCHITECTURES = {"A100": "NVIDIA Ampere", "H100": "NVIDIA Hopper", "H200": "NVIDIA Hopper",
                 "B200": "NVIDIA Blackwell", "GB200": "NVIDIA Blackwell", "MI300X": "AMD CDNA 3",
                 "MI325X": "AMD CDNA 3", "MI355X": "AMD CDNA 4"}


def _gpt_fast(row, model, dtype, tp, tok_s, split):
    return dict(row=row, source=_GF, split=split, metric="tpot_ms", measured=1000 / tok_s,
                setup=dict(model=model, gpu="A100", num_gpus=tp, tp=tp, weight_dtype=dtype, kv_dtype="bf16",
                           input_len=5, output_len=200, concurrency=1))


def _trt(row, gpu, tp, dtype, isl, osl, tok_s, split):
    return dict(row=row, source=_TRT, split=split, metric="output_tok_s_per_gpu", measured=tok_s, offline=True,
                setup=dict(model="llama-3.3-70b", gpu=gpu, num_gpus=tp, tp=tp, weight_dtype=dtype, kv_dtype="fp8",
                           input_len=isl, output_len=osl))


def _served(row, source, split, setup, **metrics):
    return [dict(row=row, source=source, split=split, metric=k, measured=v, setup=setup) for k, v in metrics.items()]


def _ix(row, gpu, tp, conc, tput_out, tpot, ttft, split):
    setup = dict(model="deepseek-r1", gpu=gpu, num_gpus=tp, tp=tp, weight_dtype="fp4", kv_dtype="fp8",
                 input_len=922, output_len=922, concurrency=conc)   # ISL and OSL each uniform in 80-100% of 1,024
    return _served(row, _IX, split, setup, tpot_ms=tpot, ttft_ms=ttft, output_tok_s_per_gpu=tput_out)


def _nim(conc, ttft, itl, tok_s):
    setup = dict(model="llama-3.3-70b", gpu="H100", num_gpus=2, tp=2, weight_dtype="fp8", kv_dtype="fp8",
                 input_len=5000, output_len=500, concurrency=conc)
    return _served(f"NIM c{conc}", _NIM, "held-out", setup, tpot_ms=itl, ttft_ms=ttft, output_tok_s_per_gpu=tok_s / 2)


def _batch1_ttft(row, model, gpu, tp, dtype, isl, ttft):
    setup = dict(model=model, gpu=gpu, num_gpus=tp, tp=tp, weight_dtype=dtype, kv_dtype=dtype, input_len=isl,
                 output_len=1, concurrency=1)
    return dict(row=row, source=_TRT05, split="held-out", metric="ttft_ms", measured=ttft, setup=setup)


def family(model: str) -> str:
    """A model's family: its name up to the size (llama-2-70b -> llama-2, deepseek-r1 -> deepseek-r1)."""
    head, _, last = model.rpartition("-")
    return head if head and last[:1].isdigit() else model


def mark_independent(points: list[dict]) -> list[dict]:
    """Each held-out point with ``independent``: its source is no fit point's source, and its GPU or its model
    family is no fit point's either. Fit points get False."""
    fit = [p for p in points if p["split"] == "fit"]
    sources, gpus = {p["source"] for p in fit}, {p["setup"]["gpu"] for p in fit}
    families = {family(p["setup"]["model"]) for p in fit}
    for p in points:
        s = p["setup"]
        p["independent"] = (p["split"] == "held-out" and p["source"] not in sources
                            and (s["gpu"] not in gpus or family(s["model"]) not in families))
    return points


def group(point: dict) -> str:
    """The error table a point belongs to: fit, held-out (same table / GPU and family), held-out independent."""
    return "fit" if point["split"] == "fit" else "held-out independent" if point["independent"] else "held-out same"


def is_low_load(point: dict) -> bool:
    """A TTFT point of one request on an idle engine (concurrency 1)."""
    return point["metric"] == "ttft_ms" and not point.get("offline") and point["setup"]["concurrency"] == 1


def published_points() -> list[dict]:
    """Every point with its setup, metric, measured value, source and split (fit / held-out)."""
    pts = [_gpt_fast(53, "llama-2-7b", "bf16", 1, 104.9, "fit"), _gpt_fast(58, "llama-3.1-8b", "bf16", 1, 93.89, "fit"),
           _gpt_fast(54, "llama-2-7b", "int8", 1, 155.58, "held-out"),
           _gpt_fast(55, "llama-2-7b", "int4", 1, 196.80, "held-out"),
           _gpt_fast(56, "llama-2-70b", "int8", 1, 19.13, "held-out"),
           _gpt_fast(57, "llama-2-70b", "int4", 1, 25.25, "held-out"),
           _gpt_fast(59, "llama-3.1-70b", "int8", 1, 18.04, "held-out"),
           _gpt_fast(63, "llama-3.1-405b", "int8", 8, 15.60, "held-out")]
    pts += [_gpt_fast(60, "llama-2-70b", "bf16", tp, v, "fit") for tp, v in ((2, 21.32), (4, 38.01), (8, 62.50))]
    pts += [_gpt_fast(61, "llama-3.1-70b", "bf16", tp, v, "held-out") for tp, v in ((2, 16.03), (4, 37.45), (8, 58.78))]
    pts += [_gpt_fast(62, "llama-3.1-8b", "bf16", tp, v, "held-out") for tp, v in ((2, 149.10), (4, 217.21), (8, 276.01))]
    lens = ((1000, 1000), (1024, 1024), (1024, 8192), (8192, 1024), (32768, 1024))
    for row, gpu, tp, dtype, vals, split in ((37, "B200", 1, "fp4", (6920, 6842, 3242, 1362, 274), "fit"),
                                             (39, "H200", 2, "fp8", (2587, 2582, 2009, 537, 120), "fit"),
                                             (38, "GB200", 1, "fp4", (7769, 7751, 3805, 1491, 302), "held-out")):
        pts += [_trt(row, gpu, tp, dtype, i, o, v, split) for (i, o), v in zip(lens, vals)]
    pts += [_trt(40, "H100", 2, "fp8", 1000, 1000, 2209, "held-out"), _trt(40, "H100", 2, "fp8", 8192, 1024, 398, "held-out")]
    pts += _ix(79, "MI355X", 4, 4, 89.89, 10.65, 107.4, "fit") + _ix(80, "MI355X", 4, 16, 255.11, 15.14, 114.9, "fit")
    pts += _ix(81, "MI355X", 4, 64, 582.22, 26.68, 125.2, "fit")
    for row, gpu, tp, conc, out, tpot, ttft in ((82, "B200", 4, 4, 105.43, 9.01, 198.6), (83, "B200", 4, 8, 184.37, 10.45, 180.8),
                                                (84, "B200", 4, 16, 294.73, 12.99, 340.5), (85, "MI355X", 8, 8, 89.59, 10.82, 73.6),
                                                (86, "MI355X", 8, 32, 259.82, 14.92, 70.5)):
        pts += _ix(row, gpu, tp, conc, out, tpot, ttft, "held-out")
    for conc, ttft, itl, tok_s in ((1, 406.77, 18.58, 51.67), (5, 546.7, 21.83, 218.48), (25, 688.69, 38.75, 623.4),
                                   (50, 834.51, 59.73, 814.37), (100, 7996.25, 92.91, 917.26)):
        pts += _nim(conc, ttft, itl, tok_s)
    for row, model, gpu, tp, dtype, vals in (("B2 H100", "llama-2-7b", "H100", 1, "fp8", (7, 36)),
                                             ("B2 H100", "llama-2-70b", "H100", 4, "fp8", (26, 109)),
                                             ("B2 A100", "llama-2-7b", "A100", 1, "fp16", (16, 133)),
                                             ("B2 A100", "llama-2-70b", "A100", 4, "fp16", (47, 377))):
        pts += [_batch1_ttft(row, model, gpu, tp, dtype, isl, v) for isl, v in zip((128, 2048), vals)]
    return mark_independent(pts)
