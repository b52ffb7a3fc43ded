"""Find oneCCL and the Intel runtime in the installed wheels, JIT-build the backend extension, load it.

Everything written goes to ``ccl/ccl-<torch version>-<hash>`` in sarlab's cache directory (:mod:`sarlab.kernels.cache`:
``$SARLAB_CACHE_DIR``, a checkout's ``.cache`` or the per-user cache): the hash covers the C++ sources and the
libraries' paths, so an upgrade or a reinstall elsewhere builds afresh. That directory holds

* ``lib/``: ``libccl.so.1`` and ``libccl.so.2``, symlinks to the wheel's ``libccl.so.1.0``. The wheel's library
  names ``libccl.so.2`` (a file it does not ship) as a dependency of itself; loaded through ``lib/`` its
  ``$ORIGIN`` run path finds the second link, which the dynamic loader recognises as the file already loaded.
* ``build/``: the extension, linked to ``lib/libccl.so.1`` and to the Intel runtime's ``libirc.so`` (libccl is
  built with the Intel compiler and needs ``__intel_cpu_feature_indicator_x`` from it), with run paths to both.

Processes building at once take turns on an ``flock`` (released by the kernel if the holder dies); torch's own
``lock`` marker left by a killed build is then stale and is removed rather than waited on forever.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import fcntl
import hashlib
import importlib.metadata as md
import logging
import os
import platform
import shutil
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

from .._loader import declared_ninja
from ..cache import cache_path

_log = logging.getLogger(__name__)

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ("ccl_backend.cpp",)

# What was tested together; the wheels' own dependency on a "libfabric" wheel cannot be met from PyPI, hence
# --no-deps (the system libfabric from apt is used instead).
PIP_ONECCL = "pip install --no-deps oneccl-cpu==2022.2.0"
PIP_DEVEL = "pip install --no-deps oneccl-cpu-devel==2022.2.0"
PIP_RUNTIME = "pip install --no-deps intel-cmplr-lib-rt==2026.2.0"
APT_FABRIC = "apt-get install -y libfabric1"

# Set (if unset) before libccl is loaded: oneCCL reads them when it initialises.
ENV_DEFAULTS = {
    "CCL_ATL_TRANSPORT": "ofi",  # the MPI transport needs an Intel MPI launcher; OFI works with any launcher
    "FI_PROVIDER": "tcp",  # libfabric's TCP provider: loopback and plain Ethernet alike
    "CCL_LOG_LEVEL": "error",  # at "warn" every process prints notes about OpenMP collectives and local ranks
    # oneCCL's worker threads busy-wait with `pause` by default; with ranks sharing cores (several ranks on one
    # host) that starves the peer's worker: 2 ranks on 2 cores took ~3 ms per 1 KiB all_reduce, ~0.1-0.3 ms with
    # sched_yield. Set CCL_YIELD=pause on hosts with a core to spare per rank.
    "CCL_YIELD": "sched_yield",
    # Debian's libfabric loads the Truescale PSM library (libinfinipath), which installs handlers for SIGSEGV,
    # SIGTERM, ... that write a backtrace file (python.*.btr) into the working directory and exit(1) from inside
    # the handler; a terminated rank then crashed or hung in teardown. This variable keeps them out.
    "IPATH_NO_BACKTRACE": "1",
}

_lock = threading.Lock()
_ext: ModuleType | None = None


def cache_root() -> Path:
    """Where the backend's builds live: ``ccl/`` in sarlab's cache directory (not created here)."""
    return cache_path("ccl")


def _wheel_file(dist: str, suffix: str) -> Path | None:
    """Absolute path of the file of installed distribution ``dist`` whose recorded path ends with ``suffix``."""
    try:
        files = md.distribution(dist).files or []
    except md.PackageNotFoundError:
        return None
    for f in files:
        if str(f).replace("\\", "/").endswith(suffix):
            path = Path(md.distribution(dist).locate_file(f)).resolve()
            if path.exists():
                return path
    return None


def _find(dist: str, suffix: str) -> Path | None:
    """A file from the wheel, else from ``<sys.prefix>/`` (a conda env or a copy of the wheel's layout)."""
    found = _wheel_file(dist, suffix)
    if found is None and (Path(sys.prefix) / suffix).exists():
        found = (Path(sys.prefix) / suffix).resolve()
    return found


def locate() -> dict[str, Path]:
    """Paths of libccl, the oneCCL headers' root, libirc; raises RuntimeError naming what is missing."""
    ok, reason = available()
    if not ok:
        raise RuntimeError(f"ccl backend unavailable: {reason}")
    return {
        "libccl": _find("oneccl-cpu", "lib/libccl.so.1.0"),
        "include": _find("oneccl-cpu-devel", "include/oneapi/ccl.hpp").parent.parent,
        "libirc": _find("intel-cmplr-lib-rt", "lib/libirc.so"),
    }


def available() -> tuple[bool, str]:
    """(True, "") when everything the backend needs is installed, else (False, one line: what is missing and
    the command that installs it). Cheap: looks at files only, builds nothing."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False, f"oneCCL wheels exist for Linux x86_64 only (this is {sys.platform} {platform.machine()})"
    if _find("oneccl-cpu", "lib/libccl.so.1.0") is None:
        return False, f"oneCCL library libccl.so.1.0 not found; install it with `{PIP_ONECCL}`"
    if _find("oneccl-cpu-devel", "include/oneapi/ccl.hpp") is None:
        return False, f"oneCCL headers (oneapi/ccl.hpp) not found; install them with `{PIP_DEVEL}`"
    if _find("intel-cmplr-lib-rt", "lib/libirc.so") is None:
        return False, f"Intel compiler runtime libirc.so (needed by libccl) not found; install it with `{PIP_RUNTIME}`"
    if ctypes.util.find_library("fabric") is None:
        return False, f"libfabric (oneCCL's OFI transport) not found; install it with `{APT_FABRIC}`"
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return False, f"C++ compiler `{cxx}` not found (needed to build the backend); `apt-get install -y g++`"
    if shutil.which("ninja") is None and shutil.which("ninja", path=str(Path(sys.executable).parent)) is None:
        return False, "ninja (torch's extension builder) not found; install it with `pip install ninja`"
    return True, ""


def _key(paths: dict[str, Path]) -> str:
    import torch

    h = hashlib.sha256()
    for name in SOURCES:
        h.update((CSRC / name).read_bytes())
    for k in sorted(paths):
        h.update(f"{k}={paths[k]}".encode())
    return f"ccl-{torch.__version__}-{h.hexdigest()[:12]}"


def _link(target: Path, link: Path) -> None:
    """Make ``link`` a symlink to ``target``, atomically (other processes may be looking at it)."""
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(target)
    os.replace(tmp, link)


@contextlib.contextmanager
def _flock(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# Set (if unset) only where this host runs more ranks than this process may use cores (LOCAL_WORLD_SIZE, set by
# sarlab's launcher and by torchrun, above the affinity mask): no oneCCL worker thread; the backend's progress thread
# drives oneCCL's progress itself when it tests an op's event. oneCCL's worker polls (CCL_YIELD) whenever any op of
# its rank is pending, idle or not (CCL_WORKER_WAIT only lets it sleep with nothing pending), and in the engine an
# op is nearly always pending: the next ring round is posted ahead and waits for a peer that is still computing.
# On 2 cores with 8 ranks the worker threads took up to 10.5 of an epoch's 18 CPU-s and ccl's epochs up to 1.9x
# gloo's; without them ccl's CPU per epoch and epoch times were about gloo's (results/backends.md, "Ranks sharing
# cores, second look", has the runs). Where each rank has a core it is not set.
# An emulated network's hosts (--net veth:..., LOCAL_WORLD_SIZE = the ranks of one emulated host) share this
# machine's cores: there the launcher's MACHINE_RANKS_ENV (every rank it starts here) decides. On 8 one-rank
# emulated hosts without the worker thread ccl's epochs were about gloo's and repeatable, with it up to 3x slower and
# unsteady (results/backends.md, "oneCCL's worker thread on emulated hosts").
SHARED_CORES_ENV = {"CCL_WORKER_OFFLOAD": "0"}
#: set by sarlab's launcher: how many ranks it starts on this machine, whatever emulated host each is on
MACHINE_RANKS_ENV = "SARLAB_MACHINE_RANKS"


def ranks_share_cores() -> bool:
    """Whether more ranks share this machine's cores than this process may use: the ranks of its host
    (``LOCAL_WORLD_SIZE``) or, where sarlab's launcher started them, every rank on this machine
    (:data:`MACHINE_RANKS_ENV`: an emulated network's hosts share it)."""
    counts = []
    for key in ("LOCAL_WORLD_SIZE", MACHINE_RANKS_ENV):
        try:
            counts.append(int(os.environ.get(key, "0")))
        except ValueError:
            counts.append(0)
    local = max(counts)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return local > cores


def apply_env() -> dict[str, str]:
    """Set the oneCCL/libfabric environment defaults (never overriding the user's): :data:`ENV_DEFAULTS`, and
    :data:`SHARED_CORES_ENV` where :func:`ranks_share_cores`; returns what was set."""
    done = {}
    defaults = {**ENV_DEFAULTS, **(SHARED_CORES_ENV if ranks_share_cores() else {})}
    for k, v in defaults.items():
        if k not in os.environ:
            os.environ[k] = v
            done[k] = v
    return done


def load() -> ModuleType:
    """Build (first time, about a minute) and import the extension; later calls return the same module."""
    global _ext
    with _lock:
        if _ext is not None:
            return _ext
        from torch.utils import cpp_extension

        paths = locate()
        key = _key(paths)
        root = cache_root() / key
        libdir, build = root / "lib", root / "build"
        libdir.mkdir(parents=True, exist_ok=True)
        build.mkdir(parents=True, exist_ok=True)
        apply_env()
        name = "sarlab_ccl_" + key.rsplit("-", 1)[1]
        with _flock(root / "build.flock"), declared_ninja():  # one ninja for every process (see _loader)
            _link(paths["libccl"], libdir / "libccl.so.1")
            _link(paths["libccl"], libdir / "libccl.so.2")
            with contextlib.suppress(FileNotFoundError):
                (build / "lock").unlink()  # torch's marker: stale, since we hold the flock
            fresh = not (build / f"{name}.so").exists()
            if fresh:
                _log.info("sarlab.kernels.ccl: building the oneCCL backend extension in %s ...", build)
            t0 = time.perf_counter()
            irc = paths["libirc"].parent
            _ext = cpp_extension.load(
                name=name,
                sources=[str(CSRC / s) for s in SOURCES],
                extra_include_paths=[str(paths["include"])],
                extra_cflags=["-O2"],
                # --no-as-needed: libirc must be a dependency of the extension although only libccl uses it
                extra_ldflags=[
                    f"-L{libdir}",
                    "-l:libccl.so.1",
                    "-Wl,--no-as-needed",
                    f"-L{irc}",
                    "-lirc",
                    "-Wl,--as-needed",
                    f"-Wl,-rpath,{libdir}",
                    f"-Wl,-rpath,{irc}",
                ],
                build_directory=str(build),
                verbose=False,
            )
            if fresh:
                _log.info("sarlab.kernels.ccl: built in %.0f s", time.perf_counter() - t0)
        return _ext
