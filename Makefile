# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates the local virtual environment it needs (.venv) on first use.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-8)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[test,docs,d3rlpy,minari,examples,ray]"
	# d3rlpy 2.8.1 pins gymnasium==1.0.0: install it alone and check gymnasium did not move
	G=$$($(PY) -c "import gymnasium; print(gymnasium.__version__)"); \
	$(PY) -m pip install -q --no-deps d3rlpy==2.8.1 && \
	test "$$G" = "$$($(PY) -c 'import gymnasium; print(gymnasium.__version__)')" || \
	  { echo "installing d3rlpy changed gymnasium's version"; exit 1; }
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
	# model-based peers (W5): their pins would move gymnasium / omegaconf, so no deps; then their imports
	$(PY) -m pip install -q --no-deps mbrl==0.2.0 pytorchrl==3.2.15 gym==0.26.2 gym-notices==0.1.0
	$(PY) -m pip install -q omegaconf termcolor pyyaml attrs
	$(PY) benchmarks/run.py
