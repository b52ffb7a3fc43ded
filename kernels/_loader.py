"""Build and load the C++ (OpenMP) extension, and choose the backend (cpp or torch).

The extension is built for this CPU (``-march=native``) into ``<build_dir>/native-<cpu key>``, the key a hash
of the CPU model and its feature flags, so a build directory shared by different machines never loads code
for another CPU; when that build fails it is built without the flag into ``<build_dir>/portable``.
``$SARLAB_KERNEL_ARCH_FLAGS`` replaces ``-march=native`` (empty: the portable build only).

**A first run never waits for the compiler.** With ``$SARLAB_KERNEL_BUILD`` unset or ``background`` (the default),
a process that finds no build starts one in a detached background process (``python -m sarlab.kernels.build
--background``, its own session, so it outlives the run; its log in ``build.log`` of the build directory; one at a
time: it holds ``background.flock``, and a process that finds that lock taken starts none) and runs on the torch
kernels, which compute the same results; the next process that starts after the build finished loads it.
``foreground`` compiles in the process that needs the kernels (what ``sarlab build-kernels``, :func:`build` and an
explicit ``backend='cpp'`` do); ``off`` never compiles (torch until someone runs ``sarlab build-kernels``). A
background build that failed leaves ``build.failed`` and is not retried until the sources change or someone builds
in the foreground. Compiling logs its progress (objects done, seconds elapsed) at INFO every ~10 s.

Processes building at once take turns on an ``flock`` of ``build.flock`` in the build directory (released by the
kernel when a process dies). Torch's own marker of a build in progress (a file ``lock`` that its loader waits on
forever) is then stale whenever it exists: a process killed while compiling left it; it is removed, with a warning,
instead of hanging every later process.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import platform
import subprocess
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
BUILD_MODES = ("background", "foreground", "off")
BUILD_ENV = "SARLAB_KERNEL_BUILD"
BUILD_AHEAD = "sarlab build-kernels (or python -m sarlab.kernels.build)"
TICK_S = 10.0

log = logging.getLogger(__name__)


class BuildPending(RuntimeError):
    """The extension is not built yet and this process does not wait for it (it runs the torch kernels)."""

_lock = threading.Lock()
_ext: ModuleType | None = None
_ext_error: BaseException | None = None
_loaded_from: Path | None = None
_warned = False
_announced = False


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
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("sarlab kernels: another process is building in %s (its log: %s); waiting for it", directory,
                     directory.parent / "build.log")
            fcntl.flock(handle, fcntl.LOCK_EX)
        stale = directory / "lock"
        if stale.exists():
            warnings.warn(f"sarlab kernels: removing {stale}, left by a build that did not finish", stacklevel=3)
            stale.unlink(missing_ok=True)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _objects_done(directory: Path) -> int:
    """How many of the extension's translation units have an object file newer than their source."""
    done = 0
    for name in SOURCES:
        obj = directory / (Path(name).stem + ".o")
        if obj.exists() and obj.stat().st_mtime >= (CSRC_DIR / name).stat().st_mtime:
            done += 1
    return done


@contextlib.contextmanager
def _ticking(directory: Path):
    """Log, every :data:`TICK_S` seconds while the block runs, the seconds elapsed and the objects compiled."""
    started, stop = time.monotonic(), threading.Event()

    def tick() -> None:
        while not stop.wait(TICK_S):
            log.info("sarlab kernels: compiling, %.0f s elapsed, %d of %d translation units done",
                     time.monotonic() - started, _objects_done(directory), len(SOURCES))

    ticker = threading.Thread(target=tick, name="sarlab-kernels-build-ticker", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()


def _load(arch_flags: list[str], verbose: bool) -> ModuleType:
    global _loaded_from
    from torch.utils.cpp_extension import load

    directory = variant_dir(arch_flags)
    directory.mkdir(parents=True, exist_ok=True)
    with _build_turn(directory), declared_ninja():
        compiling = not _is_built(directory)
        if compiling:  # long first-time work says what it is doing
            log.info("sarlab kernels: compiling the C++ extension (%d translation units, %s) into %s; progress every "
                     "%.0f s", len(SOURCES), " ".join(["-O3", *arch_flags]), directory, TICK_S)
        started = time.monotonic()
        extra = os.environ.get("SARLAB_KERNEL_EXTRA_CFLAGS", "").split()
        with _ticking(directory) if compiling else contextlib.nullcontext():
            module = load(
                name=EXTENSION_NAME,
                sources=[str(CSRC_DIR / name) for name in SOURCES],
                extra_cflags=["-O3", "-fopenmp", *arch_flags, *extra],
                extra_ldflags=["-fopenmp"],
                extra_include_paths=[str(CSRC_DIR)],
                build_directory=str(directory),
                verbose=verbose,
            )
        if compiling:
            log.info("sarlab kernels: built in %.0f s", time.monotonic() - started)
        (directory.parent / "build.failed").unlink(missing_ok=True)
    _loaded_from = directory
    return module


def _compile(verbose: bool) -> ModuleType:
    """The extension for this CPU; the portable build when the CPU-specific one fails to compile."""
    arch = _arch_flags()
    if arch:
        try:
            return _load(arch, verbose)
        except Exception as exc:  # a compiler without -march=native, ...: the portable build must still work
            log.warning("sarlab kernels: build with %s failed (%s); building without it", " ".join(arch),
                        str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc))
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


def build_mode() -> str:
    """``$SARLAB_KERNEL_BUILD``: background (default), foreground or off (see the module's docstring)."""
    mode = os.environ.get(BUILD_ENV, "background").strip().lower() or "background"
    if mode not in BUILD_MODES:
        raise ValueError(f"{BUILD_ENV}={mode!r}: use one of {', '.join(BUILD_MODES)}")
    return mode


def _built_variant() -> list[str] | None:
    """The arch flags of a finished build for this CPU (the CPU-specific one first), None when there is none."""
    arch = _arch_flags()
    for flags in ([arch] if arch else []) + [[]]:
        if _is_built(variant_dir(flags)):
            return flags
    return None


def _failed_marker() -> Path:
    return build_dir() / "build.failed"


def _failed_before() -> bool:
    """Whether a background build failed on the current sources (``build.failed`` newer than every source)."""
    marker = _failed_marker()
    if not marker.exists():
        return False
    newest = max((CSRC_DIR / name).stat().st_mtime for name in (*SOURCES, "kernels.h"))
    return marker.stat().st_mtime >= newest


def start_background_build() -> int | None:
    """Start ``python -m sarlab.kernels.build --background`` detached (own session, output to ``build.log``);
    its pid, or None when a background build already runs (it holds ``background.flock``, passed to the child)."""
    root = build_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "background.flock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        with open(root / "build.log", "w") as out:  # the child keeps the lock until it exits
            child = subprocess.Popen([sys.executable, "-m", f"{__package__}.build", "--background"],
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, pass_fds=(lock.fileno(),))
    return child.pid


def _obtain(wait: bool) -> ModuleType:
    """The extension: a finished build loaded, else compiled here (``wait`` or :func:`build_mode` foreground), else
    BuildPending (a background build started, or one already running)."""
    flags = _built_variant()
    if flags is not None:
        return _load(flags, verbose=False)
    mode = build_mode()
    if wait or mode == "foreground":
        return _compile(verbose=False)
    where = build_dir()
    if mode == "off":
        raise BuildPending(f"not built, and {BUILD_ENV}=off; build them with {BUILD_AHEAD}")
    if _failed_before():
        raise RuntimeError(f"the background build failed (see {where / 'build.log'}); run {BUILD_AHEAD} -v "
                           "to see why")
    pid = start_background_build()
    started = f"started building them in the background (pid {pid})" if pid is not None else \
        "another process is building them in the background"
    raise BuildPending(f"not built yet: {started}, log {where / 'build.log'}; this process runs the torch kernels "
                       f"(same results, slower) and the next run loads the compiled ones; to build ahead: "
                       f"{BUILD_AHEAD}")


def extension(wait: bool = False) -> ModuleType | None:
    """The loaded extension; None when it cannot be built or loaded, or is still being built (see the module's
    docstring).

    Args:
        wait: compile in this process if no build is finished (an explicit ``backend='cpp'``).
    """
    global _ext, _ext_error
    with _lock:
        if _ext is None and (_ext_error is None or (wait and isinstance(_ext_error, BuildPending))):
            try:
                _ext = _obtain(wait)
                _ext_error = None
            except BuildPending as pending:
                _ext_error = pending
            except Exception as exc:  # compiler missing, headers missing, ...: fall back to torch
                _ext_error = exc
        return _ext


def preload() -> bool:
    """Load a finished build into this process now, if there is one: never builds, never announces (a process that
    forks workers, :mod:`sarlab.real.launch.zygote`, loads it once for all of them). False when none is built for
    this machine or it does not load; the state is then as before (the first :func:`resolve` decides)."""
    global _ext
    with _lock:
        if _ext is None and _ext_error is None:
            flags = _built_variant()
            if flags is None:
                return False
            try:
                _ext = _load(flags, verbose=False)
            except Exception:  # noqa: BLE001 - the first resolve() tries again and says why
                return False
        return _ext is not None


def loaded_from() -> Path | None:
    """The directory the loaded extension was built in (None before it is loaded)."""
    return _loaded_from


def extension_error() -> BaseException | None:
    """Why the extension could not be built or loaded (None if it loaded or was never tried); a
    :class:`BuildPending` while it is being built in the background."""
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


def _announce(used: str) -> None:
    """Say once per process which kernels it runs (INFO)."""
    global _announced
    if _announced:
        return
    _announced = True
    if used == "cpp":
        log.info("sarlab kernels: C++ (OpenMP) extension from %s", _loaded_from)
    elif isinstance(_ext_error, BuildPending):
        log.info("sarlab kernels: torch; the C++ kernels are %s", _ext_error)
    else:
        log.info("sarlab kernels: torch")


def resolve(backend: str | None = None) -> str:
    """Backend to use: the argument, else ``$SARLAB_KERNELS`` (cpp|torch|auto, default auto).

    auto means cpp when the extension is built (or builds in this process: ``$SARLAB_KERNEL_BUILD``) and loads,
    else torch: silently while a background build runs, with a one-line warning when the build failed;
    an explicit cpp builds in this process if needed and raises if the extension is unavailable.

    Args:
        backend: 'cpp', 'torch', 'auto' or None.
    """
    global _warned
    choice = (backend if backend is not None else os.environ.get("SARLAB_KERNELS", "auto")).strip().lower()
    if choice not in (*BACKENDS, "auto"):
        raise ValueError(f"unknown kernel backend {choice!r}; use one of cpp, torch, auto (SARLAB_KERNELS)")
    if choice == "torch":
        _announce("torch")
        return "torch"
    build_mode()  # a misspelt $SARLAB_KERNEL_BUILD is an error, not a reason to fall back
    ext = extension(wait=choice == "cpp")
    if ext is not None:
        _announce("cpp")
        return "cpp"
    if choice == "cpp":
        raise RuntimeError(
            f"the C++ kernel extension could not be built ({_ext_error!r}); install a C++ compiler "
            "or use SARLAB_KERNELS=torch"
        )
    _announce("torch")
    if not _warned and not isinstance(_ext_error, BuildPending):
        _warned = True
        first_line = str(_ext_error).strip().splitlines()[0] if str(_ext_error).strip() else repr(_ext_error)
        warnings.warn(f"sarlab kernels: C++ extension unavailable ({first_line}); using torch", stacklevel=3)
    return "torch"
