"""Workers forked from a preloaded process (a "zygote") instead of started as fresh interpreters.

A fresh worker spends ~3 s of CPU importing torch and the engine before it does any work; a run of N workers pays
that N times, on a 2-core machine most of the run's start-up. The zygote is one interpreter that imported the
engine once (``python -m sarlab.real.launch.zygote FD``) and forks each worker on request: the worker is ready in
milliseconds, shares the imported pages with the zygote, and runs exactly what a fresh one runs
(:func:`sarlab.real.launch.worker.main`). A command line starts the zygote as it starts (:func:`prestart`), so it
imports while the command does; a notebook or a script keeps one for all its runs.

How a worker stays the launcher's own child: the zygote forks a short-lived middle process that forks the worker
and exits; the launcher marks itself a child subreaper (``PR_SET_CHILD_SUBREAPER``) while it starts workers, so
the kernel hands the orphaned worker to it. The launcher then waits for the worker, reads its exit status and
signals its session exactly as for a process it started itself; the worker asks for its parent-death signal
once it has been adopted. The worker gets the launcher's environment, working directory and stdin/stdout/stderr
(passed over the socket) at each request, and the ``sys.path`` a fresh interpreter started there would have; a
zygote whose environment no longer matches the launcher's (the engine reads some variables as it imports) is
replaced. Whenever a zygote cannot be used (none starts, it dies, a worker is not adopted) the launcher starts fresh
interpreters instead, as it does for emulated networks and when ``$SARLAB_WORKER_START=spawn``.

The same zygote runs a module's ``__main__`` on request (:func:`start_module`): the calibration's rank benchmarks
(``python -m sarlab.real.calibration.commbench ...`` and the like) start in milliseconds instead of importing torch
once per rank. Such a child gets the caller's requested argv, environment, working directory and stdin/stdout/stderr,
runs ``runpy.run_module(module, run_name="__main__", alter_sys=True)`` with the collector on, and is adopted by the
caller like a worker (a :class:`ForkedWorker`, the part of :class:`subprocess.Popen` the caller uses). What a fork
cannot give a fresh interpreter: libgomp, MKL and oneDNN read ``OMP_NUM_THREADS`` and the like as the zygote
imported torch, so a forked child sets its threads with ``torch.set_num_threads`` itself (the benchmarks do);
and its resident memory starts as the zygote's (shared pages), so a probe of what a *fresh* process maps on first
use must stay a fresh interpreter (``fresh=True``).

The zygote and its workers are named in ``ps``/``top`` (``/proc/PID/comm``): ``sarlab-zygote``, ``sarlab-rank0``...,
a module's child by its module's last name (``sarlab-commbench``).
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import pickle
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time

_log = logging.getLogger(__name__)

#: ``spawn``: always start workers as fresh interpreters (the zygote is not used)
START_ENV = "SARLAB_WORKER_START"
#: variables the launcher's environment may change between runs without a new zygote: read at run time only
RUNTIME_ONLY = frozenset({"SARLAB_VERBOSITY", "PYTEST_CURRENT_TEST", "SARLAB_LAUNCHER_PID"})
PR_SET_NAME, PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 15, 36, 37  # <linux/prctl.h>
READY_TIMEOUT_S = 120.0  # importing the engine: ~3 s quiet, a minute on a very busy machine
ADOPT_TIMEOUT_S = 10.0
_MAX_MESSAGE = 1 << 20


def _prctl(option: int, arg) -> int:
    return ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)


def set_process_name(name: str) -> None:
    """Name this process in ``ps``/``top`` (``/proc/self/comm``, 15 bytes)."""
    _prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))


def is_subreaper() -> bool:
    flag = ctypes.c_int(0)
    _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag))
    return bool(flag.value)


class subreaper:
    """While inside, this process adopts its orphaned descendants (the workers the zygote forks)."""

    def __enter__(self):
        self._was = is_subreaper()
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        return self

    def __exit__(self, *exc):
        if not self._was:
            _prctl(PR_SET_CHILD_SUBREAPER, 0)


def _env_key(env) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k not in RUNTIME_ONLY))


class ForkedWorker:
    """A worker the zygote forked and this process adopted: the part of :class:`subprocess.Popen` the launcher
    uses (``pid``, ``returncode``, ``poll``, ``wait``)."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: the status is lost
                self.returncode = 1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _adopted(pid: int, timeout_s: float) -> bool:
    """Whether ``pid`` became this process's child (the kernel re-parents it when the middle process exits)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                    return True
        except (OSError, ValueError, IndexError):
            return False
        time.sleep(0.002)
    return False


class Zygote:
    """The launcher's handle on one zygote process: :meth:`fork` a worker, :meth:`close` it."""

    def __init__(self, package_root: str):
        self.owner, self.key = os.getpid(), _env_key(os.environ)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ, SARLAB_LAUNCHER_PID=str(os.getpid()),
                   PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
        with subreaper():  # the zygote (and its middle processes) must start while we are one
            self.proc = subprocess.Popen([sys.executable, "-m", "sarlab.real.launch.zygote", str(theirs.fileno())],
                                         pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        theirs.close()
        self.sock, self.ready, self.lock = ours, False, threading.Lock()

    def usable(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None and self.key == _env_key(os.environ)

    def _wait_ready(self) -> None:
        if not self.ready:
            self.sock.settimeout(READY_TIMEOUT_S)
            status = pickle.loads(self.sock.recv(_MAX_MESSAGE) or pickle.dumps(("closed", "")))
            if status[0] != "ready":
                raise RuntimeError(f"the zygote did not start: {status[1] or 'it exited'}")
            self.ready = True

    def wait_ready(self) -> None:
        """Block until the zygote has imported the engine (RuntimeError when it did not start)."""
        with self.lock:
            try:
                self._wait_ready()
            except (OSError, EOFError, pickle.PickleError) as err:
                raise RuntimeError(f"the zygote did not answer ({err.__class__.__name__}: {err})") from err

    def fork(self, argv: list[str], env: dict, module: str | None = None, cwd: str | None = None,
             fds: tuple[int, int, int] = (0, 1, 2)) -> ForkedWorker:
        """A worker running ``worker.main(argv)`` (or, with ``module``, that module's ``__main__`` with
        ``sys.argv[1:] = argv``) with ``env``, working directory ``cwd`` (default: this process's) and ``fds`` as its
        stdin/stdout/stderr; adopted by this process. Raises RuntimeError when the zygote cannot give one."""
        with self.lock, subreaper():
            try:
                self._wait_ready()
                request = pickle.dumps({"argv": argv, "env": env, "cwd": cwd or os.getcwd(), "module": module,
                                        "owner": os.getpid()})
                self.sock.settimeout(30.0)
                socket.send_fds(self.sock, [request], list(fds))
                reply = pickle.loads(self.sock.recv(_MAX_MESSAGE) or pickle.dumps(("closed", "")))
            except (OSError, EOFError, pickle.PickleError) as err:
                raise RuntimeError(f"the zygote did not answer ({err.__class__.__name__}: {err})") from err
            if reply[0] != "forked":
                raise RuntimeError(f"the zygote could not fork a worker: {reply[1] or 'it exited'}")
            pid = reply[1]
            if not _adopted(pid, ADOPT_TIMEOUT_S):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                raise RuntimeError(f"worker {pid} was not adopted by the launcher")
            return ForkedWorker(pid)

    def fork_or_stop(self, what: str, argv: list[str], env: dict, **kw) -> ForkedWorker | None:
        """:meth:`fork`, or None where this zygote cannot give one: it is then stopped (the caller starts ``what`` as
        a fresh interpreter; the next caller gets a new zygote)."""
        try:
            return self.fork(argv, env, **kw)
        except RuntimeError as err:
            _log.debug("%s starts as a fresh interpreter: %s", what, err)
            discard()
            return None

    def close(self) -> None:
        if self.owner != os.getpid():  # a fork of the owner: the zygote is not ours to stop
            return
        self.sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.wait(5)


_CURRENT: list[Zygote] = []
_GUARD = threading.Lock()


def wanted() -> bool:
    return os.environ.get(START_ENV, "zygote") != "spawn" and sys.platform.startswith("linux")


def current(package_root: str) -> Zygote | None:
    """This process's zygote, started (or replaced) when needed; None when workers must be fresh interpreters."""
    if not wanted():
        return None
    with _GUARD:
        if _CURRENT and not _CURRENT[0].usable():
            _CURRENT.pop().close()
        if not _CURRENT:
            try:
                _CURRENT.append(Zygote(package_root))
            except OSError as err:
                _log.debug("no zygote (%s): workers start as fresh interpreters", err)
                return None
        return _CURRENT[0]


def discard() -> None:
    """Stop this process's zygote (the next run starts another)."""
    with _GUARD:
        while _CURRENT:
            _CURRENT.pop().close()


def prestart(package_root: str) -> None:
    """Start the zygote now, so that it imports the engine while the caller does (a command line's first step)."""
    current(package_root)


def start_module(module: str, args: list[str], env: dict, cwd: str, package_root: str, stdin=None, stdout=None,
                 stderr=None, fresh: bool = False) -> ForkedWorker | subprocess.Popen:
    """``python -m module ARGS`` with ``env`` in ``cwd``: forked from this process's zygote (ready in milliseconds)
    where one serves, else (or with ``fresh``: a measurement that needs a fresh interpreter) a fresh interpreter.
    ``stdin``/``stdout``/``stderr``: open files, ``subprocess.DEVNULL`` or None (this process's own fds 0-2); not
    ``subprocess.PIPE``. Returns a handle with ``pid``, ``returncode``, ``poll``, ``wait(timeout)``
    and ``kill``."""
    preloaded = None if fresh else current(package_root)
    if preloaded is not None:
        with open(os.devnull, "rb") as devnull:
            fds = tuple(target if stream is None else devnull.fileno() if stream == subprocess.DEVNULL
                        else stream.fileno() if hasattr(stream, "fileno") else int(stream)
                        for target, stream in enumerate((stdin, stdout, stderr)))
            forked = preloaded.fork_or_stop(module, list(args), dict(env), module=module, cwd=cwd, fds=fds)
        if forked is not None:
            return forked
    return subprocess.Popen([sys.executable, "-m", module, *args], env=env, cwd=cwd, stdin=stdin, stdout=stdout,
                            stderr=stderr)


atexit.register(discard)


# ------------------------------------------------------------------ the zygote process


_SERVING: list[socket.socket] = []  # the zygote's end of its socket (a worker closes its copy)
_START_CWD: list[str] = []  # the zygote's working directory when it started (its sys.path[0], as ``-m`` set it)


def _serve(sock: socket.socket) -> None:
    _SERVING.append(sock)
    while True:
        try:
            request, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 3)
        except OSError:
            return
        if not request:  # the launcher closed its end
            return
        try:
            pid = _fork_worker(pickle.loads(request), fds)
            reply = ("forked", pid)
        except Exception as err:  # noqa: BLE001 - told to the launcher, which starts a fresh interpreter instead
            reply = ("error", f"{err.__class__.__name__}: {err}")
        finally:
            for fd in fds:
                os.close(fd)
        sock.send(pickle.dumps(reply))


def _fork_worker(request: dict, fds: list[int]) -> int:
    """Fork a middle process that forks the worker, sends its pid and exits at once (the launcher adopts it)."""
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(read)
            worker = os.fork()
            if worker == 0:
                os.close(write)
                _become_worker(request, fds)  # never returns
            os.write(write, str(worker).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        text = pipe.read()
    os.waitpid(middle, 0)
    if not text:
        raise RuntimeError("the middle process exited without a worker")
    return int(text)


def _become_worker(request: dict, fds: list[int]) -> None:
    code = 1
    try:
        os.setsid()  # a session of its own, as the launcher's fresh workers have
        for sock in _SERVING:  # the launcher must see the socket close when the zygote dies, whatever runs
            sock.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the std streams of this process for its whole life
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if sys.path and sys.path[0] == _START_CWD[0]:  # ``-m``'s first entry: the working directory, as a fresh
            sys.path[0] = request["cwd"]                # worker started there has (the rest is PYTHONPATH's)
        module = request.get("module")
        if module:
            sys.argv = ["-m", *request["argv"]]  # runpy puts the module's file first, as ``python -m`` does
            set_process_name(f"sarlab-{module.rsplit('.', 1)[-1]}")
        else:
            sys.argv = ["-m sarlab.real.launch.worker_entry", *request["argv"]]  # what a fresh worker's argv says
            set_process_name(f"sarlab-rank{request['argv'][1]}")
        owner = int(request.get("owner") or request["env"]["SARLAB_LAUNCHER_PID"])
        deadline = time.monotonic() + ADOPT_TIMEOUT_S
        while os.getppid() != owner:  # until the middle process has exited and the launcher adopted us
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)
        code = _run_module(module, owner) if module else _run_worker(request["argv"])
    except SystemExit as done:  # as the interpreter ends: an int is the status, anything else is printed, status 1
        code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
        if code == 1 and not isinstance(done.code, int):
            with contextlib.suppress(Exception):  # the interpreter's own last words, as ``python -m`` ends
                sys.stderr.flush()
                os.write(2, f"{done.code}\n".encode())
    except BaseException:  # noqa: BLE001 - the worker's own failures are written by main(); this is set-up
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _run_worker(argv: list[str]) -> int:
    from sarlab.common.log import configure_from_env
    from sarlab.real.launch.worker import main

    rank = argv[1]
    configure_from_env(int(rank) if rank.isdigit() else 0)
    main(argv)  # exits the process itself
    return 0


def _run_module(module: str, owner: int) -> int:
    """``python -m module`` in this forked child: the collector on (as in a fresh interpreter), the parent-death
    signal asked for (the child dies with its caller, as a worker does)."""
    import gc

    from sarlab.real.launch.lifecycle import die_with_parent

    die_with_parent(owner)
    gc.enable()
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def _preload() -> None:
    """What every worker would otherwise import or load by itself before its first epoch (~3.5 s of CPU on this
    2-core machine, as much as torch): the modules torch imports on first use (the optimiser's dynamo guard, the
    layers' symbolic shapes, the kernel loader's cpp_extension) and a finished build of the C++ kernels. Imports and
    a library load only: nothing here starts a thread or runs an OpenMP region, which a fork could not carry."""
    import torch._dynamo  # noqa: F401 - torch.optim's constructor imports it
    import torch.fx.experimental.symbolic_shapes  # noqa: F401 - an nn.Module list's first extend imports it
    import torch.utils.cpp_extension  # noqa: F401 - the kernel loader imports it

    from sarlab import kernels

    kernels.preload()


def _zygote_main() -> None:
    import gc

    gc.disable()  # as worker_entry: the imports' objects are not scanned; each worker turns the collector on
    _START_CWD.append(os.getcwd())
    sock = socket.socket(fileno=int(sys.argv[1]))
    set_process_name("sarlab-zygote")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the terminal is the launcher's to handle
    try:
        from sarlab.real.launch.lifecycle import die_with_parent

        die_with_parent(int(os.environ["SARLAB_LAUNCHER_PID"]))
        import sarlab.real.launch.worker  # noqa: F401 - the engine, imported once for every worker
        _preload()
        gc.freeze()
    except BaseException as err:  # noqa: BLE001 - told to the launcher
        sock.send(pickle.dumps(("error", f"{err.__class__.__name__}: {err}")))
        return
    sock.send(pickle.dumps(("ready", "")))
    _serve(sock)


if __name__ == "__main__":
    _zygote_main()
