# sarlab: `make run` runs the demo, `make test` the whole suite; both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sarlab-installed

.PHONY: run test test-all setup kernels lint bench-engine bench-kernels clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: the local CPU wheel (an unpinned torch pulls GBs of CUDA packages)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

kernels: $(STAMP)
	$(PY) -m sarlab.kernels.build

run: $(STAMP)
	$(VENV)/bin/sarlab demo

test: kernels
	$(VENV)/bin/ruff check sarlab real kernels simulator tests
	$(PY) -m pytest -q -ra

# every test, the slow ones too (about 10 more minutes on 2 cores)
test-all: kernels
	$(VENV)/bin/ruff check sarlab real kernels simulator tests
	$(PY) -m pytest -q -ra -m ''

lint: $(STAMP)
	$(VENV)/bin/ruff check sarlab real kernels simulator tests

bench-engine: $(STAMP)
	$(VENV)/bin/sarlab bench engine

bench-kernels: kernels
	$(VENV)/bin/sarlab bench kernels

clean:
	rm -rf .build .cache .pytest_cache
