"""Process lifecycle of a run: the launcher turns SIGINT/SIGTERM into an exception that unwinds through its clean-up,
workers die with their launcher, and commands end an interrupted run with one line instead of a traceback.

Nothing here starts work; the functions only install handlers or ask the kernel for a parent-death signal.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from sarlab.common.log import prefixed

_log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
CAUGHT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, kill/a scheduler, a closed terminal


class Interrupted(KeyboardInterrupt):
    """The launcher received SIGINT or SIGTERM; raised in its main thread so ``finally`` blocks clean up.

    A KeyboardInterrupt, so code and notebooks that handle Ctrl-C handle it alike; ``signum`` says which.
    """

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def _raise_interrupted(signum: int, frame) -> None:
    for sig in CAUGHT:  # the clean-up this starts must not be interrupted by a second signal
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """While inside, SIGINT and SIGTERM raise :class:`Interrupted` (main thread only; elsewhere a no-op).

    The handlers in place before are restored on the way out. Once one signal has raised, both are ignored until
    then, so a second Ctrl-C cannot cut short the clean-up the first one started (run that clean-up inside
    :func:`signals_deferred`).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in CAUGHT}
    for sig in CAUGHT:
        signal.signal(sig, _raise_interrupted)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """While inside, SIGINT and SIGTERM are noted, not acted on (for clean-up that must run to its end); on the
    way out the first one noted is raised as :class:`Interrupted`, unless an exception is already on its way.

    Main thread only; elsewhere a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in CAUGHT}
    for sig in CAUGHT:
        signal.signal(sig, lambda signum, frame: noted.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    if noted:
        raise Interrupted(noted[0])


def exit_code(err: KeyboardInterrupt) -> int:
    """The shell's exit status for a run ended by ``err`` (128 + signal number)."""
    return 128 + getattr(err, "signum", signal.SIGINT)


def interruptible(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Wrap a command's ``main(argv)``: SIGINT/SIGTERM unwind its clean-up and end it with one line on stderr
    and exit status 130 / 143, never a KeyboardInterrupt traceback."""

    def wrapped(argv: list[str] | None = None) -> int:
        try:
            with signals_raise():
                return main(argv)
        except KeyboardInterrupt as err:
            name = signal.Signals(getattr(err, "signum", signal.SIGINT)).name
            _log.warning("interrupted by %s; workers stopped, temporary files and networks removed", name,
                         extra=prefixed("sarlab"))  # at -q too; "sarlab: interrupted by SIGINT; ..." on stderr
            return exit_code(err)

    wrapped.__doc__, wrapped.__name__ = main.__doc__, main.__name__
    return wrapped


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies; exit now if the parent is already gone.

    The signal follows the parent *thread* that started this process (the launcher's calling thread).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:  # the launcher died before the request was in place
        os._exit(1)


#: set by the command line (:func:`forced_runs_guarded`): a run forced past the size check goes on in a child process
_GUARD_FORCED: list[bool] = []


@contextlib.contextmanager
def forced_runs_guarded() -> Iterator[None]:
    """While inside, :func:`survive_oom` may fork (the command line only: never in a notebook or a user's script)."""
    _GUARD_FORCED[:] = [True]
    try:
        yield
    finally:
        _GUARD_FORCED.clear()


def survive_oom(note: str) -> None:
    """For a run forced past the size check: fork; the child carries on with the command and this process waits,
    forwarding HUP/INT/TERM, so that when the kernel kills the child (SIGKILL: the OOM killer) the command still
    ends with one line (``note``: the estimate) and exit status 137. A no-op outside :func:`forced_runs_guarded` and
    outside the main thread."""
    if not _GUARD_FORCED or threading.current_thread() is not threading.main_thread():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _GUARD_FORCED.clear()
        return

    def forward(signum: int, frame) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in CAUGHT:
        signal.signal(sig, forward)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        if os.WTERMSIG(status) == signal.SIGKILL:
            _log.error("the run was killed by the kernel (SIGKILL), most likely out of memory: %s", note)
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))
