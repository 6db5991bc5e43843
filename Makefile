# 2つのコマンドで始める:  make lab (講座を開く) / make test (全テスト)
# どちらも、必要なら .venv を作って requirements.txt の固定バージョンを入れる。
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: lab test setup clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10 以上が必要です (今は %s)" % sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -r requirements.txt
	$(BIN)/python -m pip install --no-deps -e .
	touch $(STAMP)

# リポジトリ全体をルートにして (lessons・labs・quizzes を行き来できる) コースガイドを開く。
# root (Docker や一部のクラウド環境) では JupyterLab が --allow-root を求める
ALLOW_ROOT := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root,)

lab: $(STAMP)
	$(BIN)/python -m jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir=. \
		--LabApp.default_url=/lab/tree/lessons/00_course_guide.ipynb

# COURSE_QUICK=1: ラボの掃引を小さくする (CI でも手元でも同じコマンド)
test: $(STAMP)
	COURSE_QUICK=1 $(BIN)/python -m pytest tests
	COURSE_QUICK=1 $(BIN)/python -m pytest --nbval lessons quizzes
	COURSE_QUICK=1 $(BIN)/python -m pytest --nbval-lax labs

clean:
	rm -rf $(VENV)
