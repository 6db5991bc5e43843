"""Self-check quizzes: YAML question banks (``bank``), answer checking (``check``), numbers read from the
learner's text (``numbers``), figure questions (``figures``) and a JupyterLab widget (``widget``).

A bank is one YAML file per lesson, ``quizzes/NN_topic.yaml`` (its notebook: ``NN_topic_quiz.ipynb``)::

    title: ...            # shown above the quiz
    intro: ...            # optional
    questions:
      - id: q1            # unique in the bank
        type: single      # single | multiple | numeric | open
        prompt: ...
        choices:          # single / multiple: every choice explains itself
          - {text: ..., correct: true, explanation: ...}
      - id: q2
        type: numeric
        prompt: ...
        answer_from: {func: tpot_ms_from_tok_s_user, args: {tok_s_user: 60}}
        unit: ms          # a unit of course.quiz.numbers.UNITS; B/KB/MB/GB/TB: the calculator's bytes are converted
        tolerance: {rel: 0.01}   # or {abs: 0.1}; default rel 1%
        depends_on: [q1]  # optional: questions this one builds on; they must come earlier
        explanation: ...
      - id: q3
        type: open
        prompt: ...
        model_answer: ...

An argument in ``args`` may itself be ``{func, args}`` (a nested calculator call). Numeric answers are
never typed into the YAML: ``answer_from`` names a function of ``minimal_engine.calculators`` and the
loader computes the answer, so quizzes and lessons share one source of numbers.

Figure questions (``course.quiz.figures``): a ``figure: {kind: sweep|timeline, caption, slo, data}`` block
holds a small example data set; the widget draws it, and ``answer_from`` names a figure function
(``max_concurrency_meeting_slo``, ``requests_over_slo``) called on the same data. In a single or
multiple question with a figure, each choice has a ``value`` (a concurrency, a request number): the
loader marks the choices correct from the computed answer (a ``correct:`` written in the YAML must
agree) and adds what the data says about each value to its explanation.

Checking. ``check_answer(question, response) -> (correct, feedback)`` where ``correct`` is

- ``True`` / ``False``: graded;
- ``None``: **not graded**. A numeric response that cannot be read as a number ("たくさん", empty) or
  that carries a unit the question cannot use ("16.7 GB" for a question in ms) is not a wrong answer:
  ``feedback`` says what was not understood and what is expected, and :func:`score` ignores it.

Numeric responses are read by ``course.quiz.numbers.parse_numeric``: full-width digits ("１６．７"),
thousands separators ("131,072"), Japanese unit words (ミリ秒, 秒, バイト, ギガバイト, トークン, 人, ドル)
and conversion between compatible units (s <-> ms, B/KB/MB/GB/TB/KiB ..., J <-> pJ per token)::

    from course.quiz.bank import bank_path, load_bank
    from course.quiz.check import check_answer, score
    questions = load_bank(bank_path("01_inference_basics"))
    correct, feedback = check_answer(questions[0], 1)
    n_correct, n_graded = score(questions, {"q1": True})

``QuizWidget`` and ``show_quiz(name)`` (``course.quiz.widget``) only wire ipywidgets (no JupyterLab
extension) to these functions; its ``submit(i, response)`` and ``reveal(i)`` are what the buttons (「回答する」,
open questions 「回答を見る」) call. Stable DOM classes for browser tests: ``quiz-feedback`` (each feedback), ``quiz-score`` (the score),
``quiz-choices`` (the choice lists).
"""

