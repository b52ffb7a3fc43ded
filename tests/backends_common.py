"""The backends a multi-process test runs under: gloo everywhere, ccl where oneCCL is installed (skipped with the
reason :func:`sarlab.kernels.ccl.available` gives elsewhere), and building ccl once before any timed run."""
from __future__ import annotations

import pytest

from sarlab.kernels import ccl

CCL_OK, CCL_WHY = ccl.available()
needs_ccl = pytest.mark.skipif(not CCL_OK, reason=f"ccl backend unavailable: {CCL_WHY}")
#: every backend the fault tests run under (ccl skipped, with the reason, where oneCCL is missing)
BACKENDS = ["gloo", pytest.param("ccl", marks=needs_ccl)]
#: the same, with the ccl case kept out of the default run (`make test` covers a killed, a hung and a cut worker,
#: and torchrun, under ccl; the rest run with -m slow)
BACKENDS_CCL_SLOW = ["gloo", pytest.param("ccl", marks=[needs_ccl, pytest.mark.slow])]


def require_ccl():
    """The ccl module, built and loaded here (once, cached) so that ranks started later do not build it at once;
    skips the calling test with the reason when oneCCL is not installed."""
    if not CCL_OK:
        pytest.skip(f"ccl backend unavailable: {CCL_WHY}")
    ccl.load()
    return ccl


def built(backend: str) -> str:
    """``backend``, built here first (ccl's extension: :func:`require_ccl`), so that no timed run includes the
    build."""
    if backend == "ccl":
        require_ccl()
    return backend
