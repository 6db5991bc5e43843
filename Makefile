# 2つのコマンドで始める:  make lab (講座を開く) / make test (全テスト)
# どちらも、必要なら .venv を作って requirements.txt の固定バージョンを入れる。
# make update: 新しい章を git pull で取得する / make reset-copy NB=labs/...ipynb: 1冊を元の版に戻す
# 教室で: make wheelhouse (講師の PC で wheel を集める) / make lab WHEELHOUSE=フォルダ (ネットワークなしで入れる)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: lab test setup update reset-copy clean gpu-check wheelhouse

# 教室のオフラインインストール (docs/instructor_guide.md の「準備」、course/tooling/wheelhouse.py)。
# make wheelhouse: requirements.txt の固定バージョンの wheel (Linux は CPU 版の torch) と pip・setuptools を
# プラットフォームと Python ごとに WHEELHOUSE (既定 wheelhouse/) の下の <プラットフォーム>-py<版> に集める。
# WHEELHOUSE_PLATFORMS=here でこの PC の分だけ。make lab WHEELHOUSE=フォルダ: そこから --no-index で入れる
WHEELHOUSE_PLATFORMS ?= linux-x86_64 macos-arm64 windows-x86_64
WHEELHOUSE_PYTHONS ?= 3.11
PIP_FROM = $(if $(WHEELHOUSE),--no-index --find-links "$$($(PYTHON) -m course.tooling.wheelhouse where "$(WHEELHOUSE)")")

wheelhouse:
	$(PYTHON) -m course.tooling.wheelhouse --out "$(or $(WHEELHOUSE),wheelhouse)" \
		--platforms $(WHEELHOUSE_PLATFORMS) --pythons $(WHEELHOUSE_PYTHONS)

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10 以上が必要です (今は %s)" % sys.version.split()[0]'
	$(if $(WHEELHOUSE),$(PYTHON) -m course.tooling.wheelhouse where "$(WHEELHOUSE)")
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(PIP_FROM) -r requirements.txt
	$(BIN)/python -m pip install $(PIP_FROM) --no-deps -e .
	touch $(STAMP)

# 受講者はノートブックの作業用コピー (work/、git の対象外) で作業する。まだコピーのないノートブックだけを
# コピーし (既存のコピーは上書きしない)、リポジトリ全体をルートにしてコースガイドのコピーを開く。
# 元のノートブックを実行・保存しないので、git pull が「ローカルの変更」で止まらない (course/tooling/workspace.py)。
# root (Docker や一部のクラウド環境) では JupyterLab が --allow-root を求める
ALLOW_ROOT := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root,)
# JupyterLab の既定の設定 (course/jupyterlab_settings/overrides.json): メニューを日本語 (jupyterlab-language-pack-ja-JP) に、
# Jupyter のニュースを取りに行かない。受講者が「設定」→「言語」で変えた値はユーザー設定として残り、こちらより優先される
LAB_SETTINGS := $(CURDIR)/course/jupyterlab_settings

lab: $(STAMP)
	$(BIN)/python -m course.tooling.workspace sync
	$(BIN)/python -m jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir=. \
		--LabApp.default_url=/lab/tree/work/lessons/00_course_guide.ipynb \
		--LabApp.app_settings_dir=$(LAB_SETTINGS)

# 元のノートブックの変更を work/ に保存して戻し、git pull --ff-only、新しい章を work/ にコピーする。
# requirements.txt が変わっていれば、続く $(MAKE) setup が入れ直す。
update: $(STAMP)
	$(BIN)/python -m course.tooling.workspace update
	$(MAKE) setup

# 1冊の作業用コピーを元の版で置き換える (古いコピーは work/backups/ へ)。例: make reset-copy NB=labs/01_prefill_decode_lab.ipynb
reset-copy: $(STAMP)
	$(BIN)/python -m course.tooling.workspace reset $(NB)

# テスト専用の依存 (Triton のインタープリター用。受講者の make lab では入れない)
$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(BIN)/python -m pip install -r requirements-test.txt
	touch $(TEST_STAMP)

# COURSE_QUICK=1: ラボの掃引を小さくする (CI でも手元でも同じコマンド)
test: $(TEST_STAMP)
	COURSE_QUICK=1 $(BIN)/python -m pytest tests
	COURSE_QUICK=1 $(BIN)/python -m pytest --nbval lessons quizzes exercises
	COURSE_QUICK=1 $(BIN)/python -m pytest --nbval-lax labs

# GPU のあるマシンで 1 回だけ実行する確認 (venv 不要: そのマシンの python3 と torch を使う)。結果は OUT (既定 results/gpu_check) に
# gpu_check.json と gpu_check.md として書かれる。GPU のないマシンでは --tiny 版が tests/bench/test_gpu_check.py で動く
gpu-check:
	PYTHONPATH=. $(PYTHON) benchmarks/gpu_check.py --out $(if $(OUT),$(OUT),results/gpu_check)

clean:
	rm -rf $(VENV)
