"""Where outputs are made: every output path checked before any compute, and staging names that carry the pid of
the process writing them, so that the next run removes what a killed one left.

The checks say in one line what is wrong with a path (too long a name or path, a loop of links, a file where a
directory must be, a folder that cannot be written, too little free space); staging directories and temporary
files are named ``<prefix><pid>-<random>`` beside their target, and :func:`sweep_stale` removes those whose
process is gone (a SIGKILL leaves them; nothing else can). Imports the standard library only.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile

from sarlab.data.validate_data import InputError

#: bytes of one file name and of a whole path on Linux (NAME_MAX, PATH_MAX with its terminating NUL)
NAME_MAX = 255
PATH_MAX = 4096


def _short(path: str) -> str:
    return repr(path if len(path) <= 80 else path[:40] + "..." + path[-30:])


def check_path(path, what: str) -> str:
    """Refuse a path no file system can hold or reach; returns it absolute.

    Refused: not a non-empty string, a NUL byte, a name (component) over :data:`NAME_MAX` bytes, a path over
    ``PATH_MAX - 1`` bytes, a loop of symbolic links, a file where a folder must be.

    Args:
        path: the output path. what: the option it came from, for the message.
    """
    if not isinstance(path, str | os.PathLike) or not str(path):
        raise InputError(f"{what} needs a path, got {path!r}")
    path = os.fspath(path)
    if "\0" in path:
        raise InputError(f"{what} {path!r}: a path cannot hold a NUL byte")
    full = os.path.abspath(path)
    size = len(os.fsencode(full))
    if size >= PATH_MAX:
        raise InputError(f"{what} {_short(path)}: the path is {size} bytes, over the {PATH_MAX - 1}-byte limit of "
                         "Linux paths; choose a shorter path")
    for name in full.split(os.sep):
        if len(os.fsencode(name)) > NAME_MAX:
            raise InputError(f"{what} {_short(path)}: the name {_short(name)} is {len(os.fsencode(name))} bytes, "
                             f"over the {NAME_MAX}-byte limit of a file name; choose a shorter name")
    try:
        os.stat(full)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(f"{what} {_short(path)}: a loop of symbolic links; choose a real path") from None
        if err.errno == errno.ENOTDIR:
            raise InputError(f"{what} {_short(path)}: a file stands where a folder of this path must be; choose "
                             "another path") from None
    return full


def nearest_existing(path: str) -> str:
    """``path`` itself, or its nearest ancestor that exists."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def probe_writable(directory: str, what: str) -> None:
    """Refuse unless a file can be created in ``directory`` (or in its nearest existing ancestor, where the missing
    folders would be made): a real write, which also catches read-only mounts where ``os.access`` (and root) says
    yes."""
    base = nearest_existing(directory)
    if not os.path.isdir(base):
        raise InputError(f"{what}: {base!r} is a file, so {directory!r} cannot be a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".sarlab-probe-", dir=base)
    except OSError as err:
        raise InputError(f"{what}: cannot write into {base!r} ({err.strerror or err}); choose a writable "
                         "location") from None
    os.close(fd)
    os.remove(probe)


def check_free(directory: str, nbytes: int, what: str, margin: float = 1.1) -> None:
    """Refuse when the file system of ``directory`` has less than ``margin * nbytes`` bytes free."""
    if nbytes <= 0:
        return
    base = nearest_existing(directory)
    free = shutil.disk_usage(base).free
    if free < nbytes * margin:
        raise InputError(f"{what}: about {nbytes / 2**20:.1f} MiB will be written under {base!r} but only "
                         f"{free / 2**20:.1f} MiB are free; free some space or choose another place")


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def sweep_stale(parent: str, prefix: str) -> list[str]:
    """Remove the entries of ``parent`` named ``<prefix><pid>-...`` whose process ``pid`` is gone (what a killed
    run left); returns their names. Entries of live processes, and everything else, are left alone."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)-")
    removed = []
    try:
        entries = os.listdir(parent)
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry)
        if not match or int(match.group(1)) == os.getpid() or pid_alive(int(match.group(1))):
            continue
        full = os.path.join(parent, entry)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.remove(full)
            removed.append(entry)
        except OSError:
            pass
    return removed


def staging_dir(parent: str, prefix: str) -> str:
    """A new directory ``<parent>/<prefix><pid>-<random>`` to build an output in, after sweeping the ones killed
    runs left there."""
    os.makedirs(parent, exist_ok=True)
    sweep_stale(parent, prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent)
