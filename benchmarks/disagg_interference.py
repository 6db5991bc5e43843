"""Chapter 9's closing figures, one run: p99 ITL of running decodes and TTFT of late long prompts against the
chunk budget (max_num_batched_tokens) in one engine, and the same stream through DisaggregatedLLM (TTFT, TPOT,
KV bytes moved per request). Greedy tokens are checked to be identical across setups.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/disagg_interference.py --model synthetic:llama-125m --prompt-len 1024
"""
import argparse
import json

from course.labs import lab09 as lab9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default")
    ap.add_argument("--prompt-len", type=int, default=448)
    ap.add_argument("--num-decodes", type=int, default=4)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--num-long", type=int, default=2)
    ap.add_argument("--budgets", default="16,64,256,1024")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the figures here")
    a = ap.parse_args()
    res = lab9.run_interference_lab(prompt_len=a.prompt_len, num_decodes=a.num_decodes, output_len=a.output_len,
                                    num_long=a.num_long, budgets=[int(b) for b in a.budgets.split(",")],
                                    model=a.model, threads=a.threads)
    keys = ("median_itl_ms", "p99_itl_ms", "max_itl_ms", "long_ttft_ms", "median_ttft_ms", "tpot_ms", "tok_s",
            "tok_s_per_user", "kv_bytes_per_request", "kv_transfer_ms")
    print(f"model {res['model']}  long prompt {res['prompt_len']} x {res['num_long']}  decodes {res['num_decodes']} x "
          f"{res['output_len']}  threads {res['threads']}  same tokens: {res['same_tokens']}")
    print("setup        " + " ".join(f"{k:>15s}" for k in keys))
    for name, r in res["setups"].items():
        print(f"{name:12s} " + " ".join(f"{r[k]:15.1f}" for k in keys))
    for w in res["warnings"]:
        print("warning:", w)
    if a.json:
        rows = {n: {k: r[k] for k in keys} for n, r in res["setups"].items()}
        with open(a.json, "w") as f:
            json.dump({"settings": {k: res[k] for k in ("model", "prompt_len", "num_long", "num_decodes", "output_len",
                                                         "threads", "same_tokens")}, "setups": rows}, f, indent=1)
    lab9.close_engines()


if __name__ == "__main__":
    main()
