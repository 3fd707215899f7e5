# The README's two commands: `make demo` (the main job on the embedded stack) and `make test`.
# Everything they need is installed here, idempotently: a venv with rowbus and its extras; the
# Debian packages and services come from `rowbus local up` (called by demo and by the tests).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
EXTRAS ?= test,local,tansu,spark

.PHONY: setup lint unit test demo up down status clean proto sanitize fuzz

$(STAMP): pyproject.toml setup.py producer/_rows.c producer/snapshot/_resultset.c \
	spark_apply/_literals.c native/rowbus_buffer.h
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[$(EXTRAS)]'
	@rm -f $(VENV)/.installed-*
	@touch $@

setup: $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest tests/unit -q

# Two pytest-xdist workers, each on its own stack (tests/conftest.py): one ran the suite with
# ~1.15 of the 2 cores busy (the rest waiting on services, JVM starts, Kafka). A file's tests
# stay on one worker, so its module fixtures are made once.
TEST_WORKERS ?= 2
test: lint
	$(BIN)/pytest -q -ra --durations=15 -n $(TEST_WORKERS) --dist loadfile

# The native extensions under ASan+UBSan (.fuzz/build): their unit suites, then a long fuzz
# run of each (benchmarks/fuzz/__init__.py). `make test` runs a short fuzz run (tests/fuzz).
sanitize: setup
	$(BIN)/python -m benchmarks.fuzz unit

FUZZ_SECONDS ?= 180
fuzz: setup
	$(BIN)/python -m benchmarks.fuzz run --seconds $(FUZZ_SECONDS)

demo: setup
	$(BIN)/rowbus demo

up: setup
	$(BIN)/rowbus local up

down: setup
	$(BIN)/rowbus local down

status: setup
	$(BIN)/rowbus local status

proto: setup
	$(BIN)/python -m rowbus.protocol.regenerate

clean: down
	rm -rf .rowbus .rowbus-test*
