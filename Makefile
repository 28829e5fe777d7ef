# make try    - try it on this machine: a local mailbox, a mail sink, an example client and the fleet (README)
# make fleet  - set up and run the whole fleet (needs SYNEDRE_MAILBOXES_FILE, see README)
# make test   - set up and run the test suite against real services
# make unit   - only the unit tests: no services, seconds
# make lint   - ruff, mypy and the import layers (lint-imports, contracts in pyproject.toml)
# make mutation - mutation testing of the safety-critical code (slow; report in docs/mutation.md)
# make lock   - re-resolve requirements.lock from pyproject.toml (after changing a dependency)
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
LOCKVENV := build/lockvenv
# The lock is resolved for the machines the fleet and CI run on.
LOCK_TARGET := --python-version 3.11 --python-platform x86_64-unknown-linux-gnu

.PHONY: system venv try fleet test unit lint lock bench mutation clean

system:
	scripts/system-deps

# Every install comes from the lock, so a developer, CI and production get the same versions;
# the package itself goes in without dependencies, which the lock already provided.
$(STAMP): requirements.lock pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements.lock
	$(VENV)/bin/pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

try: system venv
	$(VENV)/bin/synedre try run

fleet: system venv
	$(VENV)/bin/synedre fleet

# Four pytest-xdist workers on the two cores (most tests wait on their services; with the
# suite's CPU cut, a fresh clone's .ci/run took 532 s with four against 607 s with three),
# a test file each at a time, the longest files first (tests/conftest.py): each worker has its
# own PostgreSQL and Redis database (tests/services/stack.per_worker, four workers at most);
# TEST_WORKERS=0 runs serially. The fifteen slowest tests are listed at the end.
TEST_WORKERS ?= 4
test: system venv
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15

unit: venv
	$(VENV)/bin/pytest -q -m unit

# All run even when one fails, so one pass shows every finding; the target fails if any does.
lint: venv
	$(VENV)/bin/ruff check .; ruff=$$?; $(VENV)/bin/mypy synedre; mypy=$$?; \
	$(VENV)/bin/lint-imports --no-cache && exit $$((ruff || mypy))

# Not on every CI run: it takes the better part of an hour (docs/mutation.md gives the last run's time).
# Its own virtualenv (MUTVENV): the main one stays without mutmut's setproctitle.
MUTVENV := build/mutvenv
$(MUTVENV)/.installed: requirements-mutation.lock pyproject.toml
	$(PY) -m venv $(MUTVENV)
	$(MUTVENV)/bin/pip install -q --upgrade pip
	$(MUTVENV)/bin/pip install -q -r requirements-mutation.lock
	$(MUTVENV)/bin/pip install -q --no-deps -e .
	touch $@

mutation: system $(MUTVENV)/.installed
	$(MUTVENV)/bin/python scripts/mutation.py

lock:
	test -x $(LOCKVENV)/bin/uv || ($(PY) -m venv $(LOCKVENV) && $(LOCKVENV)/bin/pip install -q uv)
	$(LOCKVENV)/bin/uv pip compile -q pyproject.toml --extra test --extra dev $(LOCK_TARGET) \
		--custom-compile-command 'make lock' -o requirements.lock
	$(LOCKVENV)/bin/uv pip compile -q pyproject.toml --extra test --extra dev --extra mutation $(LOCK_TARGET) \
		--custom-compile-command 'make lock' -o requirements-mutation.lock

bench: system venv
	cd bench && ../$(VENV)/bin/python ingest_latency.py && ../$(VENV)/bin/python ingest_backlog.py

clean:
	rm -rf $(VENV) $(LOCKVENV) $(MUTVENV) mutants .pytest_cache .hypothesis .mypy_cache .ruff_cache
