"""The processes a build starts, stopped as one when the build is interrupted.

Every build step (pip, ``python -m build``, cibuildwheel, the repair) runs in a session of its
own (``setsid``): the compilers beneath it (ninja, nvcc, cicc, ptxas, gcc) share that session,
whatever process groups they make inside it, and a terminal's Ctrl-C reaches farm alone. The
compiler cache's private sccache server makes a session of its own when it starts (it
daemonizes), and the compiles it runs for the build live in that one.

When ``farm build`` is interrupted (SIGINT, or SIGTERM as a CI runner cancelling a job sends it),
:func:`interruptible` turns the signal into :class:`~farm.errors.Interrupted`; on its way out,
the step that was running stops its session (:func:`stop_session`: SIGTERM to every member, a
short grace, then SIGKILL), the native builder stops its sccache server and removes its socket
file (:func:`stop_sccache_server`), and the command exits 128 + the signal's number (130, 143) with
one line naming what was stopped.

Sessions are read from ``/proc`` (Linux); elsewhere on POSIX only the step's own process group
is signalled, and on Windows (cibuildwheel's win_amd64 builds) ``taskkill /T /F`` ends the
step's process tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from farm.builder.cclaunch import SOCKET_ENV, remove_socket
from farm.errors import Interrupted

GRACE_S = 5.0  # between SIGTERM and SIGKILL: enough for a compiler to remove its temporary files
PROC = Path("/proc")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, session id) of a live process; None when it is gone or cannot be read."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces: the fields follow the last ')'
    fields = text[text.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[3])
    except (IndexError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie is gone, only not yet reaped by its parent)."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def session_members(sid: int) -> list[int]:
    """The live processes (zombies aside: they are gone, only not yet reaped) of session ``sid``."""
    found = []
    try:
        entries = list(PROC.iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is not None and stat[1] == sid and stat[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def _signal(pids: Sequence[int], sid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(OSError):
        os.killpg(sid, sig)  # the leader's group: all there is where /proc cannot be read
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def stop_session(sid: int, *, grace: float = GRACE_S) -> int:
    """Stop every process of session ``sid``: SIGTERM, up to ``grace`` seconds, then SIGKILL for
    what is left. Returns how many processes it found running."""
    members = session_members(sid) if PROC.is_dir() else [sid]
    if not members:
        return 0
    _signal(members, sid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    left = members
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = session_members(sid) if PROC.is_dir() else []
    if left:
        _signal(left, sid, signal.SIGKILL)
        deadline = time.monotonic() + grace
        while session_members(sid) and time.monotonic() < deadline:
            time.sleep(0.05)
    return len(members)


def start(cmd: Sequence[str] | str, **popen: object) -> subprocess.Popen[bytes]:
    """``subprocess.Popen`` of a build step, in a session of its own (its id is the step's pid)."""
    return subprocess.Popen(cmd, start_new_session=True, **popen)  # type: ignore[call-overload,no-any-return]


def stop_step(proc: subprocess.Popen[bytes], what: str, exc: BaseException) -> None:
    """A build step that an exception left running, stopped with everything beneath it; an
    :class:`Interrupted` learns what was stopped."""
    if os.name == "nt":  # no sessions: the step's process tree, as Windows knows it
        count = int(proc.poll() is None)
        with contextlib.suppress(OSError):
            subprocess.run(["taskkill", "/T", "/F", "/PID", str(proc.pid)], capture_output=True, check=False)
    else:
        count = stop_session(proc.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=GRACE_S)
    if isinstance(exc, Interrupted) and count:
        exc.stopped.append(f"{what} ({count} process(es))")


def sccache_server(socket: str) -> int | None:
    """The pid of the sccache server listening on ``socket`` (its environment names the socket)."""
    needle = f"SCCACHE_SERVER_UDS={socket}".encode()
    for entry in PROC.glob("[0-9]*"):
        try:
            if (entry / "comm").read_text().strip() != "sccache":
                continue
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                return int(entry.name)
        except (OSError, ValueError):
            continue
    return None


def stop_sccache_server(sccache: str, environ: Mapping[str, str]) -> str | None:
    """Stop the build's private sccache server (``sccache --stop-server`` with the build's
    ``SCCACHE_*`` environment, then whatever is left of its session: the compiles it ran), and
    remove the socket file it leaves. Returns what was stopped, or None when no server was running."""
    socket = environ.get(SOCKET_ENV, "")
    server = sccache_server(socket) if socket else None
    stat = _stat(server) if server is not None else None
    sid = stat[1] if stat is not None else None
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run([sccache, "--stop-server"], env=dict(environ), capture_output=True, timeout=30, check=False)
    if sid is None or server is None:
        if socket:
            remove_socket(socket)  # a server that died before: its file, nobody listening
        return None
    deadline = time.monotonic() + GRACE_S  # the server exits a moment after it answered
    while alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = stop_session(sid)  # compiles the server was running, or a server that did not answer
    remove_socket(socket)
    return "the compiler cache's sccache server" + (f" (and {left} process(es) of its session)" if left else "")


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` inside the block; the first one only, so
    that stopping what was started is not itself interrupted. The main thread's handlers are
    restored afterwards (elsewhere this does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, signal.SIGTERM)

    def handler(signum: int, _frame: object) -> None:
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)

    old = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
