"""farm.builder.preflight: what a cell needs of this host, decided before any download.

Servers are simulated on 127.0.0.1: a listening socket answers, a port nobody listens on does not."""

from __future__ import annotations

import socket
import sys

from farm.builder.preflight import Host, Preflight, platform_blocker, url_host
from farm.errors import ToolError
from farm.model.cells import Cell

PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
LINUX = Host("linux", "x86_64")


def _cell(platform: str = "linux_x86_64", python: str = PY) -> Cell:
    return Cell("demo_ext", "0.1.0", "13.0", "none", python, platform)


def test_which_builder_builds_which_platform_where() -> None:
    assert platform_blocker(_cell(), "native", LINUX) is None
    assert platform_blocker(_cell(), "cibuildwheel", LINUX) is None
    win = platform_blocker(_cell("win_amd64"), "cibuildwheel", LINUX)
    assert win is not None
    assert win.exit_code == 2
    assert "on Windows; this host is Linux" in win.reason
    assert platform_blocker(_cell("win_amd64"), "cibuildwheel", Host("win32", "AMD64")) is None
    arm = platform_blocker(_cell("linux_aarch64"), "native", LINUX)
    assert arm is not None
    assert "this host is x86_64" in arm.reason
    # cibuildwheel builds aarch64 in a container (emulated when it must)
    assert platform_blocker(_cell("linux_aarch64"), "cibuildwheel", LINUX) is None
    assert platform_blocker(_cell(), "native", Host("darwin", "x86_64")) is not None


def test_url_hosts() -> None:
    assert url_host("https://developer.download.nvidia.com/compute/cuda/redist/") == (
        "developer.download.nvidia.com", 443)
    assert url_host("http://127.0.0.1:8080/simple") == ("127.0.0.1", 8080)
    assert url_host("git@github.com:o/r.git") == ("github.com", 22)
    assert url_host("/srv/mirror") is None
    assert url_host("file:///srv/mirror") is None


def test_an_engine_that_cannot_start_blocks_linux_cells_once(tmp_path) -> None:
    calls = []

    def engine(name: str) -> None:
        calls.append(name)
        raise ToolError(f"{name} cannot start containers here")

    pre = Preflight("cibuildwheel", engine="podman", host=LINUX, check_engine=engine)
    first = pre.check(_cell())
    assert first is not None
    assert first.dimension == "engine"
    assert "podman cannot start" in first.reason
    assert pre.check(_cell(python="cp312")) is not None
    assert calls == ["podman"]
    win = pre.check(_cell("win_amd64"))
    assert win is not None
    assert win.dimension == "platform"


def test_a_missing_interpreter_or_compiler_blocks_a_native_cell(tmp_path) -> None:
    pre = Preflight("native", host=LINUX, environ={"PATH": str(tmp_path), "PYENV_ROOT": str(tmp_path)})
    missing = pre.check(_cell(python="cp399"))
    assert missing is not None
    assert missing.dimension == "python"
    assert missing.exit_code == 2
    assert "no Python 3.99 here" in missing.reason
    compiler = pre.check(_cell())  # this interpreter is found; PATH has no c++
    assert compiler is not None
    assert compiler.dimension == "compiler"
    assert pre.interpreter(_cell()) is not None
    error = compiler.error(_cell())
    assert error.exit_code == 3
    assert "apt-get install g++" in str(error)


def test_a_server_that_does_not_answer_blocks_before_the_download(tmp_path) -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        up = listening.getsockname()[1]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            down = s.getsockname()[1]  # bound, never listening: connections are refused
        pre = Preflight("cibuildwheel", host=LINUX, check_engine=lambda name: None)
        assert pre.check(_cell(), downloads={"the CUDA toolkit": f"http://127.0.0.1:{up}/redist/"}) is None
        blocked = pre.check(_cell(), downloads={"the source": f"http://127.0.0.1:{down}/o/r.git"})
    assert blocked is not None
    assert blocked.dimension == "network"
    assert f"the source comes from 127.0.0.1:{down}, which does not answer" in blocked.reason


def test_too_little_disk_blocks(tmp_path) -> None:
    pre = Preflight("cibuildwheel", host=LINUX, check_engine=lambda name: None)
    assert pre.check(_cell(), disk_needed=1, cache=tmp_path / "not" / "made" / "yet") is None
    blocked = pre.check(_cell(), disk_needed=1 << 62, cache=tmp_path)
    assert blocked is not None
    assert blocked.dimension == "disk"
    assert "GB free" in blocked.reason
