"""Build and load the C++ (OpenMP) extension, and choose the backend (cpp or torch)."""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path
from types import ModuleType

EXTENSION_NAME = "sarlab_kernels"
CSRC_DIR = Path(__file__).resolve().parent / "csrc"
SOURCES = ("gat.cpp",)
BACKENDS = ("cpp", "torch")

_lock = threading.Lock()
_ext: ModuleType | None = None
_ext_error: BaseException | None = None
_warned = False


def build_dir() -> Path:
    """Directory holding the compiled extension.

    ``$SARLAB_KERNEL_BUILD_DIR`` when set, else ``<repo>/.build/kernels`` (next to the package).
    """
    env = os.environ.get("SARLAB_KERNEL_BUILD_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parent.parent / ".build" / "kernels"


def _compile(verbose: bool) -> ModuleType:
    from torch.utils.cpp_extension import load

    directory = build_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return load(
        name=EXTENSION_NAME,
        sources=[str(CSRC_DIR / name) for name in SOURCES],
        extra_cflags=["-O3", "-fopenmp"] + os.environ.get("SARLAB_KERNEL_EXTRA_CFLAGS", "").split(),
        extra_ldflags=["-fopenmp"],
        build_directory=str(directory),
        verbose=verbose,
    )


def build(verbose: bool = False) -> None:
    """JIT-compile the extension (ninja, -O3, OpenMP) into :func:`build_dir` and load it.

    A second call is cheap: ninja finds nothing to do. Raises whatever the compiler raised.

    Args:
        verbose: print the compiler commands and output.
    """
    global _ext, _ext_error
    with _lock:
        _ext = _compile(verbose)
        _ext_error = None


def extension() -> ModuleType | None:
    """The loaded extension, building it on first use; None when it cannot be built or loaded."""
    global _ext, _ext_error
    with _lock:
        if _ext is None and _ext_error is None:
            try:
                _ext = _compile(verbose=False)
            except Exception as exc:  # compiler missing, headers missing, ...: fall back to torch
                _ext_error = exc
        return _ext


def extension_error() -> BaseException | None:
    """Why the extension could not be built or loaded (None if it loaded or was never tried)."""
    return _ext_error


def resolve(backend: str | None = None) -> str:
    """Backend to use: the argument, else ``$SARLAB_KERNELS`` (cpp|torch|auto, default auto).

    auto means cpp when the extension builds and loads, else torch with a one-line warning;
    an explicit cpp raises if the extension is unavailable.

    Args:
        backend: 'cpp', 'torch', 'auto' or None.
    """
    global _warned
    choice = (backend if backend is not None else os.environ.get("SARLAB_KERNELS", "auto")).strip().lower()
    if choice not in (*BACKENDS, "auto"):
        raise ValueError(f"unknown kernel backend {choice!r}; use one of cpp, torch, auto (SARLAB_KERNELS)")
    if choice == "torch":
        return "torch"
    ext = extension()
    if ext is not None:
        return "cpp"
    if choice == "cpp":
        raise RuntimeError(
            f"the C++ kernel extension could not be built ({_ext_error!r}); install a C++ compiler "
            "or use SARLAB_KERNELS=torch"
        )
    if not _warned:
        _warned = True
        first_line = str(_ext_error).strip().splitlines()[0] if str(_ext_error).strip() else repr(_ext_error)
        warnings.warn(f"sarlab kernels: C++ extension unavailable ({first_line}); using torch", stacklevel=3)
    return "torch"
