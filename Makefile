# sarlab: `make run` runs the demo, `make test` the whole suite (docs build included); both create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sarlab-installed
# The exact versions of this project's machines (the package itself declares ranges: torch>=2.11, ...).
# torch first and pinned to the local CPU wheel: an unpinned torch pulls GBs of CUDA packages.
PINS := torch==2.13.0 torch_geometric==2.8.1 pymetis==2025.2.2
LINT := sarlab real kernels simulator tests docs
DOCS_OUT ?= .cache/docs

.PHONY: run test test-all setup kernels lint docs wheel bench-engine bench-kernels clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(PINS)
	$(PY) -m pip install --quiet -e '.[test]' $(PINS)
	touch $(STAMP)

kernels: $(STAMP)
	$(PY) -m sarlab.kernels.build

run: $(STAMP)
	$(VENV)/bin/sarlab demo

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT)

# the documentation site, warnings as errors (output under the ignored .cache/)
docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -q -b html docs $(DOCS_OUT)
	@echo "docs: $(DOCS_OUT)/index.html"

test: kernels lint docs
	$(PY) -m pytest -q -ra

# every test, the slow ones too (about 10 more minutes on 2 cores)
test-all: kernels lint docs
	$(PY) -m pytest -q -ra -m ''

wheel: $(STAMP)
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation -w .cache/dist .

bench-engine: $(STAMP)
	$(VENV)/bin/sarlab bench engine

bench-kernels: kernels
	$(VENV)/bin/sarlab bench kernels

# removes only what the Makefile and the tools make inside the checkout
clean:
	rm -rf .cache .pytest_cache .ruff_cache build *.egg-info
