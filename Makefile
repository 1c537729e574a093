# The two commands of the README. Both do all their set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP_RUN  := $(VENV)/.installed-run
STAMP_DEV  := $(VENV)/.installed-dev

.PHONY: run test test-stress lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(STAMP_RUN)

# The main job (examples/embed, README): a real sentence-embedding model over a
# generated 20,000-passage corpus, launched on the demo world's simulated spot
# markets (four clouds, stormy, 30x clock), then its report and its proof.
# The demo keeps its own home (controller, store, local cloud) in DEMO_HOME:
# `SPOTHOP_HOME=examples/.demo-home .venv/bin/spothop status` looks around after.
STAMP_EXAMPLE := $(VENV)/.installed-example
DEMO_HOME     ?= $(CURDIR)/examples/.demo-home
DEMO_ENV      := export SPOTHOP_HOME="$(DEMO_HOME)" SPOTHOP_WORLD="$(CURDIR)/examples/worlds/demo.yaml" \
                 PATH="$(CURDIR)/$(BIN):$$PATH"

$(STAMP_EXAMPLE): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[embed]'
	touch $@ $(STAMP_RUN)

run: $(STAMP_EXAMPLE)
	@# The demo world's bucket holds the corpus and the outputs (examples/worlds/demo.yaml).
	mkdir -p examples/.buckets/demo/embed
	$(BIN)/python examples/embed/corpus.py examples/.buckets/demo/embed/passages.jsonl
	rm -rf examples/.buckets/demo/embed/out
	@# A fresh demo home each run: no earlier run's market cooldowns, clock anchor or jobs.
	-$(DEMO_ENV); $(BIN)/spothop controller stop >/dev/null 2>&1; rm -rf "$(DEMO_HOME)"
	@# The controller is stopped whatever happened; make fails if the job or its proof did.
	$(DEMO_ENV); $(BIN)/spothop launch examples/embed/job.yaml; launched=$$?; \
	  $(BIN)/python examples/embed/report.py; \
	  $(BIN)/python examples/embed/verify.py examples/embed/job.yaml --reference-shards 2; verified=$$?; \
	  $(BIN)/spothop controller stop; \
	  test $$launched -eq 0 -a $$verified -eq 0

# The suite mostly waits (simulated markets run at wall pace), so it runs two tests at a time
# (pytest-xdist); the tests marked solo run after it, one at a time, with the machine to themselves.
TEST_WORKERS ?= 2

test: $(STAMP_DEV)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not solo"
	$(BIN)/pytest -q -m solo

# The real-process end-to-end tests (marker e2e, tests/conftest.py), STRESS_RUNS times in a row
# with both cores kept busy by two spinning processes, as a loaded CI machine would be: a test
# that fails in any run is flaky. Each run is both halves of `make test` (the e2e tests two at a
# time, then the solo ones alone); it prints each run's outcome and wall time, then "N of M runs
# passed", and fails if any run did. STRESS_ARGS narrows it (test files or -k), e.g.
# STRESS_ARGS=tests/jobs/e2e/test_deadline.py; STRESS_WORKERS sets the first half's parallelism.
STRESS_RUNS ?= 20
# Where the e2e tests live (tests/conftest.py's E2E_PATHS; tests/test_stress_paths.py keeps the two
# the same): a run collects only these files, where a bare `-m e2e` imported the whole suite's
# modules in every pytest process (some 13 CPU seconds more each, three processes a run).
STRESS_PATHS := tests/e2e tests/jobs/e2e $(wildcard tests/agent/test_e2e*.py) \
                tests/examples/test_embed.py tests/examples/test_finetune.py
STRESS_ARGS ?= $(STRESS_PATHS)
STRESS_WORKERS ?= $(TEST_WORKERS)
STRESS_PYTEST = $(BIN)/pytest -q -p no:cacheprovider $(STRESS_ARGS)

test-stress: $(STAMP_DEV)
	@burners=""; for i in 1 2; do python3 -c 'while True: pass' & burners="$$burners $$!"; done; \
	trap 'kill $$burners 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	ok() { "$$@"; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]; }; \
	failed=0; \
	for run in $$(seq $(STRESS_RUNS)); do \
	  echo "== e2e under load: run $$run of $(STRESS_RUNS)"; start=$$(date +%s); \
	  if ok $(STRESS_PYTEST) -m "e2e and not solo" -n $(STRESS_WORKERS) --dist worksteal \
	    && ok $(STRESS_PYTEST) -m "e2e and solo"; then outcome=passed; \
	  else outcome=FAILED; failed=$$((failed + 1)); fi; \
	  echo "== e2e under load: run $$run of $(STRESS_RUNS) $$outcome in $$(( $$(date +%s) - start )) s"; \
	done; \
	echo "== e2e under load: $$(( $(STRESS_RUNS) - failed )) of $(STRESS_RUNS) runs passed"; \
	test $$failed -eq 0

bench: $(STAMP_DEV)
	@# -P: the script folder must not shadow the standard library (bench/queue.py vs queue).
	@for f in bench/*.py; do echo "== $$f"; $(BIN)/python -P $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
