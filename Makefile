# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates the local virtual environment it needs (.venv) on first use.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-8)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[test,docs,ray]"
	touch $(STAMP)

.PHONY: demo test docs bench
demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest -q
	$(PY) -m mypy torchrl_ext
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/run.py
