# The two commands of the README. Both do all their set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP_RUN  := $(VENV)/.installed-run
STAMP_DEV  := $(VENV)/.installed-dev

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(STAMP_RUN)

# Until the controller lands, the front door is a real placement question:
# where are eight H100s cheapest on spot right now, per GPU-hour and per
# effective TFLOPS-hour?
run: $(STAMP_RUN)
	$(BIN)/spothop offers --gpu H100 --count 8 --spot --limit 15
	$(BIN)/spothop offers --min-gpu-memory 40 --spot --sort tflops --limit 10
	$(BIN)/spothop cloud world

test: $(STAMP_DEV)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q

bench: $(STAMP_DEV)
	@# -P: the script folder must not shadow the standard library (bench/queue.py vs queue).
	@for f in bench/*.py; do echo "== $$f"; $(BIN)/python -P $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
