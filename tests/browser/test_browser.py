"""The course in a real browser: JupyterLab started as `make lab` starts it, driven in Chromium by Playwright.

For each lab and quiz notebook (in a fresh copy of the learner's work/ folder), the test opens it, checks
what a learner sees before running (the Japanese placeholder, never a raw widget repr), runs all cells from
the Run menu, waits for the kernel to report idle with every code cell numbered, checks that the panels
render as live widgets, then uses them: in a lab it sets the prompt-length slider and presses 「実行」 until
the readout and the run history change; in a quiz it answers the first question and reads the feedback
and the score. In one exercise it types the model solution into the stub cell, runs it and reads 合格 in the
grading table; that exercise and two quizzes then show in the guide's progress table. The guide's page must
draw Japanese glyphs, not boxes (a font check). The instructor's dashboard notebook, run against our server
under steady requests, must update by itself. Any browser console error or uncaught page error fails.

Completion is read from the page (kernel status and cell prompts), never from timings; the timeouts below
only stop a hung run. Needs the system's Chromium (Debian: `apt-get install chromium`) and the `playwright`
package; `playwright install` is never called. Without them the test is skipped (and fails when CI=true).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from course.tooling import workspace

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TOKEN = "browser-test"
RUN_TIMEOUT_MS = 600_000        # a safety stop for a hung kernel, not a speed requirement
ACTION_TIMEOUT_MS = 120_000
LABS = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("labs/*.ipynb"))
QUIZZES = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("quizzes/*.ipynb"))
RAW_REPRS = ("HBox(children", "VBox(children", "IntSlider(value", "Button(description")
PLACEHOLDER = "このセルを実行すると"
SCREENSHOTS = os.environ.get("BROWSER_SCREENSHOTS")   # a folder: save what the learner saw (for review)


def screenshot(page, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)


def _require_browser():
    """Skip (or, under CI=true, fail) when Chromium or Playwright is missing."""
    if CHROMIUM is None:
        message = "Chromium が見つからないためブラウザテストをスキップしました / skipped: no chromium"
    else:
        try:
            import playwright.sync_api  # noqa: F401
            return
        except ImportError:
            message = ("playwright が見つからないためブラウザテストをスキップしました / skipped: no playwright "
                       "(pip install -r requirements.txt)")
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI ではブラウザテストを省略できません / the browser test must run in CI: {message}")
    pytest.skip(message)


# ------------------------------------------------------------------ JupyterLab, as `make lab` starts it
def make_lab_args() -> list[str]:
    """The arguments of `make lab`'s `jupyter lab` command (read from `make -n lab`)."""
    dry = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    line = next(l for l in dry.stdout.replace("\\\n", " ").splitlines() if "-m jupyter lab" in l)
    return line.split(" -m jupyter ", 1)[1].split()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _fresh_settings(folder: Path) -> None:
    # Never ask about (or fetch) Jupyter news: the question is a toast over the notebook, and fetching it
    # needs the network. Everything else keeps JupyterLab's defaults, as a learner has them.
    target = folder / "@jupyterlab" / "apputils-extension"
    target.mkdir(parents=True)
    (target / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}', encoding="utf-8")


def _wait_until_accepting(port: int, proc, log: list, timeout_s: float = 60.0) -> None:
    """Wait until the server accepts a TCP connection on its port; fail with its log if it exits or never does."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"JupyterLab exited (code {proc.returncode}):\n" + "".join(log[-30:])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"JupyterLab logged that it runs but port {port} refused connections for "
                         f"{timeout_s:.0f} s:\n" + "".join(log[-30:]))


@pytest.fixture
def lab_url(tmp_path):
    """A JupyterLab on a free loopback port, serving a fresh copy of the learner's folders (work/), with
    its own settings, workspaces, config, data and runtime folders; stopped (with its kernels) afterwards."""
    _require_browser()
    course = tmp_path / "course"
    workspace.sync(ROOT, course / "work")                  # what `make lab` does first, into a temp folder
    dirs = {name: tmp_path / name for name in ("settings", "workspaces", "config", "data", "runtime")}
    for d in dirs.values():
        d.mkdir()
    _fresh_settings(dirs["settings"])
    port = _free_port()
    cmd = [sys.executable, "-m", "jupyter", *make_lab_args(), "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={TOKEN}",
           f"--LabApp.user_settings_dir={dirs['settings']}", f"--LabApp.workspaces_dir={dirs['workspaces']}"]
    env = {**os.environ, "COURSE_QUICK": "1", "JUPYTER_PLATFORM_DIRS": "1",
           "COURSE_PROGRESS_FILE": str(tmp_path / "progress.json"),
           "JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_DATA_DIR": str(dirs["data"]),
           "JUPYTER_RUNTIME_DIR": str(dirs["runtime"])}
    proc = subprocess.Popen(cmd, cwd=course, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    ready, log = threading.Event(), []

    def drain():                                            # read the log (and keep the pipe from filling)
        for line in proc.stderr:
            log.append(line)
            if "is running at" in line:
                ready.set()
        ready.set()                                         # the server exited

    threading.Thread(target=drain, daemon=True).start()
    try:
        ready.wait(120)
        assert proc.poll() is None and any("is running at" in l for l in log), "JupyterLab did not start:\n" + \
            "".join(log[-30:])
        _wait_until_accepting(port, proc, log)     # CI once saw ERR_CONNECTION_REFUSED right after the log line
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)                 # the server shuts its kernels down
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ------------------------------------------------------------------ the browser
@pytest.fixture(scope="module")
def browser():
    _require_browser()
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        # /dev/shm is tiny in many CI containers; Chromium then crashes tabs unless it uses /tmp instead
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=["--disable-dev-shm-usage"])
        yield chromium
        chromium.close()


# Console errors that are not the course's: none so far. Add an entry only with the reason it is harmless.
HARMLESS_CONSOLE_ERRORS: tuple[re.Pattern, ...] = ()


@pytest.fixture
def page(browser, lab_url):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="ja-JP")
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    pg = context.new_page()
    errors = []
    pg.on("console", lambda msg: errors.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None)
    pg.on("pageerror", lambda err: errors.append(f"pageerror: {err}"))
    pg.lab_url = lab_url
    yield pg
    context.close()
    real = [e for e in errors if not any(p.search(e) for p in HARMLESS_CONSOLE_ERRORS)]
    assert not real, "browser console errors:\n" + "\n".join(real)


RENDERED_JS = """([cells, withOutputs]) => {
  const all = [...document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')];
  const shown = all.filter(c => [...c.querySelectorAll('.jp-OutputArea-output')].some(o => o.childElementCount));
  return all.length === cells && shown.length === withOutputs;
}"""


COUNTS_JS = """() => {
  const all = [...document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')];
  const shown = all.filter(c => [...c.querySelectorAll('.jp-OutputArea-output')].some(o => o.childElementCount));
  return {panels: document.querySelectorAll('.jp-NotebookPanel').length, cells: all.length, shown: shown.length};
}"""


def wait_rendered(page, rel: str) -> None:
    """Wait until JupyterLab has rendered every cell of work/<rel> and every saved output (it renders a
    notebook a few cells at a time)."""
    import json
    nb = json.loads((ROOT / rel).read_text(encoding="utf-8"))
    with_outputs = sum(1 for c in nb["cells"] if c.get("outputs"))
    try:
        page.wait_for_function(RENDERED_JS, arg=[len(nb["cells"]), with_outputs])
    except Exception:
        screenshot(page, f"not_rendered_{Path(rel).stem}")
        raise AssertionError(f"{rel}: not every cell and saved output rendered (want {len(nb['cells'])} "
                             f"cells, {with_outputs} with outputs): {page.evaluate(COUNTS_JS)}")


def open_notebook(page, rel: str, workspace_name: str):
    """Open work/<rel> in a fresh JupyterLab workspace; return its panel once every cell is rendered."""
    page.goto(f"{page.lab_url}/lab/workspaces/{workspace_name}/tree/work/{rel}?token={TOKEN}")
    wait_rendered(page, rel)
    return page.locator(".jp-NotebookPanel")


def outputs_text(panel) -> str:
    return "\n".join(panel.locator(".jp-OutputArea").evaluate_all("els => els.map(e => e.textContent)"))


# Menus by their English or Japanese title (the language pack may be on), items by their command id:
# the clicks work whichever language JupyterLab shows.
MENUS = {"edit": "Edit|編集", "run": "Run|実行"}


def click_menu(page, menu: str, command: str):
    """Open the menu bar's `menu` ("edit", "run") and click the item that runs JupyterLab's `command`
    (after answering a dialog that would block the click)."""
    answer_dialog(page)
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^({MENUS[menu]})$")).click()
    page.locator(f".lm-Menu-item[data-command='{command}']").click()


PROMPTS_JS = "() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(e => e.textContent.trim())"
DONE_JS = """() => {
  const idle = document.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']");
  const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(e => e.textContent);
  return idle !== null && !prompts.some(p => p.includes('*')) && prompts.some(p => /\\d/.test(p));
}"""


KERNEL_IDLE_JS = "() => document.querySelector(\".jp-Notebook-ExecutionIndicator[data-status='idle']\") !== null"
STARTED_JS = f"() => ({PROMPTS_JS})().some(p => p.includes('*') || /\\d/.test(p))"


def wait_kernel_idle(page) -> None:
    """Wait until the notebook's kernel is connected and idle. JupyterLab drops a Run All given before
    that: with no kernel connected yet it clears each cell's execution and runs nothing, leaving every
    prompt `[ ]:` (seen on a busy machine with the shortest notebook, which renders before its kernel)."""
    page.wait_for_function(KERNEL_IDLE_JS, timeout=RUN_TIMEOUT_MS, polling=200)


def answer_dialog(page) -> None:
    """A dialog JupyterLab put up (on a busy machine: the kernel chooser, or a kernel that did not start in
    time) blocks every click. Print its text and take its default answer, as a learner would (for the
    kernel chooser: the notebook's own kernel)."""
    dialog = page.locator(".jp-Dialog")
    if dialog.count():
        print("JupyterLab showed a dialog:", " ".join(dialog.first.inner_text().split()))
        dialog.first.locator(".jp-Dialog-button.jp-mod-accept").first.click()
        dialog.first.wait_for(state="detached")


RUN_ALL_TRIES = 6              # a dropped Run All is clicked again, at most this many times in all
RUN_ALL_STARTED_MS = 20_000     # an accepted Run All marks its first cell `[*]` at once, before it runs


def run_all(page, panel) -> None:
    """Wait for the kernel, clear all outputs (so no saved execution count remains), Run All Cells, and
    wait until the kernel is idle with no cell queued; then every code cell must carry an execution count
    (Run All stops at an error, leaving the later cells without one).

    On a busy machine the execution indicator can read idle while the notebook has no kernel attached yet;
    JupyterLab's CodeCell.execute then clears each cell and runs nothing (every prompt stays `[ ]:`; seen in
    CI with a load average near 40). Such a Run All ran no cell, so clicking it again runs nothing twice:
    the test clicks again, as a learner does, and says so in its output."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    wait_kernel_idle(page)
    click_menu(page, "edit", "editmenu:clear-all")
    page.wait_for_function(f"() => ({PROMPTS_JS})().every(p => !/\\d/.test(p))")
    for attempt in range(1, RUN_ALL_TRIES + 1):
        click_menu(page, "run", "runmenu:run-all")
        try:
            page.wait_for_function(STARTED_JS, timeout=RUN_ALL_STARTED_MS, polling=200)
            break
        except PlaywrightTimeout:
            print(f"Run All ran no cell (try {attempt}): {page.evaluate(PROMPTS_JS)}; clicking again")
            answer_dialog(page)
            wait_kernel_idle(page)
    else:
        raise AssertionError(f"Run All ran no cell in {RUN_ALL_TRIES} tries, each given "
                             f"{RUN_ALL_STARTED_MS // 1000} s: {page.evaluate(PROMPTS_JS)}")
    page.wait_for_function(DONE_JS, timeout=RUN_TIMEOUT_MS, polling=500)
    prompts = page.evaluate(PROMPTS_JS)
    assert all(re.fullmatch(r"\[\d+\]:", p) for p in prompts), f"not every cell ran: {prompts}\n" + \
        outputs_text(panel)[-3000:]


def button(panel, text: str):
    """A widget button by its text (its accessible name also holds the icon font's glyph)."""
    return panel.locator("button.widget-button", has_text=re.compile(rf"^\s*{text}\s*$")).first


def check_unrun(panel) -> None:
    text = outputs_text(panel)
    assert PLACEHOLDER in text, "an unrun notebook shows the Japanese placeholder where its panel will be"
    assert not any(r in text for r in RAW_REPRS), "no raw widget repr before running"


def check_widgets(panel) -> None:
    assert panel.locator(".jupyter-widgets").count() > 0 and panel.locator(".widget-button").count() > 0
    text = outputs_text(panel)
    assert not any(r in text for r in RAW_REPRS), "widgets render as widgets, not as their repr"
    assert PLACEHOLDER not in text, "the placeholder (text/plain) shows only where no widget can render"


# Draw characters on a canvas in the font the notebook's text uses and compare their pixels: without a
# Japanese font every kanji is the same missing-glyph box (or nothing), so distinct characters draw alike.
GLYPHS_JS = """(chars) => {
  const el = document.querySelector('.jp-RenderedMarkdown') || document.body;
  const font = '32px ' + getComputedStyle(el).fontFamily;
  return chars.map(ch => {
    const c = document.createElement('canvas'); c.width = 48; c.height = 48;
    const ctx = c.getContext('2d'); ctx.font = font; ctx.fillStyle = '#000'; ctx.fillText(ch, 4, 36);
    return Array.from(ctx.getImageData(0, 0, 48, 48).data.filter((_, i) => i % 4 === 3)).join(',');
  });
}"""


def check_japanese_glyphs(page) -> None:
    """The browser has a font for Japanese: 推, 論, あ and ア each draw as themselves (not one shared box), and
    none draws like a private-use code point, which no font has."""
    chars = ["推", "論", "あ", "ア", "\ue000"]
    drawn = page.evaluate(GLYPHS_JS, chars)
    assert all(set(d.split(",")) != {"0"} for d in drawn[:4]), "a Japanese character drew nothing"
    assert len(set(drawn)) == len(drawn), (
        "Japanese characters draw as the same missing-glyph box: install a Japanese font "
        "(Debian/Ubuntu: apt-get install fonts-noto-cjk)")


def test_unrun_guide_shows_placeholder(page):
    """The guide that `make lab` opens (its default URL), read before running anything."""
    page.goto(f"{page.lab_url}/?token={TOKEN}")
    assert page.url.split("?")[0].endswith("/lab/tree/work/lessons/00_course_guide.ipynb")
    wait_rendered(page, "lessons/00_course_guide.ipynb")
    check_unrun(page.locator(".jp-NotebookPanel"))
    check_japanese_glyphs(page)
    screenshot(page, "guide_unrun")


@pytest.mark.parametrize("rel", LABS)
def test_lab_in_browser(page, rel):
    panel = open_notebook(page, rel, "lab")
    check_unrun(panel)
    run_all(page, panel)
    check_widgets(panel)

    slider = panel.locator(".widget-slider", has=page.locator(".widget-label", has_text="プロンプト長")).first
    handle = slider.locator(".noUi-handle").first
    low, high, now = (int(float(handle.get_attribute(a))) for a in ("aria-valuemin", "aria-valuemax",
                                                                      "aria-valuenow"))
    new = next(v for v in (low + (high - low) // 4, low + (high - low) // 2, low) if v != now)
    field = slider.locator(".widget-readout")
    field.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(str(new))
    page.keyboard.press("Enter")
    page.wait_for_function("([el, v]) => el.getAttribute('aria-valuenow') == v", arg=[handle.element_handle(), new])

    readout, history = panel.locator(".lab-readout").first, panel.locator(".lab-history")
    readout.wait_for(state="attached")
    before, rows = readout.text_content(), history.locator("tr").count()
    button(panel, "実行").click()
    page.wait_for_function(
        "([r, before, rows]) => r.textContent !== before && r.textContent.trim() !== ''"
        " && document.querySelectorAll('.lab-history tr').length > rows",
        arg=[readout.element_handle(), before, rows], timeout=RUN_TIMEOUT_MS, polling=500)
    cells = [c.strip() for c in history.locator("tr").last.locator("td, th").all_text_contents()]
    assert str(new) in cells, f"the new run's row shows prompt length {new}: {cells}"
    screenshot(page, Path(rel).stem)


def answer_first_question(page, panel) -> str:
    """Answer the quiz's first question as a learner does (pick or type, press 「回答する」); wait for the
    feedback and the new score; return the score line (得点: x / y ...)."""
    answer = button(panel, "回答する")
    question = answer.locator("xpath=..")                   # the question's box: prompt, input, button, feedback
    if question.locator("input[type=radio]").count():
        question.locator("input[type=radio]").first.check()
    elif question.locator("input[type=checkbox]").count():
        question.locator("input[type=checkbox]").first.check()
    else:
        question.locator("input[type=text], input[type=number]").first.fill("1")
    feedback, score = question.locator(".quiz-feedback").first, panel.locator(".quiz-score").first
    before = score.text_content()
    assert not feedback.text_content().strip()
    answer.click()
    page.wait_for_function("([f, s, before]) => f.textContent.trim() !== '' && s.textContent !== before",
                           arg=[feedback.element_handle(), score.element_handle(), before])
    assert re.search("正解|不正解", feedback.text_content())
    return score.text_content()


@pytest.mark.parametrize("rel", QUIZZES)
def test_quiz_in_browser(page, rel):
    panel = open_notebook(page, rel, "quiz")
    check_unrun(panel)
    run_all(page, panel)
    check_widgets(panel)
    answer_first_question(page, panel)
    screenshot(page, Path(rel).stem)


EXERCISE = "exercises/04_kv_cache_memory_exercise.ipynb"


def solve_exercise(page) -> None:
    """A learner opens an exercise, sees the saved 未実装 report, types the model solution into the stub cell,
    runs every cell, and the grading table says 合格 (the grader also ran the engine's prefix cache on it)."""
    panel = open_notebook(page, EXERCISE, "exercise")
    assert "未実装" in outputs_text(panel)
    stub = panel.locator(".jp-CodeCell", has_text="raise NotImplementedError").first
    editor = stub.locator(".cm-content").first
    editor.click()
    page.keyboard.press("Control+A")
    solution = (ROOT / "exercises/solutions/ex04_block_hashes.py").read_text(encoding="utf-8")
    page.keyboard.insert_text(solution)                  # as pasted: no auto-indent, no auto-closed brackets
    assert "NotImplementedError" not in editor.text_content()
    run_all(page, panel)
    report = panel.locator(".exercise-report").first
    report.wait_for(state="attached")
    assert report.get_attribute("data-passed") == "true", outputs_text(panel)[-2000:]
    assert "合格" in report.text_content() and "エンジンのプレフィックスキャッシュ" in report.text_content()
    screenshot(page, "exercise_04")


PROGRESS_ROWS_JS = """() => Object.fromEntries([...document.querySelectorAll('.jp-OutputArea table tbody tr')]
  .map(tr => [tr.querySelector('th')?.textContent.trim(), [...tr.querySelectorAll('td')].map(td => td.textContent.trim())]))"""


def test_progress_through_the_ui(page):
    """What a learner does reaches the guide's progress table: a chapter quiz and the review quiz answered in
    their notebooks, an exercise passed in its notebook; then the guide, run as a learner runs it, shows
    each score and the pass in its chapter's row (the path a unit test calling record_quiz never took)."""
    scores = {}
    for rel, row in (("quizzes/05_batching_quiz.ipynb", "第5章"), ("quizzes/11_review_quiz.ipynb", "総復習")):
        panel = open_notebook(page, rel, f"progress-{Path(rel).stem}")
        run_all(page, panel)
        got = re.search(r"(\d+)\s*/\s*(\d+)", answer_first_question(page, panel))
        scores[row] = f"{got.group(1)}/{got.group(2)}"
    solve_exercise(page)

    panel = open_notebook(page, "lessons/00_course_guide.ipynb", "progress-guide")
    run_all(page, panel)
    table = page.evaluate(PROGRESS_ROWS_JS)              # {章: [クイズの得点, 合格した演習]}
    for row, score in scores.items():
        assert table.get(row, [None])[0] == score, f"{row}: quiz score {score} in the table? {table}"
    assert table.get("第4章", [None, None])[1] == "1/1", f"第4章: exercise passed in the table? {table}"
    assert table.get("第3章", [None])[0] == "—", f"an untouched chapter stays empty: {table}"
    screenshot(page, "guide_progress")


DASHBOARD = "instructor/dashboard.ipynb"
READOUT_JS = """() => {
  const r = document.querySelector('.dashboard-readout');
  return r ? {scrapes: +r.dataset.scrapes, tokens: r.dataset.outputTokens} : null;
}"""


@pytest.fixture
def dashboard_server(monkeypatch):
    """Our server in this process with requests coming in all the time (a class at work); its URL
    goes to the dashboard notebook through COURSE_DASHBOARD_URL, which JupyterLab's kernel inherits
    (this fixture is set up before lab_url starts JupyterLab)."""
    import httpx

    from minimal_engine import LLM
    from minimal_engine.serve.app import ServerThread, build_app
    app = build_app(LLM(device="cpu", max_num_seqs=4), served_model_name="minimal-ja")
    stop = threading.Event()

    def traffic(url):
        while not stop.is_set():
            httpx.post(url + "/v1/completions", json={"prompt": "吾輩は", "max_tokens": 4},
                       timeout=120)

    with ServerThread(app) as s:
        monkeypatch.setenv("COURSE_DASHBOARD_URL", s.url)
        sender = threading.Thread(target=traffic, args=(s.url,), daemon=True)
        sender.start()
        yield s.url
        stop.set()
        sender.join(timeout=120)


def test_dashboard_in_browser(dashboard_server, page, tmp_path):
    """The instructor opens instructor/dashboard.ipynb in JupyterLab and runs it: the readout and
    the picture render, and the readout updates by itself (more scrapes, more output tokens) while the
    class's requests come in."""
    target = tmp_path / "course" / "work" / DASHBOARD
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / DASHBOARD, target)
    panel = open_notebook(page, DASHBOARD, "dashboard")
    try:
        run_all(page, panel)
    except AssertionError as exc:       # a one-cell notebook may show before its kernel takes Run All
        screenshot(page, "instructor_dashboard_not_run")
        if "ran no cell" not in str(exc):
            raise
        run_all(page, panel)
    try:
        page.wait_for_function(
            f"() => {{ const r = ({READOUT_JS})(); return r && r.scrapes >= 2; }}",
            timeout=ACTION_TIMEOUT_MS, polling=250)
        first = page.evaluate(READOUT_JS)
        page.wait_for_function(
            f"""(first) => {{ const r = ({READOUT_JS})();
                 return r.scrapes > first.scrapes && r.tokens !== first.tokens; }}""",
            arg=first, timeout=ACTION_TIMEOUT_MS, polling=250)
    except Exception as exc:
        screenshot(page, "instructor_dashboard_no_update")
        raise AssertionError(f"the dashboard did not update: {page.evaluate(READOUT_JS)}\n"
                             + outputs_text(panel)[-2000:]) from exc
    second = page.evaluate(READOUT_JS)
    assert int(second["tokens"]) > int(first["tokens"]), (first, second)
    assert panel.locator(".jupyter-widgets img").count() >= 1, "the dashboard's picture renders"
    assert "実行中" in outputs_text(panel)
    screenshot(page, "instructor_dashboard")


def test_ci_installs_chromium_and_never_skips():
    """CI installs Debian's Chromium and a Japanese font before `make test`, sets CI=true (so the tests above
    run there) and keeps their screenshots."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("apt-get install -y chromium fonts-noto-cjk") < ci.index("export CI=true") < \
        ci.index("\nmake test")
    assert "export BROWSER_SCREENSHOTS=" in ci, "CI keeps the screenshots of what the learner saw"
    assert "playwright install" not in ci
    assert re.search(r"^playwright==", (ROOT / "requirements.txt").read_text(), re.M)
