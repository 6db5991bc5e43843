"""Chapter 3: generation without a KV cache, the hand-built cached attention, lab 3's functions and the
chapter's calculators (FLOPs per token, KV bytes written per step, no-cache work)."""
import pytest
import torch

from course.labs import lab03
from course.runtime import get_llm
from course.panels import build as build_panel
from course.demos.no_cache import attend_with_cache, generate_no_cache, next_token_logits
from minimal_engine import LLM, SamplingParams
from minimal_engine import calculators as calc

PROMPTS = [[5, 17, 33, 100, 7, 9, 200, 45, 3, 80], [11, 12], list(range(40, 90))]
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def default_llm():
    return LLM(None, dtype="float32", device="cpu")


def _same_tokens(llm):
    for p in PROMPTS:
        cached = llm.generate([p], GREEDY, use_tqdm=False)[0].token_ids
        res = generate_no_cache(llm.engine.runner.model, p, GREEDY.max_tokens)
        assert res["token_ids"] == cached
        assert len(res["step_s"]) == GREEDY.max_tokens
        n, k = len(p), GREEDY.max_tokens
        assert res["tokens_processed"] == k * n + k * (k - 1) // 2      # step i recomputes n + i tokens


def test_no_cache_equals_engine_on_default_model(default_llm):
    _same_tokens(default_llm)


def test_no_cache_equals_engine_on_random_tiny_models(tiny_model):
    _arch, folder = tiny_model
    _same_tokens(LLM(folder, dtype="float32", device="cpu"))


def test_no_cache_logits_equal_engine_prefill(default_llm):
    """The last row of the engine's prefill logits is what the no-cache step computes."""
    from minimal_engine.engine.scheduler import ScheduledSeq, SchedulerOutput
    from minimal_engine.engine.sequence import Sequence
    ids = PROMPTS[2]
    eng = default_llm.engine
    seq = Sequence("x", None, ids, GREEDY)
    eng.block_manager.allocate(seq, len(ids))
    step = eng.runner.prepare(SchedulerOutput([ScheduledSeq(seq, 0, len(ids))]))
    input_ids, batch = step.input_ids, step.batch
    with torch.inference_mode():
        ours = eng.runner.model(input_ids, batch, eng.runner.kv_caches)[0]
    eng.block_manager.free(seq)
    torch.testing.assert_close(next_token_logits(eng.runner.model, ids), ours, atol=1e-5, rtol=1e-5)


def test_hand_built_attention_equals_engine_decode(default_llm):
    """attend_with_cache, fed layer 0's q/k/v position by position, gives the engine's attention output,
    both for the prefill step and for every paged decode step (captured with a forward hook)."""
    model = default_llm.engine.runner.model
    attn = model.layers[0].self_attn
    seen = []
    handle = attn.register_forward_hook(lambda m, args, out: seen.append((args[0].clone(), out.clone())))
    try:
        default_llm.generate([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True),
                             use_tqdm=False)
    finally:
        handle.remove()
    assert seen[0][0].shape[0] == len(PROMPTS[0]) and all(x.shape[0] == 1 for x, _ in seen[1:])
    h = torch.cat([x for x, _ in seen])                        # the normed input of every position, in order
    expected = torch.cat([o for _, o in seen])
    with torch.inference_mode():
        cos, sin = model.rope(torch.arange(h.shape[0]), h.dtype)
        qkv = attn.qkv_proj(h).view(h.shape[0], attn.h + 2 * attn.kvh, attn.dh)
        q, k, v = qkv[:, :attn.h], qkv[:, attn.h:attn.h + attn.kvh], qkv[:, attn.h + attn.kvh:]
        rot = lambda x: torch.cat((-x[..., attn.dh // 2:], x[..., :attn.dh // 2]), -1)   # noqa: E731
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        cache = {}
        outs = [attend_with_cache(q[t], k[t], v[t], cache) for t in range(h.shape[0])]
        ours = attn.o_proj(torch.stack(outs).reshape(h.shape[0], -1))
    assert cache["k"].shape == (attn.kvh, h.shape[0], attn.dh)
    assert torch.allclose(ours, expected, atol=1e-5, rtol=1e-4)


def test_hand_built_attention_groups_query_heads():
    """GQA: 4 query heads on 2 KV heads; each query head attends with its own KV head's keys."""
    torch.manual_seed(0)
    q, cache = torch.randn(4, 8), {}
    ks, vs = torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    for t in range(3):
        out = attend_with_cache(q, ks[t], vs[t], cache)
    for head in range(4):
        kv = head // 2
        w = (ks[:, kv] @ q[head] / 8 ** 0.5).softmax(0)
        torch.testing.assert_close(out[head], w @ vs[:, kv])


# ---------------------------------------------------------------- lab functions
def test_run_kv_lab_default_model():
    res = lab03.run_kv_lab("default", prompt_len=8, output_len=6, repeats=2, threads=1, load_check=False)
    assert res["tokens_equal"] and res["first_difference"] is None and res["warnings"] == []
    assert res["positions"] == [9, 10, 11, 12, 13]
    for name in ("cached", "no_cache"):
        assert len(res[f"{name}_ms"]) == 5
        assert all(lo <= m <= hi for lo, m, hi in zip(res[f"{name}_ms_min"], res[f"{name}_ms"], res[f"{name}_ms_max"]))
        assert res[f"{name}_total_s_min"] <= res[f"{name}_total_s"] <= res[f"{name}_total_s_max"]
    per = res["kv_bytes_per_token"]
    assert per == 2 * 6 * 5 * 64 * 4                                   # default model: 6 layers, 5 KV heads, fp32
    assert res["kv_bytes"] == [per * p for p in res["positions"]]
    # measured from the engine: the pool's bytes per slot, and its BlockManager's blocks (16 tokens each)
    assert res["slot_bytes"] == per and res["block_size"] == 16
    assert res["held_blocks"] == [-(-p // 16) for p in res["positions"]]
    assert res["tokens_processed"] == {"cached": 13, "no_cache": 6 * 8 + 15}
    assert res["kv_shape"] == {"layers": 6, "kv_heads": 5, "head_dim": 64, "bytes": 4}
    assert res["weight_bytes"] == 4 * sum(p.numel() for p in get_llm("default").model.parameters())
    assert res["no_cache_one_ms"] > 0                                  # a 1-position no-cache step, beside the intercept
    text = lab03.format_readout(res)
    assert "一致" in text and "エンジンが保持する KV" in text
    assert "lab-readout" not in lab03.readout_html(res) and "<table" in lab03.readout_html(res)
    fig = lab03.plot_steps(res)
    assert len(fig.axes) == 2
    history = []
    row = lab03.add_run(history, res)
    assert row["run"] == 1 and row["tokens_equal"] is True and "8" in lab03.history_html(history)
    csv_text = lab03.history_csv(history, "tanaka")
    assert csv_text.splitlines()[0].startswith("learner,run,model") and ",tanaka," not in csv_text.splitlines()[0]
    assert csv_text.splitlines()[1].startswith("tanaka,1,default")


def test_check_settings_refuses_bad_values():
    with pytest.raises(ValueError, match="プロンプト長"):
        lab03.check_settings(prompt_len=0)
    with pytest.raises(ValueError, match="上限"):
        lab03.check_settings(prompt_len=500, output_len=100)        # the default model has 512 positions
    with pytest.raises(ValueError):
        lab03.check_settings(model="nope")


def test_panel_run_adds_history_row(tmp_path):
    app = build_panel(3, prompt_len=8, output_len=4, repeats=1)
    assert "text/plain" in app._repr_mimebundle_() and "HBox(" not in app._repr_mimebundle_()["text/plain"]
    assert "lab-readout" in app.readout._dom_classes and "lab-history" in app.history_view._dom_classes
    assert app.on_save() is None
    app.prompt_len.value = 9
    res = app.on_run()
    assert res["prompt_len"] == 9 and len(app.history) == 1 and app.last_figure is not None
    assert "出力トークン" in app.readout.value and "9" in app.history_view.value
    app.csv_path.value = str(tmp_path / "h.csv")
    assert app.on_save().read_text(encoding="utf-8").count("\n") == 2


# ---------------------------------------------------------------- calculators of chapter 3
def test_flops_per_token_llama_8b():
    """The untied input embedding (128,256 x 4,096, a lookup) is not multiplied: 2 x (params - table)."""
    matmul = 8.03e9 - 128_256 * 4_096
    assert calc.matmul_params("Llama 3.1 8B") == matmul
    assert calc.flops_per_token("Llama 3.1 8B", 0) == 2 * matmul
    assert calc.flops_per_token("Llama 3.1 8B", 8192) == 2 * matmul + 4 * 32 * 32 * 128 * 8192
    assert calc.flops_per_token("Llama 3.1 8B", 8192) / 1e9 == pytest.approx(19.30, abs=0.005)
    assert calc.attention_flops_per_token(32, 32, 128, 1) == 4 * 32 * 32 * 128
    assert calc.matmul_params("Qwen3-0.6B") == calc.get_model_shape("Qwen3-0.6B").params   # none recorded: all


def test_flops_per_token_counts_what_the_engine_multiplies():
    """The blind reading (ch03 #1): calc.flops_per_token for Llama 3.1 8B equals the engine's own per-matrix
    count of its config (decode_shapes = step_cost: layers + lm_head + attention), up to the RMSNorm weights."""
    from course.demos.decode_shapes import LLAMA_31_8B, decode_shapes
    from minimal_engine.bench.roofline import weight_counts
    w = weight_counts(LLAMA_31_8B)
    assert calc.matmul_params("Llama 3.1 8B") == pytest.approx(w["layers"] + w["lm_head"], rel=1e-4)
    for ctx in (1, 8192, 131072):
        engine = sum(f for _, _, f in decode_shapes(LLAMA_31_8B, ctx))
        assert calc.flops_per_token("Llama 3.1 8B", ctx) == pytest.approx(engine, rel=1e-5)
    shape = calc.get_model_shape("course-125M")
    assert shape.embedding_params == 32_000 * 768      # untied, as its source says


def test_attention_term_is_the_roofline_formula():
    """One formula: step_cost's FLOPs for one decode token = 2 x (layer weights + lm_head) + the attention term."""
    from minimal_engine.config import ModelConfig
    from minimal_engine.llm import DEFAULT_MODEL
    from minimal_engine.bench.roofline import step_cost, weight_counts
    cfg = ModelConfig.from_folder(DEFAULT_MODEL)
    w = weight_counts(cfg)
    for ctx in (1, 100, 500):
        flops = step_cost(cfg, 4, decode_contexts=[ctx])["flops"]
        assert flops == 2 * (w["layers"] + w["lm_head"]) + calc.attention_flops_per_token(
            cfg.num_layers, cfg.num_heads, cfg.head_dim, ctx)


def test_kv_bytes_written_per_step():
    assert calc.kv_bytes_written_per_step("Llama 3.1 8B") == 131072
    assert calc.kv_bytes_written_per_step("Llama 3.1 8B", batch=32, dtype="fp8") == 32 * 65536
    with pytest.raises(ValueError):
        calc.kv_bytes_written_per_step("Llama 3.1 8B", batch=0)


def test_generation_flops_with_and_without_cache():
    shape = calc.get_model_shape("Llama 3.1 8B")

    def per(pos):
        return calc.flops_per_token(shape, pos + 1)
    p, n = 5, 4
    assert calc.generation_flops(shape, p, n) == pytest.approx(sum(per(i) for i in range(p + n - 1)))
    assert calc.generation_flops(shape, p, n, kv_cache=False) == pytest.approx(
        sum(per(i) for step in range(n) for i in range(p + step)))
    assert calc.generation_flops(shape, p, 1, kv_cache=False) == calc.generation_flops(shape, p, 1)
    r1, r2 = calc.no_cache_work_ratio(shape, 128, 128), calc.no_cache_work_ratio(shape, 128, 1024)
    assert 1 < r1 < r2


# ---------------------------------------------------------------- shapes of one decode step
def test_llama_8b_config_matches_specs_and_parameter_count():
    from course.demos.decode_shapes import LLAMA_31_8B as cfg
    from minimal_engine.model.synthetic import num_parameters
    s = calc.get_model_shape("Llama 3.1 8B")
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (s.layers, s.heads, s.kv_heads, s.head_dim)
    assert num_parameters(cfg) == pytest.approx(s.params, rel=0.002)


def test_decode_shapes_flops_equal_roofline_and_trace(default_llm):
    from course.demos.decode_shapes import LLAMA_31_8B, decode_shapes, trace_decode_shapes
    from minimal_engine.bench.roofline import step_cost
    for cfg in (default_llm.model_config, LLAMA_31_8B):
        for ctx in (1, 300):
            assert sum(f for _, _, f in decode_shapes(cfg, ctx)) == step_cost(cfg, 2, decode_contexts=[ctx])["flops"]
    cfg = default_llm.model_config
    traced = trace_decode_shapes(default_llm, PROMPTS[0])
    d = cfg.hidden_size
    assert traced == {"embed_tokens": [1, d], "layers.0.input_layernorm": [1, d],
                      "layers.0.self_attn.qkv_proj": [1, (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim],
                      "layers.0.self_attn.o_proj": [1, d], "layers.0.mlp.gate_up_proj": [1, 2 * cfg.intermediate_size],
                      "layers.0.mlp.down_proj": [1, d], "norm": [1, d], "lm_head": [1, cfg.vocab_size]}
    rows = dict((stage, shape) for stage, shape, _ in decode_shapes(cfg, 11))
    assert rows["lm_head"] == f"[1, {cfg.vocab_size}]"


# ---------------------------------------------------------------- quiz: the steps figure, units, the bank
STEPS = {"kind": "steps", "data": {"position": [64, 128, 192], "cached_ms": [6.0, 6.0, 6.5],
                                   "no_cache_ms": [19, 32, 45]}}


def test_steps_figure_validates_answers_and_draws():
    import copy

    from course.quiz.figures import FIGURE_FUNCS, figure_answer, render_png, validate_figure
    fig = validate_figure(copy.deepcopy(STEPS), "q")
    assert fig["slo"] == {}
    assert FIGURE_FUNCS["no_cache_step_ratio"](fig["data"]) == pytest.approx(45 / 6.5)
    assert figure_answer({"func": "no_cache_step_ratio", "args": {"position": 128}}, fig) == pytest.approx(32 / 6)
    assert render_png(fig)[:8] == b"\x89PNG\r\n\x1a\n"
    for bad in ({"position": [64, 128], "cached_ms": [6.0]}, {"position": [128, 64], "cached_ms": [6, 6],
                                                            "no_cache_ms": [1, 2]}):
        with pytest.raises(ValueError):
            validate_figure({"kind": "steps", "data": {"no_cache_ms": [1, 2], **bad}}, "q")


def test_flop_and_ratio_units():
    from course.quiz.numbers import convert, find_unit, parse_numeric
    value, unit = parse_numeric("２．０４e10 FLOPs")
    assert convert(value, unit, find_unit("GFLOPs")) == pytest.approx(20.4)
    assert convert(*parse_numeric("745倍"), find_unit("倍")) == 745
    assert find_unit("GFLOPs/トークン") is find_unit("GFLOPs")


def test_chapter3_bank_answers_come_from_the_calculators():
    from course.quiz.bank import bank_path, load_bank
    from course.quiz.check import check_answer
    qs = {q.id: q for q in load_bank(bank_path("03_transformer_kv_cache"))}
    assert qs["flops_per_token_8k"].answer == pytest.approx(calc.flops_per_token("Llama 3.1 8B", 8192) / 1e9)
    assert qs["kv_write_per_step"].answer == 131072
    assert qs["kv_write_batch_fp8"].answer == pytest.approx(64 * 65536 / 1e6)
    assert qs["no_cache_ratio"].answer == pytest.approx(calc.no_cache_work_ratio("Llama 3.1 8B", 1000, 1000))
    assert qs["steps_figure_ratio"].answer == pytest.approx(79 / 6.3)
    assert check_answer(qs["flops_per_token_8k"], "19.30 GFLOPs")[0] is True
    assert check_answer(qs["flops_per_token_8k"], "1.93e10 FLOPs")[0] is True
    assert check_answer(qs["flops_per_token_8k"], "20.35")[0] is False        # the embedding table counted as a matmul
    assert check_answer(qs["flops_per_token_8k"], "15.01")[0] is False        # the attention term left out
    slots = {c.text: c.correct for c in qs["slot_mapping"].choices}
    assert slots == {"37": False, "117": False, "14": False, "149": True}
    assert 9 * 16 + 37 % 16 == 149 and 9 + 37 % 16 == 14 and 2 * 16 + 37 % 16 == 37 and 7 * 16 + 37 % 16 == 117
    for q in qs.values():
        if q.kind in ("single", "multiple"):
            assert all(c.explanation for c in q.choices), q.id
