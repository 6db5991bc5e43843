"""Chapter 6's quiz (quizzes/06_quantization.yaml): the INT8 TPOT question gives the parameter count it needs, and a
ratio below 1 can be answered as a percentage."""
from course.quiz import bank, check


def _q(qid: str):
    return {q.id: q for q in bank.load_bank(bank.bank_path("06_quantization"))}[qid]


def test_the_tpot_question_states_the_parameter_count():
    q = _q("int8_tpot_bound")
    assert "67.4 億パラメータ" in q.prompt
    assert check.check_answer(q, "3.30 ms")[0] and check.check_answer(q, "0.0033 秒")[0]


def test_a_share_of_the_bound_can_be_written_as_a_percentage():
    q = _q("gpt_fast_share")
    assert check.check_answer(q, "0.51")[0] and check.check_answer(q, "51%")[0]
    assert check.check_answer(q, "５１％")[0] and check.check_answer(q, "80%")[0] is False
