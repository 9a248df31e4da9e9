# One command per task. `make test` and `make run` set everything up on a fresh machine first.
PYTHON ?= python3
VENV ?= .venv
CODE := indexer streaming maintenance seglog pyspark_seglog.py
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: help setup test test-fast run lint bench clean

help:
	@echo "make setup      create $(VENV) and install seglog with Spark and test extras"
	@echo "make test       run the whole test suite with coverage; fails below the floor (what CI runs)"
	@echo "make test-fast  skip the Spark, slow and stress tests"
	@echo "make run        run the streaming main job on the embedded default source"
	@echo "make bench      run the quick benchmarks"
	@echo "make lint       ruff check, ruff format --check, mypy --strict (what CI runs)"

# editable_mode=compat: a plain sys.path entry, so Spark's pkgutil scan finds the top-level module
# pyspark_seglog (setuptools' default editable finder hides top-level modules from pkgutil.iter_modules).
$(STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "Java 17 is needed for Spark: apt-get install -y openjdk-17-jre-headless"; exit 1; }
	@command -v kcat >/dev/null || { apt-get update -q && apt-get install -y -q kcat; } || { echo "kcat is needed by the serve tests: apt-get install -y kcat"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[spark,test]" --config-settings editable_mode=compat
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

setup: $(STAMP)

# The coverage floor is fail_under in pyproject.toml's [tool.coverage.report]. TEST_WORKERS pytest-xdist
# processes share the tests (worksteal: an idle worker takes queued tests from the other); most of the
# suite's time is spent waiting on JVMs, servers and subprocesses, so 2 workers fit 2 cores.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal --cov --cov-report=term $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not spark and not slow and not stress" $(PYTEST_ARGS)

run: $(STAMP)
	$(BIN)/seglog run $(RUN_ARGS)

bench: $(STAMP)
	$(BIN)/seglog bench engine --quick

lint: $(STAMP)
	$(BIN)/ruff check $(CODE) tests
	$(BIN)/ruff format --check $(CODE) tests
	$(BIN)/mypy --strict $(CODE)

clean:
	rm -rf $(VENV) data build *.egg-info .pytest_cache .hypothesis
