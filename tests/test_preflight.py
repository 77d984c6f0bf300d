"""farm.builder.preflight: what a cell needs of this host, decided before any download.

Servers are simulated on 127.0.0.1: a listening socket answers, a port nobody listens on does not."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import socket
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from farm.builder.images import ImageFacts, emulated_machines
from farm.builder.preflight import Host, Preflight, container_blocker, needs_of, platform_blocker, url_host
from farm.builder.spec import resolve_spec
from farm.errors import FarmError, ToolError
from farm.model.cells import Cell
from farm.model.config import Recipe
from farm.source.fetch import fetch
from tests.support import buildroot, gitremote, loopback

PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
LINUX = Host("linux", "x86_64")
IMAGE = "localhost/farm-manylinux:bookworm-1"
# what the probe of .ci/podman-setup.sh's image answers (tests/test_images.py asks the real one)
LOCAL = ImageFacts(IMAGE, "sha256:39d0", "linux", "x86_64", {"cp311": "3.11.2"}, "/usr/bin/c++",
                   ("/opt/python/cp39-cp39 runs Python 3.11.2",))


def _container_pre(**kw: object) -> Preflight:
    """A cibuildwheel preflight whose image is LOCAL, on a host without emulation."""
    return Preflight("cibuildwheel", host=LINUX, check_engine=lambda name: None, images={"x86_64": IMAGE},
                     emulation=dict, probe=lambda engine, ref, cache: (LOCAL, ""), **kw)  # type: ignore[arg-type]


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


def test_a_windows_cell_needs_msvc(tmp_path) -> None:
    """On a Windows host, cibuildwheel builds win_amd64 with MSVC: neither cl.exe on PATH nor a
    vswhere under %ProgramFiles(x86)% blocks the cell, naming the workload to install."""
    pre = Preflight("cibuildwheel", host=Host("win32", "AMD64"),
                    environ={"PATH": str(tmp_path), "ProgramFiles(x86)": str(tmp_path)})
    blocked = pre.check(_cell("win_amd64"))
    assert blocked is not None
    assert blocked.dimension == "compiler"
    assert blocked.reason.startswith("no MSVC C++ toolset (cl.exe on PATH")
    assert "Microsoft.VisualStudio.Component.VC.Tools.x86.x64" in (blocked.error(_cell("win_amd64")).hint or "")


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
        pre = _container_pre()
        assert pre.check(_cell(), downloads={"the CUDA toolkit": f"http://127.0.0.1:{up}/redist/"}) is None
        blocked = pre.check(_cell(), downloads={"the source": f"http://127.0.0.1:{down}/o/r.git"})
    assert blocked is not None
    assert blocked.dimension == "network"
    assert f"the source comes from 127.0.0.1:{down}, which does not answer" in blocked.reason


def test_too_little_disk_blocks(tmp_path) -> None:
    pre = _container_pre()
    assert pre.check(_cell(), disk_needed=1, cache=tmp_path / "not" / "made" / "yet") is None
    blocked = pre.check(_cell(), disk_needed=1 << 62, cache=tmp_path)
    assert blocked is not None
    assert blocked.dimension == "disk"
    assert "GB free" in blocked.reason


def test_the_image_decides_which_python_a_container_cell_can_build() -> None:
    """cibuildwheel builds a cell with the image's /opt/python/<tag>-<tag>: the local image has
    cp311 only (its cp39-cp39 runs 3.11), so cp310 is refused with what the image has."""
    assert container_blocker(_cell(python="cp311"), LINUX, {}, IMAGE, LOCAL, None) is None
    cp310 = container_blocker(_cell(python="cp310"), LINUX, {}, IMAGE, LOCAL, None)
    assert cp310 is not None
    assert (cp310.dimension, cp310.exit_code) == ("python", 2)
    assert cp310.reason == (f"the image {IMAGE} has no Python 3.10 (/opt/python/cp310-cp310 is not there; it has "
                            "cp311 (3.11.2); /opt/python/cp39-cp39 runs Python 3.11.2)")
    assert "--image" in (cp310.error(_cell(python="cp310")).hint or "")
    bare = ImageFacts(IMAGE, "sha256:1", "linux", "x86_64", {"cp311": "3.11.2"}, None)
    no_cxx = container_blocker(_cell(), LINUX, {}, IMAGE, bare, None)
    assert no_cxx is not None
    assert no_cxx.dimension == "compiler"
    arm_image = ImageFacts(IMAGE, "sha256:2", "linux", "aarch64", {"cp311": "3.11.2"}, "/usr/bin/c++")
    wrong = container_blocker(_cell(), LINUX, {}, IMAGE, arm_image, None)
    assert wrong is not None
    assert wrong.reason == f"the image {IMAGE} is linux/aarch64; the cell needs linux/x86_64"


def test_another_architecture_needs_an_emulator_a_container_can_use() -> None:
    """An aarch64 cell on an x86_64 host runs only under a binfmt_misc handler for aarch64 ELF
    binaries with the F flag; without binfmt_misc, or with a handler lacking F, it is refused
    (exit 2 when named) before its image is even looked for."""
    arm = _cell("linux_aarch64")
    unmounted = container_blocker(arm, LINUX, None, "quay.io/pypa/manylinux_2_28_aarch64", None, None)
    assert unmounted is not None
    assert (unmounted.dimension, unmounted.exit_code) == ("platform", 2)
    assert unmounted.reason.startswith("running aarch64 containers on this x86_64 host needs emulation, and "
                                       "binfmt_misc is not mounted; register QEMU's aarch64 emulator (as root: podman "
                                       "run")
    none = container_blocker(arm, LINUX, {}, None, None, None)
    assert none is not None
    assert "no binfmt_misc handler runs aarch64 binaries" in none.reason
    no_f = container_blocker(arm, LINUX, {"aarch64": False}, None, None, None)
    assert no_f is not None
    assert "lacks the F flag" in no_f.reason
    # emulated: then the image decides (cibuildwheel's own, from a registry that must answer)
    ok = container_blocker(arm, LINUX, {"aarch64": True}, "quay.io/pypa/manylinux_2_28_aarch64", None, None)
    assert ok is None
    offline = container_blocker(arm, LINUX, {"aarch64": True}, "quay.io/pypa/manylinux_2_28_aarch64", None,
                                "Name or service not known")
    assert offline is not None
    assert (offline.dimension, offline.exit_code) == ("image", 3)
    assert offline.reason == ("the image quay.io/pypa/manylinux_2_28_aarch64 is not here, and its registry quay.io "
                              "does not answer (Name or service not known)")
    # a native aarch64 host needs no emulation
    assert container_blocker(arm, Host("linux", "aarch64"), None, "quay.io/x", None, None) is None
    local = container_blocker(_cell(), LINUX, {}, "localhost/gone:1", None, None)
    assert local is not None
    assert local.reason == "the image localhost/gone:1 is not here, and a localhost/ image is never pulled"


def test_each_image_is_probed_once_per_run() -> None:
    asked: list[str] = []

    def probe(engine: str, reference: str, cache: object) -> tuple[ImageFacts | None, str]:
        asked.append(f"{engine} {reference}")
        return LOCAL, ""

    pre = Preflight("cibuildwheel", engine="podman", host=LINUX, check_engine=lambda name: None,
                    images={"x86_64": IMAGE}, emulation=dict, probe=probe)
    assert pre.check(_cell(python="cp311")) is None
    blocked = pre.check(_cell(python="cp310"))
    assert blocked is not None
    assert blocked.dimension == "python"
    arm = pre.check(_cell("linux_aarch64"))  # no emulation: its image is never asked for
    assert arm is not None
    assert arm.dimension == "platform"
    assert asked == [f"podman {IMAGE}"]


def _farm_build(tmp_path: Path, cache: Path, *extra: str) -> int:
    from farm.cli import main

    from .test_builders import _demo_root

    _demo_root(tmp_path)
    return main(["build", "demo_ext", "--builder", "cibuildwheel", "--engine", "podman", "--cuda", "13.0",
                 "--root", str(tmp_path), "--cache-dir", str(cache), "--out", str(tmp_path / "out"), *extra])


@pytest.mark.slow
def test_named_cells_the_image_or_host_cannot_build_are_refused_before_any_download(tmp_path, capsys) -> None:
    """The real podman and image: `--python 3.10` (the image has no cp310) and `--platform
    linux_aarch64` (no emulator on this host) are refused, exit 2, and a named cell whose image is
    gone, exit 3, before a source, toolkit or environment is fetched; the image's probe is cached
    under its ID."""
    from .test_builders import podman_image

    image = podman_image()
    cache = tmp_path / "cache"
    code = _farm_build(tmp_path, cache, "--image", image, "--python", "3.10", "--platform", "linux_x86_64")
    err = capsys.readouterr().err
    assert code == 2, err
    assert (f"demo_ext-0.1.0-cu130-notorch-cp310-linux_x86_64: error: cell demo_ext-0.1.0-cu130-notorch-cp310-"
            f"linux_x86_64 cannot be built on this host: the image {image} has no Python 3.10") in err
    assert [p.parent.name for p in cache.rglob("*.json")] == ["images"]  # the probe's answer, nothing fetched
    if emulated_machines() is None or not emulated_machines().get("aarch64"):  # type: ignore[union-attr]
        code = _farm_build(tmp_path, cache, "--image", image, "--python", "3.11", "--platform", "linux_aarch64")
        err = capsys.readouterr().err
        assert code == 2, err
        assert ("linux_aarch64 cannot be built on this host: running aarch64 containers on this x86_64 host "
                "needs emulation") in err
    # every axis named (a CI job's one cell) and its image gone: refused, exit 3 (what the host lacks)
    code = _farm_build(tmp_path, cache, "--image", "localhost/farm-no-such-image:0", "--python", "3.11",
                       "--platform", "linux_x86_64")
    err = capsys.readouterr().err
    assert code == 3, err
    assert "the image localhost/farm-no-such-image:0 is not here, and a localhost/ image is never pulled" in err
    assert [p.parent.name for p in cache.rglob("*.json")] == ["images"]


@pytest.mark.slow
def test_farm_build_builds_what_this_host_can_and_skips_the_rest_in_one_line_each(tmp_path, capsys,
                                                                                  pypi_toolkit) -> None:
    """`farm build demo_ext --builder cibuildwheel --engine podman --cuda 13.0` with the local image:
    the cp311 Linux wheel is built and asserted; every other cell is skipped with one line saying
    why (the image's Pythons, emulation, Windows), and the exit is the built cell's: 0."""
    from tests.support.buildroot import cache_dir_of

    from .test_builders import podman_image

    image = podman_image()
    code = _farm_build(tmp_path, cache_dir_of(pypi_toolkit), "--image", image, "--json")
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    ((result,),) = [report["results"]]
    assert result["cell"] == "demo_ext-0.1.0-cu130-notorch-cp311-linux_x86_64"
    assert result["passed"]
    skipped = {s["cell"]: s["reason"] for s in report["skipped"]}
    assert skipped["demo_ext-0.1.0-cu130-notorch-cp310-linux_x86_64"].startswith(
        f"the image {image} has no Python 3.10")
    assert skipped["demo_ext-0.1.0-cu130-notorch-cp311-linux_aarch64"].startswith("running aarch64 containers on this")
    assert skipped["demo_ext-0.1.0-cu130-notorch-cp311-win_amd64"].startswith("cibuildwheel builds win_amd64")
    assert len(skipped) == 17  # 6 Pythons x 3 platforms, less the one built
    assert report["errors"] == []
    lines = [line for line in captured.err.splitlines() if ": skipped: this host cannot build it: " in line]
    assert len(lines) == 17


def test_a_python_uv_would_install_is_a_download_whose_server_must_answer(tmp_path) -> None:
    """No Python 3.13 here, but uv (the real one, beside farm) offers one: the cell is not refused
    for its Python; the server uv would download it from must answer. uv's mirror setting points
    that download at 127.0.0.1 (uv's documented UV_PYTHON_INSTALL_MIRROR), a port that listens,
    then one that refuses."""
    from farm.builder.buildenv import find_uv
    from farm.builder.interpreters import managed_download

    uv, cxx = find_uv(), shutil.which("c++") or shutil.which("g++")
    if uv is None or cxx is None:
        pytest.skip("uv or a C++ compiler is not installed here")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        up = listening.getsockname()[1]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            down = s.getsockname()[1]
        base = {"PATH": str(tmp_path), "PYENV_ROOT": str(tmp_path), "UV_PYTHON_INSTALL_DIR": str(tmp_path / "uv"),
                "HOME": str(tmp_path)}
        ok = Preflight("native", host=LINUX, uv=uv, environ={**base, "CXX": cxx,
                                                             "UV_PYTHON_INSTALL_MIRROR": f"http://127.0.0.1:{up}/pbs"})
        assert ok.check(_cell(python="cp313")) is None
        url = managed_download("cp313", uv, environ={**base, "UV_PYTHON_INSTALL_MIRROR": f"http://127.0.0.1:{up}/pbs"})
        assert url is not None
        assert url.startswith(f"http://127.0.0.1:{up}/pbs/")
        assert ok.interpreter(_cell(python="cp313")) is None  # the build installs it (uv python install 3.13)
        off = Preflight("native", host=LINUX, uv=uv, environ={**base, "CXX": cxx,
                                                              "UV_PYTHON_INSTALL_MIRROR": f"http://127.0.0.1:{down}/pbs"})
        blocked = off.check(_cell(python="cp313"))
    assert blocked is not None
    assert blocked.dimension == "network"
    assert blocked.reason.startswith(f"Python 3.13 (uv python install) comes from 127.0.0.1:{down}, which does not answer")
    # a version uv does not offer stays refused, saying so
    none = Preflight("native", host=LINUX, uv=uv, environ=base).check(_cell(python="cp399"))
    assert none is not None
    assert none.reason.endswith("uv offers no download of it)")
    nouv = Preflight("native", host=LINUX, uv=None, environ=base).check(_cell(python="cp399"))
    assert nouv is not None
    assert nouv.reason.endswith("uv, which could install one, is not here)")


def test_a_git_source_is_checked_where_git_fetches_it(tmp_path, monkeypatch) -> None:
    """A recipe's GitHub repo rewritten by the user's ``url.<base>.insteadOf`` to a local clone is
    no network download: git fetches the clone, so an unreachable GitHub does not block the cell;
    without the rewrite the same cell is refused (the host does not answer)."""
    with socket.socket() as closed:  # a port nobody listens on stands for GitHub out of reach
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    down = f"http://127.0.0.1:{port}/o/demo.git"
    (tmp_path / "root" / "examples" / "demo_ext").mkdir(parents=True)
    recipe = buildroot.DEMO_RECIPE.format(arch="8.0").replace(
        "  path: examples/demo_ext\n", f"  git: {{repo: '{down}', ref: v1.0}}\n")
    config = buildroot.make_root(tmp_path / "root", {"demo_ext": recipe})
    demo = config.recipe("demo_ext")
    spec = resolve_spec(config, demo, _cell())
    config_file = tmp_path / "gitconfig"
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config_file))

    def blocker() -> str | None:
        needs = needs_of(spec, demo.source, builder="cibuildwheel", source_cache=tmp_path / "sources",
                         toolkit_root=tmp_path / "tk", cuda_home=tmp_path, env_root=tmp_path / "envs",
                         interpreter=None)
        found = Preflight("native", host=LINUX).check(_cell(), downloads=needs.downloads)
        return None if found is None else found.reason

    config_file.write_text("")
    reason = blocker()
    assert reason is not None
    assert f"the source comes from 127.0.0.1:{port}, which does not answer" in reason
    clone = tmp_path / "mirror" / "demo.git"
    config_file.write_text(f'[url "{clone}"]\n\tinsteadOf = {down}\n')
    assert blocker() is None


def _vendoring_demo(tmp_path: Path, vendor_yaml: str) -> tuple[Callable[[], dict[str, str]], Recipe]:
    """demo_ext with ``vendor_yaml`` as its ``source.vendor`` list, in a root under ``tmp_path``:
    the question "what would the cibuildwheel route of its cell still download, its vendored trees
    included" (asked again after a fetch), and the recipe."""
    (tmp_path / "root" / "examples" / "demo_ext").mkdir(parents=True)
    recipe = buildroot.DEMO_RECIPE.format(arch="8.0").replace(
        "  path: examples/demo_ext\n", "  path: examples/demo_ext\n  vendor:\n" + vendor_yaml)
    config = buildroot.make_root(tmp_path / "root", {"demo_ext": recipe})
    demo = config.recipe("demo_ext")
    spec = resolve_spec(config, demo, _cell())

    def downloads() -> dict[str, str]:
        return dict(needs_of(spec, demo.source, builder="cibuildwheel", source_cache=tmp_path / "sources",
                             toolkit_root=tmp_path / "tk", cuda_home=tmp_path, env_root=tmp_path / "envs",
                             interpreter=None, vendor=demo.vendor).downloads)

    return downloads, demo


def test_a_vendored_tree_not_cached_is_a_download_of_its_archive(tmp_path) -> None:
    """The recipe's source.vendor archive (served on 127.0.0.1) is named among the cell's downloads
    until the composed tree is cached, then not."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info = tarfile.TarInfo("glm-1.0.1/glm/glm.hpp")
        tf.addfile(info, io.BytesIO(b""))
    served = tmp_path / "served"
    served.mkdir()
    (served / "glm.tar.gz").write_bytes(buf.getvalue())
    with loopback.serve(served) as base:
        downloads, demo = _vendoring_demo(
            tmp_path, f"    - path: third_party/glm\n      archive: {{url: '{base}glm.tar.gz', "
                      f"sha256: {hashlib.sha256(buf.getvalue()).hexdigest()}}}\n")
        assert downloads() == {"the vendored third_party/glm": f"{base}glm.tar.gz"}
        fetch(demo.source, tmp_path / "sources", vendor=demo.vendor)
    assert downloads() == {}


def test_a_vendored_git_tree_not_cached_is_a_download_from_its_repository(tmp_path) -> None:
    """A source.vendor git entry (``git daemon`` on 127.0.0.1) is named with its repository's URL
    until the composed tree is cached, then not."""
    commit = gitremote.one_commit_repo(tmp_path / "served" / "lib", {"lib.h": "//\n"})
    with gitremote.daemon(tmp_path / "served") as base:
        downloads, demo = _vendoring_demo(
            tmp_path, f"    - {{path: third_party/lib, git: {{repo: '{base}lib', ref: {commit}}}}}\n")
        assert downloads() == {"the vendored third_party/lib": f"{base}lib"}
        fetch(demo.source, tmp_path / "sources", vendor=demo.vendor)
    assert downloads() == {}


def test_a_vendored_git_tree_is_checked_where_git_fetches_it(tmp_path, monkeypatch) -> None:
    """A source.vendor git entry whose repository the user's ``url.<base>.insteadOf`` rewrites to a
    local clone is named with the clone, what git fetches, not with the unreachable URL the recipe
    says (the vendored CUTLASS of sageattn3 through a mirror of GitHub)."""
    with socket.socket() as closed:  # a port nobody listens on stands for GitHub out of reach
        closed.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{closed.getsockname()[1]}/o/lib.git"
    config_file = tmp_path / "gitconfig"
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config_file))
    config_file.write_text("")
    pin = "a" * 40  # never fetched: the question is only where from
    downloads, _ = _vendoring_demo(tmp_path, f"    - {{path: third_party/lib, git: {{repo: '{down}', ref: {pin}}}}}\n")
    assert downloads() == {"the vendored third_party/lib": down}
    clone = tmp_path / "mirror" / "lib.git"
    config_file.write_text(f'[url "{clone}"]\n\tinsteadOf = {down}\n')
    assert downloads() == {"the vendored third_party/lib": str(clone)}


def test_the_preflight_and_the_native_builder_refuse_a_missing_python_alike(tmp_path, monkeypatch) -> None:
    """A cell whose Python this host lacks: the preflight's refusal (the cell named explicitly) and
    the native builder's (reached without the preflight) are one message and one exit code, 2:
    what the host is. A probe that timed out is the environment's, 3, and says it timed out."""
    from farm.builder.builders import cell_interpreter
    from farm.builder.interpreters import find_interpreter
    from farm.builder.preflight import python_blocker

    empty = tmp_path / "empty"
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "none"))
    monkeypatch.setenv("FARM_NO_UV", "1")
    cell = _cell(python="cp399")
    blocker = Preflight("native", host=LINUX, uv=None).check(cell)
    assert blocker is not None
    refused = blocker.error(cell)
    with pytest.raises(FarmError) as built:
        cell_interpreter(cell)
    assert str(built.value) == str(refused)
    assert built.value.exit_code == refused.exit_code == 2
    assert f"cell {cell.id} cannot be built on this host: no Python 3.99 here (looked: " in str(refused)
    # too slow to answer: said so, exit 3
    slow = empty / "python3.99"
    empty.mkdir()
    slow.write_text("#!/bin/sh\nexec /bin/sleep 30\n")
    slow.chmod(0o755)
    late = python_blocker(find_interpreter("cp399", timeout=0.5), uv=False)
    assert late.exit_code == 3
    assert late.reason.startswith("Python 3.99 did not answer its probe within 120 s")
    assert "no Python" not in late.reason
