"""farm.builder.procs: a build's processes run in a session of their own and are stopped as one
when farm is interrupted; `farm build` stops its build and its private sccache server on SIGINT
and SIGTERM and exits 130 / 143. Real processes throughout, read back from /proc."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from farm.builder import procs
from farm.builder.builders import run_relayed
from farm.builder.compilecache import socket_path
from farm.builder.plan import container_label
from farm.errors import Interrupted, Stalled, UsageError
from tests.support.buildroot import make_root

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="sessions are read from /proc")

# A sh that ignores SIGTERM, with a child of its own: only SIGKILL ends it.
STUBBORN = "trap '' TERM; echo $$ > {pidfile}; sleep 600 & sleep 600"


def _wait_for(path: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.1)
    raise AssertionError(f"{path} was not written within {timeout} s")


@pytest.fixture
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Half a second between SIGTERM and SIGKILL: a step that ignores SIGTERM is killed that much later."""
    monkeypatch.setattr(procs, "GRACE_S", 0.5)


@pytest.mark.usefixtures("short_grace")
def test_stop_session_ends_every_member_even_one_that_ignores_sigterm(tmp_path) -> None:
    pidfile = tmp_path / "pid"
    proc = procs.start(["sh", "-c", STUBBORN.format(pidfile=pidfile)])
    sid = int(_wait_for(pidfile, 30))
    assert sid == proc.pid  # the step leads a session of its own
    time.sleep(0.3)  # its sleeps are started
    members = procs.session_members(sid)
    assert len(members) >= 3
    assert proc.pid in members
    assert os.getpid() not in members  # farm itself is never in it
    started = time.monotonic()
    assert procs.stop_session(sid) == len(members)
    proc.wait(timeout=10)
    assert procs.session_members(sid) == []
    assert time.monotonic() - started < 10


@pytest.mark.usefixtures("terminal_sigint", "short_grace")
def test_an_interrupted_step_is_stopped_with_everything_beneath_it(tmp_path) -> None:
    """SIGINT to farm (in the main thread, as a terminal's Ctrl-C) while run_relayed runs a step:
    Interrupted names the step, and nothing of the step's session is left."""
    pidfile = tmp_path / "pid"

    def interrupt() -> None:
        _wait_for(pidfile, 30)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(Interrupted) as caught, procs.interruptible():
        run_relayed(["sh", "-c", STUBBORN.format(pidfile=pidfile)], env=dict(os.environ), label="the stubborn step")
    sid = int(pidfile.read_text())
    assert procs.session_members(sid) == []
    assert caught.value.exit_code == 130
    assert caught.value.stopped == ["`the stubborn step` (3 process(es))"]
    assert caught.value.line() == "interrupted by SIGINT: stopped `the stubborn step` (3 process(es))"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored
    idle = Interrupted(signal.SIGTERM)
    assert (idle.exit_code, idle.line()) == (143, "interrupted by SIGTERM (no build process was running)")


def _stop(farm: subprocess.Popen[str]) -> None:
    """A check that failed before the signal: farm is asked to stop what it started, as a user would."""
    if farm.poll() is None:
        farm.terminate()
        try:
            farm.wait(timeout=120)
        except subprocess.TimeoutExpired:
            farm.kill()


SLEEPER_RECIPE = """\
name: sleeper
version: '0.1.0'
source:
  path: src/sleeper
links_torch: false
arch:
  list: '8.0'
"""

# setup.py of a build that never ends: two children (one ignores SIGTERM), then a long sleep.
# It writes its pid and session id where the test reads them.
SLEEPER_SETUP = """\
import os, subprocess, sys, time
from pathlib import Path
from setuptools import setup

if "bdist_wheel" in sys.argv:
    children = [subprocess.Popen(["sleep", "600"]),
                subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 600 & wait; sleep 600"])]
    if os.environ.get("SLEEPER_MARKER"):  # a native build (a container's environment is the plan's)
        Path(os.environ["SLEEPER_MARKER"]).write_text(f"{os.getpid()} {os.getsid(0)}")
    print("sleeper: building", flush=True)
    time.sleep(600)
setup(name="sleeper", version="0.1.0", py_modules=[])
"""


def _sleeper_root(tmp_path: Path) -> Path:
    src = tmp_path / "sleeper"
    src.mkdir()
    (src / "setup.py").write_text(SLEEPER_SETUP)
    root = tmp_path / "root"
    make_root(root, {"sleeper": SLEEPER_RECIPE}, {"src/sleeper": src})
    return root


@pytest.fixture(scope="module")
def sleeper_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One --cache-dir for both signals: the second build reuses the first's build environment."""
    return tmp_path_factory.mktemp("sleeper-cache")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_farm_build_leaves_nothing_running(tmp_path, cuda_home, sleeper_cache, sig, code) -> None:
    """A real `farm build --builder native` (its compiler cache on: a private sccache server)
    whose setup.py runs forever gets SIGTERM (CI cancelling the job) or SIGINT: farm exits
    128 + the signal, says in one line what it stopped, and no process of the build's session
    nor the sccache server of its socket survives, nor its socket file."""
    root = _sleeper_root(tmp_path)
    marker = tmp_path / "marker"
    env = {**os.environ, "SLEEPER_MARKER": str(marker)}
    farm = subprocess.Popen(
        [sys.executable, "-m", "farm.cli", "build", "sleeper", "--builder", "native", "--cuda", "13.0",
         "--root", str(root), "--cache-dir", str(sleeper_cache), "--cuda-home", str(cuda_home),
         "--out", str(tmp_path / "out")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        setup_pid, sid = map(int, _wait_for(marker, 900).split())
        time.sleep(0.5)  # the children are started
        members = procs.session_members(sid)
        assert setup_pid in members
        assert len(members) >= 5  # python -m build, its backend, sleep, sh, sleep
        assert farm.pid not in members
        run_dirs = list((sleeper_cache / "build").glob("sleeper-*/compile-cache"))
        assert len(run_dirs) == 1
        socket = socket_path(str(run_dirs[0]))
        server = procs.sccache_server(socket)
        assert server is not None  # the build's private server is up
        farm.send_signal(sig)
        _, err = farm.communicate(timeout=120)
    finally:
        _stop(farm)
    assert farm.returncode == code, err[-3000:]
    assert procs.session_members(sid) == []
    assert procs.sccache_server(socket) is None
    assert not procs.alive(server)
    assert not os.path.lexists(socket)  # sccache leaves its socket file: farm removed it
    last = err.strip().splitlines()[-1]
    # (a compile the server was still running would be counted after its name)
    assert last.startswith(f"farm build: interrupted by {sig.name}: stopped `python -m build --wheel --no-isolation` "
                           f"({len(members)} process(es)); the compiler cache's sccache server"), err[-3000:]
    assert not list((tmp_path / "out").glob("*.whl"))


def test_a_farm_build_that_makes_no_progress_fails_its_cell_and_leaves_nothing_running(tmp_path, cuda_home,
                                                                                      sleeper_cache) -> None:
    """The never-ending setup.py prints once, then sleeps with its children: `farm build` stops it
    once FARM_STALL_TIMEOUT passes, with its private sccache server, and fails the cell (exit 3)
    with a message naming the step, the cell and what to do."""
    root = _sleeper_root(tmp_path)
    marker = tmp_path / "marker"
    env = {**os.environ, "SLEEPER_MARKER": str(marker), procs.STALL_ENV: "20"}
    farm = subprocess.run(
        [sys.executable, "-m", "farm.cli", "build", "sleeper", "--builder", "native", "--cuda", "13.0",
         "--root", str(root), "--cache-dir", str(sleeper_cache), "--cuda-home", str(cuda_home),
         "--out", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert farm.returncode == 3, farm.stderr[-3000:]
    _, sid = map(int, marker.read_text().split())
    assert procs.session_members(sid) == []
    (run_dir,) = (sleeper_cache / "build").glob("sleeper-*/compile-cache")
    socket = socket_path(str(run_dir))
    assert procs.sccache_server(socket) is None
    assert not os.path.lexists(socket)
    assert re.search(r"sleeper-0\.1\.0-cu130-notorch-cp3\d+-linux_x86_64: `python -m build --wheel --no-isolation` "
                     r"made no progress: no output, no process started or ended, and its \d+ process\(es\) used "
                     r"\d+\.\d s of CPU for 20 s; farm stopped it", farm.stderr), farm.stderr[-3000:]
    assert "--no-compile-cache" in farm.stderr
    assert not list((tmp_path / "out").glob("*.whl"))


def test_an_interrupted_cibuildwheel_build_removes_its_container(tmp_path, cuda_home) -> None:
    """`farm build --engine podman` of the same never-ending setup.py, in cibuildwheel's container,
    gets SIGTERM: cibuildwheel's own clean-up does not run then, so farm removes the container it
    made (found by the label naming the build's work folder) and says so; exit 143."""
    from .test_builders import podman_image

    image = podman_image()
    root = _sleeper_root(tmp_path)
    cache = tmp_path / "cache"
    cell = f"sleeper-0.1.0-cu130-notorch-cp{sys.version_info[0]}{sys.version_info[1]}-linux_x86_64"
    label = container_label(cache / "build" / cell)

    def containers() -> list[str]:
        return subprocess.run(["podman", "ps", "--all", "--quiet", "--filter", f"label={label}"],
                              capture_output=True, text=True, check=True).stdout.split()

    farm = subprocess.Popen(
        [sys.executable, "-m", "farm.cli", "build", "sleeper", "--engine", "podman", "--image", image,
         "--cuda", "13.0", "--python", f"{sys.version_info[0]}.{sys.version_info[1]}", "--platform", "linux_x86_64",
         "--root", str(root), "--cache-dir", str(cache), "--cuda-home", str(cuda_home), "--out", str(tmp_path / "out")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    building = threading.Event()

    def read() -> None:
        assert farm.stderr is not None
        for line in farm.stderr:
            lines.append(line)
            if line.startswith("sleeper: building"):
                building.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert building.wait(900), "".join(lines[-40:])
        (container,) = containers()
        farm.send_signal(signal.SIGTERM)
        farm.wait(timeout=300)
    finally:
        _stop(farm)
        reader.join(timeout=30)
        assert farm.stderr is not None
        farm.stderr.close()
    assert farm.returncode == 143, "".join(lines[-40:])
    assert containers() == []
    last = lines[-1].strip()
    assert last.startswith("farm build: interrupted by SIGTERM: stopped `cibuildwheel --only cp"), last
    assert last.endswith(f"; its build container (podman rm --force {container})"), last


# ------------------------------------------------------------------------------------------------
# the no-progress watchdog
# ------------------------------------------------------------------------------------------------
# A step that waits on itself: a child that sleeps and the shell waiting on it (no output, no CPU).
ASLEEP = "echo $$ > {pidfile}; echo started; sleep 600 & wait"


@pytest.fixture
def quick_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procs, "POLL_S", 0.2)


@pytest.mark.usefixtures("quick_watch")
def test_a_step_that_makes_no_progress_is_stopped_with_everything_beneath_it(tmp_path, capfd) -> None:
    pidfile = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(Stalled) as caught:
        run_relayed(["sh", "-c", ASLEEP.format(pidfile=pidfile)], env={**os.environ, procs.STALL_ENV: "2"},
                    label="the sleeping step", cell="demo-0.1-cu130-cp311-linux_x86_64")
    assert time.monotonic() - started < 30
    assert procs.session_members(int(pidfile.read_text())) == []  # the step and its sleep are gone
    assert caught.value.exit_code == 3
    text = str(caught.value)
    assert text.startswith("demo-0.1-cu130-cp311-linux_x86_64: `the sleeping step` made no progress: no output, "
                           "no process started or ended, and its 2 process(es) used 0.0 s of CPU for 2 s; "
                           "farm stopped it"), text
    assert "--no-compile-cache" in text
    assert f"${procs.STALL_ENV}" in text
    assert "started" in capfd.readouterr().err  # what it printed was relayed


@pytest.mark.usefixtures("quick_watch")
def test_a_silent_step_that_computes_and_one_that_prints_are_left_to_finish(tmp_path) -> None:
    """Progress is CPU as well as output: a silent compile keeps a CPU busy for longer than the limit."""
    env = {**os.environ, procs.STALL_ENV: "0.5"}
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"  # twice the limit
    assert run_relayed([sys.executable, "-c", busy], env=env, label="busy").returncode == 0
    talking = "for i in 1 2 3 4; do echo $i; sleep 0.3; done"
    assert run_relayed(["sh", "-c", talking], env=env, label="talking").returncode == 0
    # and the step's work done by another session (the compiler cache server's) counts too
    done = tmp_path / "done"
    other = procs.start([sys.executable, "-c", f"{busy}open({str(done)!r}, 'w').close()\n"])
    try:
        assert run_relayed(["sh", "-c", f"until [ -e {done} ]; do sleep 0.2; done"], env=env,
                           label="waiting on the server", sessions=lambda: [other.pid]).returncode == 0
    finally:
        other.wait(timeout=60)


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "soon", "1e999"])
def test_the_stall_limit_must_be_finite_seconds(value) -> None:
    with pytest.raises(UsageError, match=r"\$FARM_STALL_TIMEOUT must be a number of seconds >= 0"):
        procs.stall_limit({procs.STALL_ENV: value})
    assert procs.stall_limit({}) == procs.DEFAULT_STALL_S
    assert procs.stall_limit({procs.STALL_ENV: "0"}) is None
    assert procs.stall_limit({procs.STALL_ENV: " 90 "}) == 90.0
