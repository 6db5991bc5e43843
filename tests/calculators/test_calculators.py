"""The calculators against values computed by hand (written out below)."""
import pytest

from minimal_engine import calculators as calc


# ------------------------------------------------------------ KV per token
@pytest.mark.parametrize("model, expected", [
    ("Llama 3.1 8B", 2 * 32 * 8 * 128 * 2),     # 131,072
    ("Llama 3.3 70B", 2 * 80 * 8 * 128 * 2),    # 327,680
    ("Qwen3-0.6B", 2 * 28 * 8 * 128 * 2),       # 114,688
    ("course-125M", 2 * 12 * 4 * 64 * 2),       # 12,288
    ("DeepSeek R1", 61 * (512 + 64) * 2),       # 70,272 (MLA: no factor 2 for K and V)
])
def test_kv_bytes_per_token_bf16(model, expected):
    assert calc.kv_bytes_per_token(model, "bf16") == expected


def test_kv_bytes_per_token_literals_match_course_table():
    assert calc.kv_bytes_per_token("Llama 3.1 8B") == 131_072
    assert calc.kv_bytes_per_token("Llama 3.3 70B") == 327_680
    assert calc.kv_bytes_per_token("Qwen3-0.6B") == 114_688
    assert calc.kv_bytes_per_token("DeepSeek R1") == 70_272
    assert calc.kv_bytes_per_token("DeepSeek R1", "fp8") == 35_136


def test_kv_counts_kv_heads_not_query_heads():
    # Putting Llama 3.1 8B's 32 query heads into the formula overstates it 4x.
    assert calc.kv_bytes_per_token_if_mha("Llama 3.1 8B") == 2 * 32 * 32 * 128 * 2 == 524_288
    assert calc.kv_bytes_per_token_if_mha("Llama 3.1 8B") == 4 * calc.kv_bytes_per_token("Llama 3.1 8B")
    # MQA: a single KV head.
    assert calc.kv_bytes_per_token_gqa(layers=32, kv_heads=1, head_dim=128, bytes_per_value=2) == 16_384


def test_deepseek_r1_mla_for_8192_tokens():
    assert calc.kv_cache_bytes("DeepSeek R1", 8192, "fp8") == 35_136 * 8192 == 287_834_112
    assert calc.kv_cache_bytes("DeepSeek R1", 8192, "bf16") == 70_272 * 8192 == 575_668_224
    # The source's "about 500 MB" is rough: the exact FP8 figure is ~288 MB.
    assert round(calc.kv_cache_bytes("DeepSeek R1", 8192, "fp8") / 1e6) == 288


def test_deepseek_r1_naive_mha_is_tens_of_gb():
    # K: 128 + 64 = 192 per head, V: 128 per head, 128 heads, 61 layers, bf16.
    per_token = 61 * 128 * (192 + 128) * 2
    assert per_token == 4_997_120
    assert calc.naive_mha_kv_bytes_per_token("DeepSeek R1", "bf16") == per_token
    total = calc.naive_mha_kv_bytes_per_token("DeepSeek R1", "bf16") * 8192
    assert total == 40_936_407_040                       # ~40.9 GB
    assert calc.naive_mha_kv_bytes_per_token("DeepSeek R1", "fp8") * 8192 == total // 2
    assert per_token // calc.kv_bytes_per_token("DeepSeek R1") == 71


# ---------------------------------------------------------- memory budgets
def test_gpu_memory_and_concurrency():
    assert calc.gpu_memory_bytes("H200") == 141 * 10**9
    assert calc.gpu_memory_bytes("H100", count=8) == 640 * 10**9
    # 100 GB free, Llama 3.1 8B, 8,192 tokens each: 131,072 x 8,192 = 1,073,741,824 B per user.
    assert calc.max_concurrent_users("Llama 3.1 8B", 8192, 100e9) == 100e9 // 1_073_741_824 == 93
    # H200, minus 8.03e9 x 2 B of bf16 weights: (141e9 - 16.06e9) // 1,073,741,824 = 116.
    users = calc.max_concurrent_users("Llama 3.1 8B", 8192, calc.gpu_memory_bytes("H200"),
                                      weight_bytes=calc.weight_bytes("Llama 3.1 8B"))
    assert calc.weight_bytes("Llama 3.1 8B") == 16_060_000_000
    assert users == (141e9 - 16.06e9) // 1_073_741_824 == 116


def test_gpu_table_datasheet_numbers():
    assert (calc.GPU_SPECS["H100"].memory_gb, calc.GPU_SPECS["H100"].hbm_tb_s) == (80, 3.35)
    assert (calc.GPU_SPECS["H200"].memory_gb, calc.GPU_SPECS["H200"].hbm_tb_s) == (141, 4.8)
    assert calc.GPU_SPECS["B200"].memory_gb == 180
    assert all(spec.source for spec in calc.GPU_SPECS.values())
    assert all(shape.source for shape in calc.MODEL_SHAPES.values())


# ------------------------------------------------------------------ latency
def test_tpot_and_interactivity():
    assert calc.tpot_ms_from_tok_s_user(60) == pytest.approx(16.67, abs=0.005)   # 1000 / 60
    assert calc.tok_s_user_from_tpot_ms(230.3) == pytest.approx(4.34, abs=0.005)  # 1000 / 230.3
    assert calc.tok_s_user_from_tpot_ms(calc.tpot_ms_from_tok_s_user(25)) == pytest.approx(25)


# ---------------------------------------------------------------- economics
def test_cost_and_energy_formulas():
    # $2.00/GPU-hr at 1,000 tok/s/gpu: 3.6 M tokens per hour -> $0.5556 / M tokens.
    assert calc.usd_per_million_tokens(2.0, 1000) == pytest.approx(2.0 / 3.6)
    # 1 kW at 1,000 tok/s: 1 J/token = 1e12 pJ/token.
    assert calc.joules_per_token(1.0, 1000) == pytest.approx(1.0)
    assert calc.picojoules_per_token(1.0, 1000) == pytest.approx(1e12)
    assert calc.joules_to_picojoules(0.5) == pytest.approx(5e11)


def test_inferencex_mi355x_row_is_reproduced():
    row = calc.INFERENCEX_MI355X_ROW
    out = calc.inferencex_economics("MI355X", row["total_tok_s_per_gpu"], tier=row["tier"])
    # 1.48 / (157.12 x 3600 / 1e6) = 1.48 / 0.565632 = 2.6165
    assert out["usd_per_gpu_hour"] == 1.48
    assert round(out["usd_per_m_total_tokens"], 2) == 2.62 == row["usd_per_m_total_tokens"]
    # 2.65 x 1000 / 157.12 = 16.866
    assert round(out["j_per_total_token"], 1) == 16.9 == row["j_per_total_token"]
    # The neocloud price does not reproduce it: 1.90 / 0.565632 = 3.359.
    neo = calc.inferencex_economics("MI355X", 157.12, tier="neocloud")
    assert round(neo["usd_per_m_total_tokens"], 2) == 3.36
    assert calc.tok_s_user_from_tpot_ms(row["median_tpot_ms"]) == pytest.approx(row["tok_s_user"], abs=0.005)
    assert "usd_per_m_output_tokens" not in out       # only with input_len / output_len


def test_inferencex_row_counts_total_tokens_and_its_output_only_equivalent():
    row = calc.INFERENCEX_MI355X_ROW
    assert (row["input_len"], row["output_len"]) == (8192, 1024)
    out = calc.inferencex_economics("MI355X", row["total_tok_s_per_gpu"], row["tier"],
                                    input_len=row["input_len"], output_len=row["output_len"])
    # 8k in / 1k out: 1024 / 9216 = 1/9 of the tokens are output tokens.
    assert out["output_tok_s_per_gpu"] == pytest.approx(157.12 / 9)            # 17.458
    # $1.48 / (17.458 x 3600 / 1e6) = $23.55 / M output tokens = 9 x $2.6165.
    assert out["usd_per_m_output_tokens"] == pytest.approx(9 * out["usd_per_m_total_tokens"])
    assert round(out["usd_per_m_output_tokens"], 2) == 23.55
    # 2,650 W / 17.458 = 151.8 J per output token = 9 x 16.866.
    assert round(out["j_per_output_token"], 1) == 151.8


def test_output_share_and_conversions():
    assert calc.output_share(8192, 1024) == pytest.approx(1 / 9)
    assert calc.output_share(1024, 1024) == 0.5
    assert calc.output_share(0, 128) == 1.0                  # no prompt: every token is output
    assert calc.output_tok_s_from_total(900, 8192, 1024) == pytest.approx(100)
    assert calc.total_tok_s_from_output(100, 8192, 1024) == pytest.approx(900)
    assert calc.total_tok_s_from_output(calc.output_tok_s_from_total(157.12, 8192, 1024),
                                        8192, 1024) == pytest.approx(157.12)


def test_cost_per_million_tokens_from_measured_output_tok_s():
    # $2/hr, 100 output tok/s: 0.36 M output tokens/hr -> $5.556/M output tokens;
    # 8k/1k means 900 total tok/s -> 3.24 M total tokens/hr -> $0.6173/M total tokens.
    out = calc.cost_per_million_tokens(usd_per_hour=2.0, output_tok_s=100, input_len=8192, output_len=1024)
    assert out["usd_per_m_output_tokens"] == pytest.approx(2.0 / 0.36)
    assert out["usd_per_m_total_tokens"] == pytest.approx(2.0 / 3.24)
    assert out["total_tok_s"] == pytest.approx(900)
    assert out["output_tok_s"] == 100
    # Same convention as InferenceX: feeding the MI355X row's output tok/s back gives its total $/M.
    row = calc.INFERENCEX_MI355X_ROW
    back = calc.cost_per_million_tokens(1.48, calc.output_tok_s_from_total(157.12, 8192, 1024), 8192, 1024)
    assert round(back["usd_per_m_total_tokens"], 2) == row["usd_per_m_total_tokens"]


def test_energy_per_token_from_watts_and_output_tok_s():
    # 60 W at 20 output tok/s, 96 in / 32 out (share 1/4): 3 J/output token, 0.75 J/total token.
    out = calc.energy_per_token(watts=60, output_tok_s=20, input_len=96, output_len=32)
    assert out == pytest.approx({"j_per_output_token": 3.0, "j_per_total_token": 0.75})
    mi = calc.energy_per_token(2650, 157.12 / 9, 8192, 1024)
    assert round(mi["j_per_total_token"], 1) == calc.INFERENCEX_MI355X_ROW["j_per_total_token"]


def test_price_table():
    assert calc.gpu_hour_price("H100", "neocloud") == 1.69
    assert calc.gpu_hour_price("GB200", "rental_3yr") == 3.30
    assert calc.get_gpu_cost("B200").all_in_kw == 2.17


# ------------------------------------------------------------------- errors
@pytest.mark.parametrize("call, message", [
    (lambda: calc.get_model_shape("GPT-5"), "known models: course-125M, Llama 3.1 8B"),
    (lambda: calc.get_gpu_spec("V100"), "known GPUs: H100, H200, B200"),
    (lambda: calc.bytes_per_value("fp3"), "known dtypes: fp32, bf16"),
    (lambda: calc.gpu_hour_price("H100", "spot"), "known price tiers: hyperscaler, neocloud"),
    (lambda: calc.tpot_ms_from_tok_s_user(0), "tok_s_user must be > 0"),
    (lambda: calc.usd_per_million_tokens(2.0, 0), "tok_s_per_gpu must be > 0"),
    (lambda: calc.joules_per_token(-1, 100), "kw_per_gpu must be >= 0"),
    (lambda: calc.output_share(8192, 0), "output_len must be > 0"),
    (lambda: calc.output_share(-1, 10), "input_len must be >= 0"),
    (lambda: calc.cost_per_million_tokens(2.0, 0, 10, 10), "output_tok_s must be > 0"),
    (lambda: calc.energy_per_token(-5, 10, 10, 10), "watts must be >= 0"),
    (lambda: calc.kv_cache_bytes("Qwen3-0.6B", -5), "tokens must be >= 0"),
    (lambda: calc.kv_bytes_per_token_gqa(-32, 8, 128, 2), "layers must be > 0"),
    (lambda: calc.kv_bytes_per_token_gqa(32, 8, 128, "2"), "bytes per value must be a number"),
    (lambda: calc.max_concurrent_users("Llama 3.1 8B", 8192, 10e9, weight_bytes=16e9),
     "do not fit in memory"),
    (lambda: calc.naive_mha_kv_bytes_per_token("Llama 3.1 8B"), "does not use MLA"),
    (lambda: calc.ModelShape("bad", 2, 6, 4, 64, 1e6, "test"), "must be a multiple of kv_heads"),
])
def test_errors_are_clear(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_static_batches_idle_share_pools_every_group():
    """Groups of 2 from [10, 100, 20, 50]: idle (100-10) + (50-20) = 120 of 2x100 + 2x50 = 300 slot-steps."""
    assert calc.static_batches_idle_share([10, 100, 20, 50], 2) == pytest.approx(120 / 300)
    assert calc.static_batches_idle_share([10, 100, 20, 50], 4) == pytest.approx(calc.static_batch_idle_share([10, 100, 20, 50]))
    with pytest.raises(ValueError):
        calc.static_batches_idle_share([], 2)
