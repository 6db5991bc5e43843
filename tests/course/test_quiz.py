"""Quiz banks load, answers come from the calculators, checking and the widget behave."""
import html
import re
from pathlib import Path

import pytest
import yaml

from course.quiz import bank, check, figures, numbers, widget
from minimal_engine import calculators as calc

BANKS = sorted(Path(bank.QUIZ_DIR).glob("*.yaml"))


def test_chapter_10_right_answers_are_not_always_listed_first():
    """Choosing the first choice every time must not pass chapter 10's choice questions."""
    qs = [q for q in bank.load_bank(bank.QUIZ_DIR / "10_pareto_tco.yaml")
          if q.kind in ("single", "multiple")]
    assert qs and not all(q.choices[0].correct for q in qs)
    assert len({[c.correct for c in q.choices].index(True) for q in qs}) >= 2


@pytest.mark.parametrize("path", BANKS, ids=lambda p: p.name)
def test_no_bank_puts_every_right_answer_at_one_position(path):
    """Blind readings ch07/ch09 (2026-12-07): every single-choice answer was A. The bank shows choices in a
    fixed shuffle per question id; always picking one letter must not pass a bank's single-choice questions."""
    singles = [q for q in bank.load_bank(path) if q.kind == "single" and q.figure is None]
    positions = {[c.correct for c in q.choices].index(True) for q in singles}
    assert len(singles) < 2 or len(positions) >= 2, (path.name, positions)
    again = bank.load_bank(path)                                  # the same order on every load
    assert [[c.text for c in q.choices] for q in again] == [[c.text for c in q.choices] for q in bank.load_bank(path)]


def test_there_is_a_bank_for_lesson_1():
    assert bank.QUIZ_DIR / "01_inference_basics.yaml" in BANKS


@pytest.mark.parametrize("path", BANKS, ids=lambda p: p.name)
def test_each_bank_has_a_quiz_notebook_named_so(path):
    """quizzes/NN_topic.yaml goes with quizzes/NN_topic_quiz.ipynb (its JupyterLab tab says quiz)."""
    assert (path.parent / f"{path.stem}_quiz.ipynb").is_file()
    assert not (path.parent / f"{path.stem}.ipynb").exists()   # same name as the lesson: tabs look alike


@pytest.mark.parametrize("path", BANKS, ids=lambda p: p.name)
def test_every_bank_loads_and_is_well_formed(path):
    questions = bank.load_bank(path)
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
    kinds = {q.kind for q in bank.load_bank(bank.bank_path("01_inference_basics"))}
    assert kinds == {"single", "multiple", "numeric", "open"}


def _by_id():
    return {q.id: q for q in bank.load_bank(bank.bank_path("01_inference_basics"))}


def test_numeric_answers_equal_the_calculators():
    qs = _by_id()
    assert qs["tpot_from_interactivity"].answer == calc.tpot_ms_from_tok_s_user(60)
    assert qs["kv_bytes_llama31_8b"].answer == calc.kv_bytes_per_token("Llama 3.1 8B", "bf16") == 131_072
    assert qs["deepseek_r1_mla_8k"].answer == calc.kv_cache_bytes("DeepSeek R1", 8192, "fp8") / 1e6
    assert qs["deepseek_r1_100_users"].answer == calc.kv_cache_bytes("DeepSeek R1", 100 * 8192, "fp8") / 1e9
    assert qs["max_users_h200"].answer == calc.max_concurrent_users(
        "Llama 3.1 8B", 8192, calc.gpu_memory_bytes("H200"), weight_bytes=calc.weight_bytes("Llama 3.1 8B"))
    assert qs["usd_per_million_tokens"].answer == calc.usd_per_million_tokens(1.41, 1000)
    assert qs["joules_per_token"].answer == calc.joules_per_token(2.65, 518.82)


@pytest.mark.parametrize("path", BANKS, ids=lambda p: p.name)
def test_every_numeric_answer_is_recomputed_from_its_call(path):
    for q in bank.load_bank(path):
        if q.kind == "numeric":
            value = (figures.figure_answer(q.answer_from, q.figure) if q.figure
                     else bank.compute_answer(q.answer_from))
            assert q.answer == pytest.approx(value / bank.SCALED_UNITS.get(q.unit, 1))


def test_numeric_tolerance_units_and_parsing():
    q = _by_id()["tpot_from_interactivity"]          # 16.67 ms, abs 0.5 ms (17 ms, rounded, is right)
    assert check.check_answer(q, 16.7)[0]
    assert check.check_answer(q, "16.67 ms")[0]
    assert check.check_answer(q, "16.7ms")[0]
    assert check.check_answer(q, 17.0)[0]              # 1000 / 60 rounded to whole ms
    assert check.check_answer(q, 17.5)[0] is False     # 0.83 ms off: graded, wrong
    mb = _by_id()["deepseek_r1_mla_8k"]                # 287.8 MB
    assert check.check_answer(mb, "288")[0]
    assert check.check_answer(mb, "0.288 GB")[0]       # byte units convert
    assert check.check_answer(mb, "287,834,112 B")[0]
    assert check.check_answer(mb, "500 MB")[0] is False  # the rough figure is not accepted
    usd = _by_id()["usd_per_million_tokens"]           # $1.41 / 3.6 = $0.3917
    assert check.check_answer(usd, "$0.39")[0] and check.check_answer(usd, "0.392 $/M tokens")[0]
    users = _by_id()["max_users_h200"]                 # exact: abs tolerance 0
    assert check.check_answer(users, 116)[0] and check.check_answer(users, 117)[0] is False


def test_full_width_digits_and_punctuation_are_read():
    qs = _by_id()
    assert check.check_answer(qs["tpot_from_interactivity"], "１６．７") == check.check_answer(
        qs["tpot_from_interactivity"], "16.7")
    assert check.check_answer(qs["tpot_from_interactivity"], "１６．７　ｍｓ")[0] is True
    assert check.check_answer(qs["kv_bytes_llama31_8b"], "１３１，０７２")[0] is True
    assert check.check_answer(qs["usd_per_million_tokens"], "＄０．３９")[0] is True
    assert numbers.parse_numeric("約１．６９×１０¹³") == (1.69e13, "")


def test_thousands_separators_and_bad_commas():
    q = _by_id()["kv_bytes_llama31_8b"]               # 131,072 B
    assert check.check_answer(q, "131,072")[0] is True
    assert check.check_answer(q, "131,072 バイト")[0] is True
    assert numbers.parse_numeric("1,073,741,824") == (1073741824.0, "")
    correct, feedback = check.check_answer(q, "131,07")           # not a thousands group: not graded
    assert correct is None and "3桁区切り" in feedback


@pytest.mark.parametrize("qid, response", [
    ("tpot_from_interactivity", "16.7ミリ秒"),
    ("tpot_from_interactivity", "約16.7 ミリ秒です。"),
    ("kv_bytes_llama31_8b", "131072バイト"),
    ("deepseek_r1_mla_8k", "288メガバイト"),
    ("deepseek_r1_100_users", "28.8ギガバイト"),
    ("max_users_h200", "116人"),
    ("max_users_h200", "116 リクエスト"),
    ("usd_per_million_tokens", "0.39ドル"),
    ("joules_per_token", "5.11 J/トークン"),
    ("sweep_tpot_slo", "32本"),
    ("inferencex_output_tok_s", "259.4 トークン/秒"),
])
def test_japanese_unit_words(qid, response):
    assert check.check_answer(_by_id()[qid], response)[0] is True


@pytest.mark.parametrize("qid, response", [
    ("tpot_from_interactivity", "0.0167 s"),
    ("tpot_from_interactivity", "0.0167秒"),
    ("tpot_from_interactivity", "16,700 μs"),
    ("kv_bytes_llama31_8b", "128 KiB"),
    ("kv_bytes_llama31_8b", "131.072 KB"),
    ("deepseek_r1_mla_8k", "0.2878 GB"),
    ("deepseek_r1_mla_8k", "287,834 KB"),
    ("deepseek_r1_100_users", "28,783 MB"),
    ("joules_per_token", "5.11e12 pJ"),
])
def test_compatible_units_are_converted(qid, response):
    correct, feedback = check.check_answer(_by_id()[qid], response)
    assert correct is True, feedback
    assert "として採点しました" in feedback           # the conversion is shown


def test_unreadable_answer_is_not_graded_and_says_what_is_expected():
    q = _by_id()["tpot_from_interactivity"]
    for response in ("たくさん", "", "   ", None):
        correct, feedback = check.check_answer(q, response)
        assert correct is None, response
        assert "採点していません" in feedback and "例: 12.5 または 12.5 ms" in feedback
    assert "数値として読めませんでした：『たくさん』" in check.check_answer(q, "たくさん")[1]
    assert "回答が空です" in check.check_answer(q, "")[1]
    qs = list(_by_id().values())
    assert check.score(qs, {q.id: None}) == (0, sum(x.graded for x in qs))


def test_incompatible_or_unknown_unit_is_not_graded_and_names_the_expected_unit():
    q = _by_id()["tpot_from_interactivity"]
    correct, feedback = check.check_answer(q, "16.7 GB")
    assert correct is None
    assert "単位が合いません" in feedback and "データ量" in feedback and "ms（ミリ秒）" in feedback
    correct, feedback = check.check_answer(q, "16.7 ギガ")
    assert correct is None and "単位『ギガ』が読めませんでした" in feedback and "ms（ミリ秒）" in feedback
    b = _by_id()["kv_bytes_llama31_8b"]
    correct, feedback = check.check_answer(b, "131072 ms")
    assert correct is None and "B（バイト）" in feedback


def test_widget_does_not_count_unreadable_answers():
    w = widget.show_quiz("01_inference_basics")
    i = next(i for i, q in enumerate(w.questions) if q.id == "tpot_from_interactivity")
    w.inputs[i].children[0].value = "たくさん"
    w.buttons[i].click()
    assert "tpot_from_interactivity" not in w.results
    assert "得点: 0 /" in w.score_label.value and "回答済み 0 問" in w.score_label.value
    assert "数値として読めませんでした" in w.feedback[i].value
    assert w.submit(i, "16.7")[0] is True
    assert w.submit(i, "16.7 GB")[0] is None           # a later unreadable answer keeps the graded one
    assert w.results["tpot_from_interactivity"] is True and "得点: 1 /" in w.score_label.value


def test_bank_units_must_be_known(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"questions": [{
        "id": "n", "type": "numeric", "prompt": "p", "unit": "furlongs",
        "answer_from": {"func": "tpot_ms_from_tok_s_user", "args": {"tok_s_user": 60}}}]}), encoding="utf-8")
    with pytest.raises(ValueError, match="unknown unit 'furlongs'"):
        bank.load_bank(path)


def test_choice_checking_and_feedback_explains_every_choice():
    qs = _by_id()
    single = qs["prefill_bottleneck"]
    right = next(i for i, c in enumerate(single.choices) if c.correct)
    assert check.check_answer(single, right)[0]
    correct, feedback = check.check_answer(single, (right + 1) % len(single.choices))
    assert not correct
    assert all(c.explanation in feedback for c in single.choices)
    multi = qs["ttft_factors"]
    right_set = [i for i, c in enumerate(multi.choices) if c.correct]
    assert check.check_answer(multi, right_set)[0]
    assert not check.check_answer(multi, right_set[:1])[0]               # a subset is wrong
    assert not check.check_answer(multi, range(len(multi.choices)))[0]   # so is a superset
    with pytest.raises(ValueError, match="choice indices"):
        check.check_answer(multi, [9])


def test_open_questions_reveal_and_are_not_graded():
    q = _by_id()["no_kv_cache_open"]
    assert "再計算" in check.reveal_answer(q)
    with pytest.raises(ValueError, match="not graded"):
        check.check_answer(q, "何か")


def test_score_counts_graded_questions_only():
    qs = list(_by_id().values())
    graded = sum(q.graded for q in qs)
    assert check.score(qs, {}) == (0, graded)
    assert check.score(qs, {"prefill_bottleneck": True, "ttft_factors": False}) == (1, graded)


def test_bad_banks_are_rejected(tmp_path):
    def bad_bank(questions):
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump({"questions": questions}, allow_unicode=True), encoding="utf-8")
        return path

    two_right = [{"text": "a", "correct": True, "explanation": "x"},
                 {"text": "b", "correct": True, "explanation": "y"}]
    with pytest.raises(ValueError, match="exactly one correct"):
        bank.load_bank(bad_bank([{"id": "s", "type": "single", "prompt": "p", "choices": two_right}]))
    with pytest.raises(ValueError, match="needs an explanation"):
        bank.load_bank(bad_bank([{"id": "s", "type": "multiple", "prompt": "p",
                              "choices": [{"text": "a", "correct": True}, {"text": "b", "explanation": "y"}]}]))
    with pytest.raises(ValueError, match="not a typed answer"):
        bank.load_bank(bad_bank([{"id": "n", "type": "numeric", "prompt": "p", "answer": 16.7, "unit": "ms"}]))
    with pytest.raises(ValueError, match="unknown calculator 'tpot'; known: .*tpot_ms_from_tok_s_user"):
        bank.load_bank(bad_bank([{"id": "n", "type": "numeric", "prompt": "p", "unit": "ms",
                              "answer_from": {"func": "tpot", "args": {}}}]))
    with pytest.raises(ValueError, match="no quiz bank 'nope'; known banks: .*01_inference_basics"):
        bank.bank_path("nope")


def test_widget_callbacks_update_the_score():
    w = widget.show_quiz("01_inference_basics")
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
    assert html.escape(qs[i_open].explanation[:10]) in w.feedback[i_open].value


# ------------------------------------------------------------- figure questions
SWEEP = {"concurrency": [1, 2, 4, 8, 16], "tpot_ms": [10, 12, 30, 49, 70], "ttft_s": [0.1, 0.1, 0.2, 1.5, 3.0]}


def test_max_concurrency_meeting_slo_reads_the_data():
    assert figures.max_concurrency_meeting_slo(SWEEP, {"tpot_ms": 50}) == 8
    assert figures.max_concurrency_meeting_slo(SWEEP, {"tpot_ms": 50, "ttft_s": 1.0}) == 4   # both limits
    with pytest.raises(ValueError, match="no point"):
        figures.max_concurrency_meeting_slo(SWEEP, {"tpot_ms": 5})


def test_figure_questions_answer_from_their_own_data():
    qs = _by_id()
    sweep, timeline = qs["sweep_tpot_slo"], qs["ttft_slo_timeline"]
    assert sweep.figure["kind"] == "sweep" and timeline.figure["kind"] == "timeline"
    assert sweep.answer == figures.max_concurrency_meeting_slo(sweep.figure["data"], sweep.figure["slo"])
    ttft = [toks[0] - arr for arr, toks in zip(timeline.figure["data"]["arrival_s"], timeline.figure["data"]["token_s"])]
    over = [i + 1 for i, t in enumerate(ttft) if t > timeline.figure["slo"]["ttft_s"]]
    assert timeline.answer == over and over
    assert [c.value for c in timeline.choices if c.correct] == over            # marked from the data
    assert all(c.explanation.startswith(f"リクエスト{c.value}: ") for c in timeline.choices)  # the data's fact
    assert "例" in sweep.figure["caption"] and "例" in timeline.figure["caption"]   # labelled as an example
    png = figures.render_png(sweep.figure)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and figures.render_png(timeline.figure)[:4] == b"\x89PNG"


def test_figure_choice_marked_against_the_data_is_rejected(tmp_path):
    figure = {"kind": "sweep", "slo": {"tpot_ms": 50}, "data": SWEEP}
    choices = [{"text": "4", "value": 4, "correct": True, "explanation": "x"},
               {"text": "8", "value": 8, "explanation": "y"}]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"questions": [{
        "id": "f", "type": "single", "prompt": "p", "figure": figure, "choices": choices,
        "answer_from": {"func": "max_concurrency_meeting_slo"}}]}), encoding="utf-8")
    with pytest.raises(ValueError, match="marked correct=True, but the data give 8"):
        bank.load_bank(path)
    figure["data"] = {"concurrency": [1, 2], "tpot_ms": [10]}
    path.write_text(yaml.safe_dump({"questions": [{
        "id": "f", "type": "numeric", "prompt": "p", "figure": figure, "unit": "リクエスト",
        "answer_from": {"func": "max_concurrency_meeting_slo"}}]}), encoding="utf-8")
    with pytest.raises(ValueError, match="differ in length"):
        bank.load_bank(path)


def test_widget_shows_the_figure_as_an_image():
    import ipywidgets as w
    quiz_widget = widget.show_quiz("01_inference_basics")
    shown = [i for i, q in enumerate(quiz_widget.questions) if q.figure]
    assert len(shown) == 2 and set(quiz_widget.images) == set(shown)
    assert all(isinstance(quiz_widget.images[i], w.Image) and quiz_widget.images[i].value[:4] == b"\x89PNG"
               for i in shown)


# ---------------------------------------------------------------- ordering
def test_questions_come_after_what_they_build_on(tmp_path):
    qs = bank.load_bank(bank.bank_path("01_inference_basics"))
    order = [q.id for q in qs]
    for before, after in [("kv_bytes_llama31_8b", "max_users_h200"), ("deepseek_r1_mla_8k", "deepseek_r1_100_users"),
                          ("usd_per_million_tokens", "what_lowers_cost"), ("tpot_from_interactivity", "sweep_tpot_slo"),
                          ("joules_per_token", "joules_to_picojoules")]:
        assert order.index(before) < order.index(after)
        assert before in next(q for q in qs if q.id == after).depends_on
    one = {"type": "numeric", "prompt": "p", "unit": "ms",
           "answer_from": {"func": "tpot_ms_from_tok_s_user", "args": {"tok_s_user": 60}}}
    path = tmp_path / "order.yaml"
    path.write_text(yaml.safe_dump({"questions": [{"id": "b", "depends_on": ["a"], **one}, {"id": "a", **one}]}),
                    encoding="utf-8")
    with pytest.raises(ValueError, match=r"b \(Q1\) builds on a \(Q2\): a must come earlier"):
        bank.load_bank(path)
    path.write_text(yaml.safe_dump({"questions": [{"id": "b", "depends_on": ["zz"], **one}]}), encoding="utf-8")
    with pytest.raises(ValueError, match="unknown question 'zz'"):
        bank.load_bank(path)


# ------------------------------------------------------------------ widget
def test_choices_are_labelled_with_their_text():
    w = widget.show_quiz("01_inference_basics")
    i = next(i for i, q in enumerate(w.questions) if q.kind == "single")
    q = w.questions[i]
    assert w.inputs[i].options == tuple((f"{chr(65 + j)}. {c.text}", j) for j, c in enumerate(q.choices))
    m = next(i for i, q in enumerate(w.questions) if q.kind == "multiple")
    assert [box.description for box in w.inputs[m].children] == [
        f"{chr(65 + j)}. {c.text}" for j, c in enumerate(w.questions[m].choices)]
    assert "quiz-choices" in w.inputs[i]._dom_classes and "quiz-choices" in w.inputs[m]._dom_classes
    assert "white-space: normal" in widget.QUIZ_CSS           # long Japanese labels wrap


def test_feedback_colours_each_choice():
    w = widget.show_quiz("01_inference_basics")
    i = next(i for i, q in enumerate(w.questions) if q.id == "prefill_bottleneck")
    q = w.questions[i]
    right = next(j for j, c in enumerate(q.choices) if c.correct)
    wrong = (right + 1) % len(q.choices)
    assert w.submit(i, wrong)[0] is False
    items = re.findall(r"<li style='color:([^']+)'>(.*?)</li>", w.feedback[i].value)
    assert len(items) == len(q.choices)
    for j, (color, body) in enumerate(items):
        expected = widget.GREEN if j == right else (widget.RED if j == wrong else widget.GREY)
        assert color == expected, (j, color)
        assert ("あなたの選択" in body) == (j == wrong)
        assert body.startswith("○" if j == right else "×")


def test_widget_displays_with_the_static_questions_and_stable_dom_hooks():
    from course.quiz.static import NOTE
    from course.tooling.notebooks import WIDGET_MIME
    w = widget.show_quiz("01_inference_basics")
    bundle = w._repr_mimebundle_()
    assert bundle["text/plain"].startswith(NOTE) and WIDGET_MIME in bundle and "Q1." in bundle["text/html"]
    assert not hasattr(w, "_ipython_display_")
    assert all("quiz-feedback" in f._dom_classes for f in w.feedback)
    assert "quiz-score" in w.score_label._dom_classes
    assert [b.description for b in w.buttons] == ["回答を見る" if q.kind == "open" else "回答する" for q in w.questions]


# ----------------------------------------------------------------- content
def test_chapter_1_bank_follows_the_corrected_lesson_and_terms():
    qs = _by_id()
    text = (bank.QUIZ_DIR / "01_inference_basics.yaml").read_text(encoding="utf-8")
    for old in ("クエリヘッド", "百万", "同時ユーザー数", "同時数", "掃引", "延び", "減らすしかない", "total スループット"):
        assert old not in text, old
    decode = next(c for c in qs["decode_memory_bound"].choices if c.correct).explanation
    assert "MoE" in decode and "活性なエキスパート" in decode
    assert "リッジポイント" in next(c for c in qs["prefill_bottleneck"].choices if c.correct).explanation
    for qid in ("usd_per_million_tokens", "joules_per_token", "inferencex_output_tok_s"):
        assert "入力＋出力" in qs[qid].prompt and "合計" in qs[qid].prompt, qid
    assert qs["inferencex_output_tok_s"].answer == calc.output_tok_s_from_total(518.82, 1024, 1024)
    cost = next(c for c in qs["what_lowers_cost"].choices if "tok/s/user" in c.text).explanation
    assert "第7章" in cost and "第8章" in cost
    tp8 = next(c for c in qs["mla_tp8_placement"].choices if c.correct).explanation
    assert "DP Attention" in tp8 and "複製" in tp8


@pytest.fixture(autouse=True)
def _progress_file(tmp_path, monkeypatch):
    """A graded answer records the quiz score (course.exercises.progress): keep it out of work/."""
    monkeypatch.setenv("COURSE_PROGRESS_FILE", str(tmp_path / "progress.json"))


def test_chapter4_exact_byte_answer_accepts_only_the_integer():
    q = {q.id: q for q in bank.load_bank("04_kv_cache_memory")}["kv_70b_fp8"]   # 163,840 B, asked as an integer
    assert check.check_answer(q, "163,840")[0] and check.check_answer(q, "160 KiB")[0]
    assert check.check_answer(q, "164000")[0] is False and check.check_answer(q, "163839")[0] is False
