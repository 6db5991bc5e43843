"""Quiz banks load, answers come from the calculators, checking and the widget behave."""
from pathlib import Path

import pytest
import yaml

from course import quiz
from minimal_engine import calculators as calc

BANKS = sorted(Path(quiz.QUIZ_DIR).glob("*.yaml"))


def test_there_is_a_bank_for_lesson_1():
    assert quiz.QUIZ_DIR / "01_inference_basics.yaml" in BANKS


@pytest.mark.parametrize("path", BANKS, ids=lambda p: p.name)
def test_every_bank_loads_and_is_well_formed(path):
    questions = quiz.load_bank(path)
    assert len(questions) >= 10
    assert len({q.id for q in questions}) == len(questions)
    for q in questions:
        assert q.prompt
        if q.kind == "single":
            assert sum(c.correct for c in q.choices) == 1, q.id
        if q.kind in ("single", "multiple"):
            assert all(c.explanation for c in q.choices), q.id
        if q.kind == "numeric":
            assert q.answer_from and q.unit and q.answer is not None, q.id
        if q.kind == "open":
            assert q.explanation, q.id
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert not any("answer" in r for r in raw["questions"]), "numeric answers must use answer_from"


def test_lesson_1_covers_every_kind():
    kinds = {q.kind for q in quiz.load_bank(quiz.bank_path("01_inference_basics"))}
    assert kinds == {"single", "multiple", "numeric", "open"}


def _by_id():
    return {q.id: q for q in quiz.load_bank(quiz.bank_path("01_inference_basics"))}


def test_numeric_answers_equal_the_calculators():
    qs = _by_id()
    assert qs["tpot_from_interactivity"].answer == calc.tpot_ms_from_tok_s_user(60)
    assert qs["kv_bytes_llama31_8b"].answer == calc.kv_bytes_per_token("Llama 3.1 8B", "bf16") == 131_072
    assert qs["deepseek_r1_mla_8k"].answer == calc.kv_cache_bytes("DeepSeek R1", 8192, "fp8") / 1e6
    assert qs["deepseek_r1_100_users"].answer == calc.kv_cache_bytes("DeepSeek R1", 100 * 8192, "fp8") / 1e9
    assert qs["max_users_h200"].answer == calc.max_concurrent_users(
        "Llama 3.1 8B", 8192, calc.gpu_memory_bytes("H200"), weight_bytes=calc.weight_bytes("Llama 3.1 8B"))
    assert qs["usd_per_million_tokens"].answer == calc.usd_per_million_tokens(1.41, 1000)
    assert qs["joules_per_token"].answer == calc.joules_per_token(2.65, 157.12)


@pytest.mark.parametrize("path", BANKS, ids=lambda p: p.name)
def test_every_numeric_answer_is_recomputed_from_its_call(path):
    for q in quiz.load_bank(path):
        if q.kind == "numeric":
            value = quiz.compute_answer(q.answer_from)
            assert q.answer == pytest.approx(value / quiz.BYTE_UNITS.get(q.unit, 1))


def test_numeric_tolerance_units_and_parsing():
    q = _by_id()["tpot_from_interactivity"]          # 16.67 ms, rel 1%
    assert quiz.check_answer(q, 16.7)[0]
    assert quiz.check_answer(q, "16.67 ms")[0]
    assert quiz.check_answer(q, "16.7ms")[0]
    assert not quiz.check_answer(q, 17.0)[0]          # 2% off
    correct, feedback = quiz.check_answer(q, "0.0167 s")
    assert not correct and "単位が違います" in feedback
    correct, feedback = quiz.check_answer(q, "たくさん")
    assert not correct and "数値として読めません" in feedback
    mb = _by_id()["deepseek_r1_mla_8k"]                # 287.8 MB
    assert quiz.check_answer(mb, "288")[0]
    assert quiz.check_answer(mb, "0.288 GB")[0]       # byte units convert
    assert quiz.check_answer(mb, "287,834,112 B")[0]
    assert not quiz.check_answer(mb, "500 MB")[0]     # the rough figure is not accepted
    usd = _by_id()["usd_per_million_tokens"]           # $1.41 / 3.6 = $0.3917
    assert quiz.check_answer(usd, "$0.39")[0] and quiz.check_answer(usd, "0.392 $/M tokens")[0]
    users = _by_id()["max_users_h200"]                 # exact: abs tolerance 0
    assert quiz.check_answer(users, 116)[0] and not quiz.check_answer(users, 117)[0]


def test_choice_checking_and_feedback_explains_every_choice():
    qs = _by_id()
    single = qs["prefill_bottleneck"]
    right = next(i for i, c in enumerate(single.choices) if c.correct)
    assert quiz.check_answer(single, right)[0]
    correct, feedback = quiz.check_answer(single, (right + 1) % len(single.choices))
    assert not correct
    assert all(c.explanation in feedback for c in single.choices)
    multi = qs["ttft_factors"]
    right_set = [i for i, c in enumerate(multi.choices) if c.correct]
    assert quiz.check_answer(multi, right_set)[0]
    assert not quiz.check_answer(multi, right_set[:1])[0]               # a subset is wrong
    assert not quiz.check_answer(multi, range(len(multi.choices)))[0]   # so is a superset
    with pytest.raises(ValueError, match="choice indices"):
        quiz.check_answer(multi, [9])


def test_open_questions_reveal_and_are_not_graded():
    q = _by_id()["no_kv_cache_open"]
    assert "再計算" in quiz.reveal_answer(q)
    with pytest.raises(ValueError, match="not graded"):
        quiz.check_answer(q, "何か")


def test_score_counts_graded_questions_only():
    qs = list(_by_id().values())
    graded = sum(q.graded for q in qs)
    assert quiz.score(qs, {}) == (0, graded)
    assert quiz.score(qs, {"prefill_bottleneck": True, "ttft_factors": False}) == (1, graded)


def test_bad_banks_are_rejected(tmp_path):
    def bank(questions):
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump({"questions": questions}, allow_unicode=True), encoding="utf-8")
        return path

    two_right = [{"text": "a", "correct": True, "explanation": "x"},
                 {"text": "b", "correct": True, "explanation": "y"}]
    with pytest.raises(ValueError, match="exactly one correct"):
        quiz.load_bank(bank([{"id": "s", "type": "single", "prompt": "p", "choices": two_right}]))
    with pytest.raises(ValueError, match="needs an explanation"):
        quiz.load_bank(bank([{"id": "s", "type": "multiple", "prompt": "p",
                              "choices": [{"text": "a", "correct": True}, {"text": "b", "explanation": "y"}]}]))
    with pytest.raises(ValueError, match="not a typed answer"):
        quiz.load_bank(bank([{"id": "n", "type": "numeric", "prompt": "p", "answer": 16.7, "unit": "ms"}]))
    with pytest.raises(ValueError, match="unknown calculator 'tpot'; known: .*tpot_ms_from_tok_s_user"):
        quiz.load_bank(bank([{"id": "n", "type": "numeric", "prompt": "p", "unit": "ms",
                              "answer_from": {"func": "tpot", "args": {}}}]))
    with pytest.raises(ValueError, match="no quiz bank 'nope'; known banks: .*01_inference_basics"):
        quiz.bank_path("nope")


def test_widget_callbacks_update_the_score():
    w = quiz.show_quiz("01_inference_basics")
    qs = w.questions
    i_tpot = next(i for i, q in enumerate(qs) if q.id == "tpot_from_interactivity")
    assert w.submit(i_tpot, "16.7")[0]
    assert "得点: 1 /" in w.score_label.value
    assert "正解です" in w.feedback[i_tpot].value
    # A button click reads the input widget, as in JupyterLab.
    i_single = next(i for i, q in enumerate(qs) if q.kind == "single")
    w.buttons[i_single].click()                         # nothing selected yet
    assert "選んでください" in w.feedback[i_single].value
    w.inputs[i_single].value = next(j for j, c in enumerate(qs[i_single].choices) if c.correct)
    w.buttons[i_single].click()
    assert "得点: 2 /" in w.score_label.value
    i_multi = next(i for i, q in enumerate(qs) if q.kind == "multiple")
    w.inputs[i_multi].children[0].value = True
    w.buttons[i_multi].click()
    assert qs[i_multi].id in w.results
    # Wrong numeric answers count as answered but not correct.
    w.inputs[i_tpot].children[0].value = "20"
    w.buttons[i_tpot].click()
    assert w.results["tpot_from_interactivity"] is False
    # The open question's button reveals the model answer.
    i_open = next(i for i, q in enumerate(qs) if q.kind == "open")
    w.buttons[i_open].click()
    assert quiz.html.escape(qs[i_open].explanation[:10]) in w.feedback[i_open].value
