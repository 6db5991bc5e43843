"""The GPU's paged-decode Triton kernel (attention_paged.py), proven on the CPU under Triton's interpreter.

Triton is a test-only dependency (requirements-test.txt, Linux x86-64: the only platform with a wheel that needs
no GPU); `make test` installs it and `make lab` does not. One subprocess with TRITON_INTERPRET=1 runs
tests/model/triton_cases.py: the kernel against the definition on every case of `kernel_cases()` (dtypes, GQA ratios,
head dims, context lengths around the block size, padding rows, scattered and strided block tables), and the
engine's decode steps through the dispatch it takes on CUDA, eager and through the CUDA-graph static buffers.
The engine's tokens must equal those of its CPU gather path. Under CI=true a missing Triton fails, never skips.
"""
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from triton_cases import case_id, kernel_cases  # noqa: E402

from minimal_engine import LLM, SamplingParams  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WHEEL_PLATFORM = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


def triton_installed() -> bool:
    return subprocess.run([sys.executable, "-c", "import triton"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def interpreted(llama_dir):
    if not triton_installed():
        if os.environ.get("CI") == "true" and WHEEL_PLATFORM:
            pytest.fail("Triton is not installed: `make test` installs requirements-test.txt (triton==3.9.0)")
        pytest.skip("Triton is not installed (requirements-test.txt; a wheel exists for Linux x86-64 only)")
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "model" / "triton_cases.py"), str(llama_dir)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", kernel_cases(), ids=case_id)
def test_kernel_equals_the_definition(interpreted, case):
    row = next(x for x in interpreted["kernels"] if x["id"] == case_id(case))
    assert row["ok"], row
    assert row["padding_row_zero"]                       # a CUDA-graph padding row (context 0) gives 0


def test_every_case_ran(interpreted):
    assert [x["id"] for x in interpreted["kernels"]] == [case_id(c) for c in kernel_cases()]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_engine_decode_through_the_kernel_keeps_the_tokens(interpreted, llama_dir, dtype, graphs):
    """The engine, under the interpreter, decodes through paged_decode_attention -> the Triton kernel (counted)
    and gives the tokens of its CPU gather path (no interpreter here). With the CUDA-graph static buffers
    (max_num_seqs=5: sizes 1, 2, 4, 5), 3 requests are padded to 4 rows: the padding row goes through the kernel.
    bfloat16: the kernel accumulates in float32 and the gather path in SDPA's own order, so a sequence may differ
    after a near-tie; then transformers must score every token the kernel chose within the bf16 tie tolerance
    (benchmarks/gpu_check.py's rule for the GPU)."""
    got = interpreted["engine"][f"{dtype}-{'graphs' if graphs else 'eager'}"]
    assert got["kernel_calls"] > 0
    if graphs:
        assert 4 in got["rows"]                          # 3 requests padded to the captured size 4
    prompts = [[5, 17, 33, 100, 7, 9, 200, 45, 3, 80, 81, 82, 90], [11, 12], list(range(40, 90))]
    sp = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    llm = LLM(llama_dir, dtype=dtype, device="cpu", max_num_seqs=5)
    assert llm.engine.runner.attention_backend == "gathered"   # without the interpreter the CPU gathers
    want = [o.token_ids for o in llm.generate(prompts, sp, use_tqdm=False)]
    if dtype == "float32" or got["tokens"] == want:
        assert got["tokens"] == want
        return
    import torch
    import transformers
    from conftest import load_benchmark
    tie_gap = load_benchmark("gpu_check").tie_gap
    hf = transformers.AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.bfloat16).eval()
    gaps = [tie_gap(hf, p, t) for p, t, w in zip(prompts, got["tokens"], want) if t != w]
    assert max(gaps) <= 1.0, gaps
