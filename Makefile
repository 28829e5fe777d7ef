# make fleet  - set up and run the whole fleet (needs SYNEDRE_MAILBOXES_FILE, see README)
# make test   - set up and run the test suite against real services
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: system venv fleet test bench clean

system:
	scripts/system-deps

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

fleet: system venv
	$(VENV)/bin/synedre fleet

test: system venv
	$(VENV)/bin/pytest -q

bench: system venv
	cd bench && ../$(VENV)/bin/python ingest_latency.py && ../$(VENV)/bin/python ingest_backlog.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
