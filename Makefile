# Two commands for a newcomer (README): `make demo` runs the offline Reinforce-Ada training, `make test` the tests.
# Both create .venv on first use: torch==2.13.0 (CPU wheel) first, then this package pinned by .ci/constraints.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test test-fast demo bench clean

$(STAMP): setup.cfg pyproject.toml .ci/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c .ci/constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -n 2 tests

test-fast: $(STAMP)
	$(PY) -m pytest -n 2 -m "not slow" tests

demo: $(STAMP)
	$(PY) -m trl_ada.demo --output_dir runs/demo

clean:
	rm -rf $(VENV) runs
