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

A build step that makes no progress is stopped too (:class:`Watchdog`): progress is output, a
process started or ended in the step's sessions (its own and its compiler cache server's), or
:data:`MIN_CPU_S` of CPU used by their processes (with the children they reaped) since the last
progress. A step that shows none of them for ``$FARM_STALL_TIMEOUT`` seconds (default
:data:`DEFAULT_STALL_S`; 0 turns the limit off) is stopped as an interrupted one is, and the build
fails with :class:`~farm.errors.Stalled`: a deadlock sleeps, it neither prints nor computes,
whereas a long silent compile keeps a CPU busy. Where ``/proc`` cannot be read, output alone counts.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from farm.builder.cclaunch import SOCKET_ENV, remove_socket
from farm.errors import Interrupted, UsageError

GRACE_S = 5.0  # between SIGTERM and SIGKILL: enough for a compiler to remove its temporary files
PROC = Path("/proc")
STALL_ENV = "FARM_STALL_TIMEOUT"
# A hosted job is killed at 6 h; a stalled step is stopped long before, with the job's time left to
# report it. A silent step that works (one long compile) keeps a CPU busy, so this is no limit on it.
DEFAULT_STALL_S = 1800.0
# CPU seconds since the last progress that count as progress (a sleeping tree uses none), or a
# hundredth of the limit where that is less
MIN_CPU_S = 1.0
POLL_S = 5.0  # how often a running step is looked at


def _fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, parent, group, session, ...);
    None when the process is gone or cannot be read."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces: the fields follow the last ')'
    fields = text[text.rfind(")") + 2:].split()
    return fields if len(fields) >= 15 else None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, session id) of a live process; None when it is gone or cannot be read."""
    fields = _fields(pid)
    try:
        return (fields[0], int(fields[3])) if fields else None
    except ValueError:
        return None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie is gone, only not yet reaped by its parent)."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def session_members(sid: int) -> list[int]:
    """The live processes (zombies aside: they are gone, only not yet reaped) of session ``sid``."""
    return sorted(activity([sid])[0])


def _signal(pids: Sequence[int], sid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(OSError):
        os.killpg(sid, sig)  # the leader's group: all there is where /proc cannot be read
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def stop_session(sid: int) -> int:
    """Stop every process of session ``sid``: SIGTERM, up to :data:`GRACE_S` seconds, then SIGKILL
    for what is left. Returns how many processes it found running."""
    members = session_members(sid) if PROC.is_dir() else [sid]
    if not members:
        return 0
    _signal(members, sid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    left = members
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = session_members(sid) if PROC.is_dir() else []
    if left:
        _signal(left, sid, signal.SIGKILL)
        deadline = time.monotonic() + GRACE_S
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


def sccache_session(environ: Mapping[str, str]) -> list[int]:
    """The session of the build's sccache server (``environ`` names its socket): the compiles it
    runs live there, outside the build step's own. Empty when no server runs."""
    socket = environ.get(SOCKET_ENV, "")
    server = sccache_server(socket) if socket else None
    stat = _stat(server) if server is not None else None
    return [stat[1]] if stat is not None else []


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


def stall_limit(environ: Mapping[str, str]) -> float | None:
    """A build step's no-progress limit in seconds: ``$FARM_STALL_TIMEOUT`` (0: none), else
    :data:`DEFAULT_STALL_S`. Anything but a finite number >= 0 is refused."""
    raw = environ.get(STALL_ENV, "").strip()
    if not raw:
        return DEFAULT_STALL_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"${STALL_ENV} must be a number of seconds >= 0 (0: no limit), not {raw[:40]!r}",
                         hint=f"unset it for the default ({DEFAULT_STALL_S:.0f} s), or give the seconds a build "
                              "step may go without output or CPU")
    return value or None


def activity(sessions: Iterable[int]) -> tuple[frozenset[int], float]:
    """The live processes of ``sessions`` and the CPU seconds they used, with the children they
    reaped (``/proc/PID/stat``: utime, stime, cutime, cstime)."""
    wanted = set(sessions)
    pids = []
    ticks = 0
    try:
        entries = list(PROC.iterdir())
    except OSError:
        return frozenset(), 0.0
    for entry in entries:
        if not entry.name.isdigit():
            continue
        fields = _fields(int(entry.name))
        try:
            if fields is None or fields[0] in ("Z", "X") or int(fields[3]) not in wanted:
                continue
            ticks += sum(int(f) for f in fields[11:15])
        except ValueError:
            continue
        pids.append(int(entry.name))
    return frozenset(pids), ticks / os.sysconf("SC_CLK_TCK")


class Watchdog:
    """A running build step's progress (module docstring): :meth:`output` as it prints,
    :meth:`stalled` now and then. ``sessions``: the sessions whose processes count (the step's,
    and its compiler cache server's, read at each look: the server may start later);
    ``cpu``: CPU seconds used elsewhere (a build container's), None where unknown."""

    def __init__(self, limit: float | None, sessions: Callable[[], Iterable[int]],
                 cpu: Callable[[], float | None] = lambda: None) -> None:
        self.limit = limit
        self._sessions = sessions
        self._cpu = cpu
        self._proc = PROC.is_dir()
        self._printed = 0  # lines relayed (written by the relaying thread; read here)
        self._seen = self._look()
        self._since = time.monotonic()

    def output(self) -> None:
        self._printed += 1

    def _look(self) -> tuple[int, frozenset[int], float]:
        pids, cpu = activity(self._sessions()) if self._proc else (frozenset(), 0.0)
        return self._printed, pids, cpu + (self._cpu() or 0.0)

    def stalled(self) -> str | None:
        """None while the step progresses; else what it did in the last ``limit`` seconds, for the message."""
        now = self._look()
        printed, pids, cpu = self._seen
        if now[0] != printed or now[1] != pids or now[2] - cpu >= min(MIN_CPU_S, (self.limit or 0) / 100):
            self._seen, self._since = now, time.monotonic()
            return None
        if self.limit is None or time.monotonic() - self._since < self.limit:
            return None
        used = f"its {len(now[1])} process(es) used {max(0.0, now[2] - cpu):.1f} s of CPU" if self._proc \
            else "farm cannot read its processes' CPU time here"
        return f"no output, no process started or ended, and {used} for {self.limit:.0f} s"


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
