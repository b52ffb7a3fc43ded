# sarlab: `make run` runs the demo, `make test` the whole suite (docs build included); both create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sarlab-installed
# The exact versions of this project's machines (the package itself declares ranges: torch>=2.11, ...).
# torch first and pinned to the local CPU wheel: an unpinned torch pulls GBs of CUDA packages.
PINS := torch==2.13.0 torch_geometric==2.8.1 pymetis==2025.2.2
# oneCCL for `--backend ccl` (sarlab.kernels.ccl builds its torch.distributed backend over it). --no-deps: the
# oneccl-cpu wheel declares a libfabric wheel that the registry does not have; the system's libfabric1 serves.
CCL_PINS := oneccl-cpu==2022.2.0 oneccl-cpu-devel==2022.2.0 intel-cmplr-lib-rt==2026.2.0
LINT := sarlab real kernels simulator tests docs
DOCS_OUT ?= .cache/docs

.PHONY: run test test-all test-ccl setup kernels ccl lint docs wheel bench-engine bench-kernels bench-backends clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(PINS)
	# setuptools prints an "Editable installation" notice for every editable install of a mapped layout
	# (sarlab.kernels = kernels/, ...): the checkout is meant to be one, so the notice is silenced
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet -e '.[test]' $(PINS)
	$(MAKE) --no-print-directory ccl-libs
	touch $(STAMP)

# oneCCL's wheels and libfabric (apt, as root); a failure here only makes the ccl tests skip, saying why
.PHONY: ccl-libs
ccl-libs:
	-$(PY) -m pip install --quiet --no-deps $(CCL_PINS)
	-@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! dpkg -s libfabric1 >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfabric1; fi

# build the ccl backend now (it is otherwise built on first use)
ccl: $(STAMP)
	$(PY) -c "import sarlab.kernels.ccl as c; ok, why = c.available(); print(why if not ok else 'ccl: ok'); c.load() if ok else None"

kernels: $(STAMP)
	$(PY) -m sarlab.kernels.build

run: $(STAMP)
	$(VENV)/bin/sarlab demo

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT)

# the documentation site, warnings as errors (output under the ignored .cache/; docs/build.py builds from a
# temporary copy of docs/, so autosummary's generated pages never land in the checkout). `make test` builds it
# too, through tests/test_docs.py.
docs: $(STAMP)
	$(PY) docs/build.py $(DOCS_OUT)

# two pytest workers: one at a time keeps the 2 cores only ~60 % busy (tests wait on timeouts, shaped links,
# rendezvous). A file's tests stay on one worker, in order; the files that touch machine-wide state (network
# namespaces, signals to launchers, killed launchers' leftovers) share one worker (tests/conftest.py).
# TEST_WORKERS=0 runs one test at a time.
TEST_WORKERS ?= 2
test: kernels lint
	$(PY) -m pytest -q -ra --durations=25 -n $(TEST_WORKERS) --dist loadfile

# every test, the slow ones too (about 10 more minutes on 2 cores)
test-all: kernels lint
	$(PY) -m pytest -q -ra -m ''

wheel: $(STAMP)
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation -w .cache/dist .

# every ccl test, the slow ones too (verify at N = 2, 4; the fault and launcher tests' ccl cases)
test-ccl: $(STAMP)
	$(PY) -m pytest -q -m '' tests/test_ccl_backend.py tests/test_ccl_training.py
	$(PY) -m pytest -q -m '' -k ccl tests/test_faults_cli.py tests/test_network.py tests/test_launcher_signals.py \
	  tests/test_safety_faults.py

# gloo vs ccl side by side: collectives, ring rounds, GCN/SAGE/GAT epochs, on loopback and 1 Gbit/s veth hosts
# (root for the veth part; ~25 min; into a fresh folder of the cache, not results/)
bench-backends: $(STAMP)
	$(PY) -m benchmarks.backend_bench --out .cache/bench/backends-$$(date +%Y%m%d-%H%M%S)

bench-engine: $(STAMP)
	$(VENV)/bin/sarlab bench engine

bench-kernels: kernels
	$(VENV)/bin/sarlab bench kernels

# removes only what the Makefile and the tools make inside the checkout
clean:
	rm -rf .cache .pytest_cache .ruff_cache build *.egg-info
