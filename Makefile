# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates the local virtual environment it needs (.venv) on first use, with
# the exact versions of constraints.txt; pyproject.toml declares the ranges.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | md5sum | cut -c1-8)
# The other end of the supported range (older torchrl / tensordict, same torch).
COMPAT_VENV := .venv-compat
COMPAT_PY := $(COMPAT_VENV)/bin/python
COMPAT_STAMP := $(COMPAT_VENV)/.installed-$(shell cat pyproject.toml constraints-compat.txt | md5sum | cut -c1-8)
# the suite minus the collector tests (they use torchrl 0.14's post_collect_hook)
COMPAT_TESTS := tests/storages/test_storage_contract.py tests/samplers/test_sampler_contract.py tests/core/test_schema_access.py \
	tests/integration/test_checkpoint.py tests/transforms/test_nstep.py tests/facades tests/envs/test_gym_adapter.py
DOCS := $(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt -e ".[test,docs,d3rlpy,minari,examples,ray,compress]"
	# d3rlpy 2.8.1 pins gymnasium==1.0.0: install it alone and check gymnasium did not move
	G=$$($(PY) -c "import gymnasium; print(gymnasium.__version__)"); \
	$(PY) -m pip install -q --no-deps d3rlpy==2.8.1 && \
	test "$$G" = "$$($(PY) -c 'import gymnasium; print(gymnasium.__version__)')" || \
	  { echo "installing d3rlpy changed gymnasium's version"; exit 1; }
	touch $(STAMP)

$(COMPAT_STAMP): pyproject.toml constraints-compat.txt
	test -x $(COMPAT_PY) || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_PY) -m pip install -q -c constraints-compat.txt torch
	$(COMPAT_PY) -m pip install -q -c constraints-compat.txt -e ".[test,compress]"
	touch $(COMPAT_STAMP)

.PHONY: demo test compat docs bench
demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP) compat
	$(PY) -m pytest -q
	$(PY) -m mypy torchrl_ext
	$(DOCS)

# A subset of the suite under the oldest supported torchrl / tensordict.
compat: $(COMPAT_STAMP)
	$(COMPAT_PY) -m pytest -q $(COMPAT_TESTS)

docs: $(STAMP)
	$(DOCS)

bench: $(STAMP)
	$(PY) -m pip install -q -c constraints.txt -e ".[bench]"
	# model-based peers (W6): their pins would move gymnasium / omegaconf, so no deps; then their imports
	$(PY) -m pip install -q --no-deps mbrl==0.2.0 pytorchrl==3.2.15 gym==0.26.2 gym-notices==0.1.0
	$(PY) -m pip install -q omegaconf termcolor pyyaml attrs
	# d3rlpy 1.0 (W5's peer): built once, on PYTHONPATH for its own process only (beside d3rlpy 2)
	bash benchmarks/build_d3rlpy1.sh build/peers/d3rlpy1 $(PY)
	D3RLPY1_PATH=$(CURDIR)/build/peers/d3rlpy1 $(PY) benchmarks/run.py
