"""Build and load the C++ (OpenMP) extension, and choose the backend (cpp or torch).

The extension is built for this CPU (``-march=native``) into ``<build_dir>/native-<cpu key>``, the key a hash
of the CPU model and its feature flags, so a build directory shared by different machines never loads code
for another CPU; when that build fails it is built without the flag into ``<build_dir>/portable``.
``$SARLAB_KERNEL_ARCH_FLAGS`` replaces ``-march=native`` (empty: the portable build only).

Processes building at once take turns on an ``flock`` of ``build.flock`` in the build directory (released by the
kernel when a process dies). Torch's own marker of a build in progress (a file ``lock`` that its loader waits on
forever) is then stale whenever it exists: a process killed while compiling left it; it is removed, with a warning,
instead of hanging every later process.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import sys
import threading
import time
import warnings
from pathlib import Path
from types import ModuleType

from .cache import cache_path

EXTENSION_NAME = "sarlab_kernels"
CSRC_DIR = Path(__file__).resolve().parent / "csrc"
SOURCES = ("bindings.cpp", "gat.cpp", "csr.cpp", "spmm.cpp", "alloc.cpp")
NATIVE_FLAGS = "-march=native"
BACKENDS = ("cpp", "torch")

_lock = threading.Lock()
_ext: ModuleType | None = None
_ext_error: BaseException | None = None
_loaded_from: Path | None = None
_warned = False


def build_dir() -> Path:
    """Directory holding the compiled extension.

    ``$SARLAB_KERNEL_BUILD_DIR`` when set, else ``kernels/`` in the cache directory (:mod:`.cache`).
    """
    env = os.environ.get("SARLAB_KERNEL_BUILD_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return cache_path("kernels")


def cpu_key() -> str:
    """A short hash of this CPU's model and feature flags (``/proc/cpuinfo``; elsewhere the platform's names)."""
    text = f"{platform.machine()} {platform.processor()}"
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f if line.startswith(("model name", "flags", "Features", "CPU part"))]
        text += "".join(dict.fromkeys(lines))  # the first core's lines (every core repeats them)
    except OSError:
        pass
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _arch_flags() -> list[str]:
    return os.environ.get("SARLAB_KERNEL_ARCH_FLAGS", NATIVE_FLAGS).split()


def variant_dir(arch_flags: list[str]) -> Path:
    """Where the extension built with ``arch_flags`` lives: ``native-<cpu key>`` (or ``arch-<hash>`` for other
    flags) under :func:`build_dir`, ``portable`` without flags."""
    if not arch_flags:
        return build_dir() / "portable"
    if arch_flags == [NATIVE_FLAGS]:
        return build_dir() / f"native-{cpu_key()}"
    flags_key = hashlib.sha256(" ".join(arch_flags).encode()).hexdigest()[:8]
    return build_dir() / f"arch-{flags_key}-{cpu_key()}"


def _is_built(directory: Path) -> bool:
    """Whether ``directory`` holds an extension at least as new as every source file."""
    built = directory / f"{EXTENSION_NAME}.so"
    if not built.exists():
        return False
    newest = max((CSRC_DIR / name).stat().st_mtime for name in (*SOURCES, "kernels.h"))
    return built.stat().st_mtime >= newest


@contextlib.contextmanager
def declared_ninja():
    """Put the ``ninja`` of the declared dependency (the PyPI package) first on ``PATH`` while building.

    torch runs whichever ``ninja`` ``PATH`` finds first; two ninja versions (e.g. the system's 1.11 and the
    package's 1.13) hash commands differently in ``.ninja_log``, so processes that alternate between them rebuild
    the same directory over and over ("command line changed")."""
    try:
        import ninja

        bin_dir = ninja.BIN_DIR
    except (ImportError, AttributeError):
        yield
        return
    before = os.environ.get("PATH", "")
    os.environ["PATH"] = bin_dir + os.pathsep + before
    try:
        yield
    finally:
        os.environ["PATH"] = before


@contextlib.contextmanager
def _build_turn(directory: Path):
    """Hold this directory's build ``flock``; remove torch's ``lock`` marker a dead builder left behind."""
    with open(directory / "build.flock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        stale = directory / "lock"
        if stale.exists():
            warnings.warn(f"sarlab kernels: removing {stale}, left by a build that did not finish", stacklevel=3)
            stale.unlink(missing_ok=True)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _load(arch_flags: list[str], verbose: bool) -> ModuleType:
    global _loaded_from
    from torch.utils.cpp_extension import load

    directory = variant_dir(arch_flags)
    directory.mkdir(parents=True, exist_ok=True)
    with _build_turn(directory), declared_ninja():
        started = None if _is_built(directory) else time.monotonic()
        if started is not None:  # long first-time work says what it is doing
            print(f"sarlab kernels: compiling the C++ extension into {directory} (first use; a minute or more)",
                  file=sys.stderr, flush=True)
        module = load(
            name=EXTENSION_NAME,
            sources=[str(CSRC_DIR / name) for name in SOURCES],
            extra_cflags=["-O3", "-fopenmp", *arch_flags] + os.environ.get("SARLAB_KERNEL_EXTRA_CFLAGS", "").split(),
            extra_ldflags=["-fopenmp"],
            extra_include_paths=[str(CSRC_DIR)],
            build_directory=str(directory),
            verbose=verbose,
        )
        if started is not None:
            print(f"sarlab kernels: built in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    _loaded_from = directory
    return module


def _compile(verbose: bool) -> ModuleType:
    """The extension for this CPU; the portable build when the CPU-specific one fails to compile."""
    arch = _arch_flags()
    if arch:
        try:
            return _load(arch, verbose)
        except Exception as exc:  # a compiler without -march=native, ...: the portable build must still work
            if verbose:
                print(f"sarlab kernels: build with {' '.join(arch)} failed ({exc}); building without it")
    return _load([], verbose)


def build(verbose: bool = False) -> None:
    """JIT-compile the extension (ninja, -O3, OpenMP, for this CPU) under :func:`build_dir` and load it.

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


def loaded_from() -> Path | None:
    """The directory the loaded extension was built in (None before it is loaded)."""
    return _loaded_from


def extension_error() -> BaseException | None:
    """Why the extension could not be built or loaded (None if it loaded or was never tried)."""
    return _ext_error


def cpp_extension(backend: str | None = None) -> ModuleType | None:
    """The loaded extension when ``backend`` resolves to cpp (see :func:`resolve`), else None (run the torch code).

    Args:
        backend: 'cpp', 'torch', 'auto' or None.
    """
    if resolve(backend) != "cpp":
        return None
    assert _ext is not None  # resolve() gives cpp only once the extension is loaded
    return _ext


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
