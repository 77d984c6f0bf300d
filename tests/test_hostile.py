"""Hostile input through the real `farm` command: every case ends in exit 2 (bad input) or 3
(environment) with a message, never a traceback, in bounded time and memory.

Servers are on 127.0.0.1: a redist mirror that stalls, trickles, lists a 4 GB archive or serves a
decompression bomb or an escaping link simulates what an unpinned mirror of NVIDIA's redist root
could do (NVIDIA's own layout: ``redistrib_X.Y.Z.json`` beside ``<comp>/<platform>/*.tar.xz``).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import json
import os
import signal
import socket
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest

from farm import cacheseal, netutil
from farm.cli import main
from farm.load.defaults import load_defaults
from farm.source import fetch
from farm.toolkit import redist
from farm.toolkit.assemble import STAMP
from farm.toolkit.request import ToolkitRequest, request_for
from tests.support import gitremote, loopback
from tests.support.buildroot import make_root

REPO = Path(__file__).resolve().parent.parent
DEEP = b"[" * 100_000 + b"]" * 100_000
CUDA = "13.0"
RELEASE = "13.0.2"
STEM = "cuda_nvcc-linux-x86_64-13.0.88-archive"


def farm(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`farm ARGV` in-process: its exit code and stderr. An uncaught exception fails the test."""
    code = main(list(argv))
    return code, capsys.readouterr().err


def refused(result: tuple[int, str], code: int, *words: str) -> None:
    rc, err = result
    assert rc == code, err
    assert "Traceback" not in err
    assert err.strip()
    for word in words:
        assert word in err, err


# ------------------------------------------------------------------------------------------ files
@pytest.mark.parametrize(("content", "words"), [
    (DEEP, ["nest deeper"]),
    (b'{"spec_version": Infinity}', ["Infinity"]),
    (b'{"spec_version": NaN}', ["NaN"]),
    (b'{"spec_version": ' + b"9" * 100_000 + b"}", ["number of 100,000 characters"]),
    (b'{"spec_version": 1e999}', ["out of range"]),
    (b'{"spec_version": 1, "cell": "\xff\xfe"}', ["not UTF-8"]),
    (b'{"spec_version": true}', ["spec_version"]),
    (b"[1, 2]", []),
], ids=["deep", "infinity", "nan", "digits", "overflow", "not-utf8", "version-true", "list"])
def test_a_hostile_spec_is_bad_input(tmp_path: Path, capsys, content: bytes, words: list[str]) -> None:
    spec = tmp_path / "build-spec.json"
    spec.write_bytes(content)
    wheel = tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"PK")
    refused(farm(capsys, "postbuild", str(wheel), "--spec", str(spec), "--out", str(tmp_path / "out")), 2,
            str(spec), *words)


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_spec_that_never_ends_is_refused_before_it_is_read(tmp_path: Path, capsys, kind: str) -> None:
    """`--spec /dev/zero` read until the OOM killer, and a FIFO nobody writes blocked farm for good;
    only a regular file is read now."""
    wheel = tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"PK")
    spec = "/dev/zero"
    if kind == "fifo":
        spec = str(tmp_path / "spec.json")
        os.mkfifo(spec)
    refused(farm(capsys, "postbuild", str(wheel), "--spec", spec, "--out", str(tmp_path / "out")), 2,
            spec, "not a regular file")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", [DEEP, b'{"cells": [], "totals": {"deferred": Infinity}}',
                                     b'{"cells": [], "totals": {"deferred": ' + b"1" * 100_000 + b"}}",
                                     b"\xff{}"], ids=["deep", "infinity", "digits", "not-utf8"])
@pytest.mark.parametrize("command", [["wave", "--reports", "."], ["slice", "--shard", "0"]], ids=["wave", "slice"])
def test_a_hostile_wave_plan_is_bad_input(tmp_path: Path, capsys, content: bytes, command: list[str]) -> None:
    plan = tmp_path / "plan.json"
    plan.write_bytes(content)
    refused(farm(capsys, command[0], "--plan", str(plan), *command[1:]), 2, str(plan))


@pytest.mark.parametrize("command", [["slice", "--shard", "0"],
                                     ["publish-shard", "--shard", "0", "--run-id", "1", "--report", "r.jsonl"]],
                         ids=["slice", "publish-shard"])
def test_a_wave_plan_that_is_a_fifo_is_refused_at_once(tmp_path: Path, capsys, monkeypatch,
                                                       command: list[str]) -> None:
    """A FIFO nobody writes blocked the reader for good."""
    monkeypatch.chdir(tmp_path)
    plan = tmp_path / "plan.json"
    os.mkfifo(plan)
    refused(farm(capsys, command[0], "--plan", str(plan), *command[1:]), 2, str(plan), "not a regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


# ------------------------------------------------------------------------------------- toolkit flags
@pytest.mark.parametrize(("flags", "words"), [
    (["--release", "13.0.2/../../../../tmp/x"], ["--release", "is not a CUDA 13.0 release"]),
    (["--release", "13.0.banana"], ["13.0.banana"]),
    (["--release", "12.8.1"], ["12.8.1"]),
    (["--redist-url", "::::"], ["--redist-url", "::::"]),
    (["--redist-url", "http://127.0.0.1:notaport/"], ["--redist-url"]),
    (["--redist-url", "ftp://mirror/"], ["--redist-url"]),
])
def test_a_toolkit_flag_is_checked_like_its_config_twin(tmp_path: Path, capsys, flags: list[str],
                                                        words: list[str]) -> None:
    before = set(Path("/tmp").iterdir())
    refused(farm(capsys, "toolkit", "--cuda", CUDA, "--source", "redist", "--root", str(REPO),
                 "--prefix", str(tmp_path / "tk"), *flags), 2, *words)
    assert not (tmp_path / "tk").exists()
    assert not {p for p in set(Path("/tmp").iterdir()) - before if p.name == "x"}


# --------------------------------------------------------------------------- planted toolkit stamps
def _request(url: str) -> ToolkitRequest:
    return request_for(load_defaults(REPO / "_defaults.yml").toolkit, CUDA, source="redist", redist_url=url)


def _script(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


NVCC_12_8 = "#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n"


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed"])
@pytest.mark.parametrize("plant", ["no-nvcc", "home-5", "home-outside", "home-link-outside", "components",
                                   "empty-tools", "claims-13.0-runs-12.8", "claims-12.8", "not-json", "deep"])
def test_a_planted_toolkit_stamp_is_never_believed(tmp_path: Path, capsys, plant: str, sealed: bool) -> None:
    """A stamp CI restored (or anyone with push access planted) is not sealed with this user's key;
    and one that is (the user's own, a leaked key) but that the toolkit does not bear out is not
    believed either. The toolkit is assembled again: here from a mirror that cannot be reached, so
    the command ends in exit 3 naming the mirror; it never hands out the planted CUDA_HOME, and
    never a traceback."""
    url = "http://127.0.0.1:9/"
    request = _request(url)
    prefix = tmp_path / "tk"
    outside = tmp_path / "elsewhere"
    _script(outside / "bin" / "nvcc", "#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    _script(outside / "bin" / "cuobjdump", "#!/bin/sh\necho cuobjdump\n")
    stamp: object = {"key": request.key(), "cuda": CUDA, "home": "cuda", "nvcc": "13.0.88", "components": []}
    assert isinstance(stamp, dict)
    home = prefix / "cuda"
    if plant == "no-nvcc":
        _script(home / "bin" / "cuobjdump", "#!/bin/sh\necho cuobjdump\n")
        del stamp["nvcc"]
    elif plant == "home-5":
        stamp["home"] = 5
    elif plant == "home-outside":
        stamp["home"] = "../elsewhere"
    elif plant == "home-link-outside":
        prefix.mkdir()
        home.symlink_to(outside)
    elif plant == "components":
        stamp["components"] = [{"name": 5}, "garbage"]
        _script(home / "bin" / "nvcc", (outside / "bin" / "nvcc").read_text())
        _script(home / "bin" / "cuobjdump", "#!/bin/sh\necho cuobjdump\n")
    elif plant == "empty-tools":
        _script(home / "bin" / "nvcc", "")
        _script(home / "bin" / "cuobjdump", "")
    elif plant == "claims-13.0-runs-12.8":
        _script(home / "bin" / "nvcc", NVCC_12_8)
        _script(home / "bin" / "cuobjdump", "#!/bin/sh\necho cuobjdump\n")
    elif plant == "claims-12.8":
        stamp["nvcc"] = "12.8.93"
        _script(home / "bin" / "nvcc", NVCC_12_8)
        _script(home / "bin" / "cuobjdump", "#!/bin/sh\necho cuobjdump\n")
    prefix.mkdir(exist_ok=True)
    content = {"not-json": b"\xff\x00 not json", "deep": DEEP}.get(plant, json.dumps(stamp).encode())
    (prefix / STAMP).write_bytes(cacheseal.seal(content, f"toolkit-stamp:{prefix.name}") if sealed else content)
    rc, err = farm(capsys, "toolkit", "--cuda", CUDA, "--source", "redist", "--redist-url", url,
                   "--root", str(REPO), "--prefix", str(prefix))
    refused((rc, err), 3, "http://127.0.0.1:9/redistrib_13.0.2.json")
    assert str(outside) not in capsys.readouterr().out


# ----------------------------------------------------------------------------------- redist mirror
def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=0) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


def _link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


def _mirror(root: Path, archive: bytes, *, size: int | None = None) -> None:
    """An unpinned mirror in NVIDIA's layout whose one component is ``archive``."""
    rel = f"cuda_nvcc/linux-x86_64/{STEM}.tar.xz"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(archive)
    manifest: dict[str, object] = {"release_label": RELEASE, "cuda_nvcc": {
        "name": "CUDA NVCC", "version": "13.0.88",
        "linux-x86_64": {"relative_path": rel, "sha256": hashlib.sha256(archive).hexdigest(),
                         "size": str(size if size is not None else len(archive))}}}
    for other in _request("http://127.0.0.1/").components[1:]:  # listed, never reached
        manifest[other] = {"name": other, "version": "13.0.88", "linux-x86_64": {
            "relative_path": f"{other}/linux-x86_64/{other}-linux-x86_64-13.0.88-archive.tar.xz",
            "sha256": "0" * 64, "size": "100"}}
    (root / f"redistrib_{RELEASE}.json").write_text(json.dumps(manifest))


def _toolkit(capsys, url: str, prefix: Path) -> tuple[int, str]:
    return farm(capsys, "toolkit", "--cuda", CUDA, "--source", "redist", "--redist-url", url, "--root", str(REPO),
                "--prefix", str(prefix))


class _Counting(loopback.QuietHandler):
    archives: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        if self.path.endswith(".tar.xz"):
            type(self).archives.append(self.path)
        super().do_GET()


def test_an_unpinned_mirror_listing_a_4_gb_archive_is_refused_before_downloading(tmp_path: Path, capsys) -> None:
    _mirror(tmp_path / "m", _tar([(_file(f"{STEM}/bin/nvcc", 3), b"abc")]), size=4_000_000_000)
    _Counting.archives = []
    with loopback.serve(tmp_path / "m", _Counting) as url:
        refused(_toolkit(capsys, url, tmp_path / "tk"), 3, "4,000,000,000 bytes", "nothing was downloaded")
    assert _Counting.archives == []


def test_a_decompression_bomb_is_refused_before_it_is_written(tmp_path: Path, capsys) -> None:
    """A 512 MB member in an archive of a few KB: refused from its header, nothing unpacked."""
    _mirror(tmp_path / "m", _bomb())
    with loopback.serve(tmp_path / "m") as url:
        refused(_toolkit(capsys, url, tmp_path / "tk"), 3, "unpacks to more than")
    assert not any(p.is_file() and p.stat().st_size > (1 << 20) for p in tmp_path.rglob("*"))


def _bomb() -> bytes:
    """A real 512 MB member of zeros in an .xz of about 150 KB: one xz stream per MiB, concatenated
    as the format allows (``xz -d`` and Python's reader read them as one), so it is made in
    milliseconds rather than by compressing 512 MB."""
    import lzma

    header = _file(f"{STEM}/bin/nvcc", 512 << 20).tobuf(tarfile.GNU_FORMAT)
    mib = lzma.compress(bytes(1 << 20), preset=0)
    return lzma.compress(header, preset=0) + mib * 512 + lzma.compress(bytes(1024), preset=0)  # the archive's end


def test_a_link_that_leaves_cuda_home_once_the_top_folder_is_stripped_is_refused(tmp_path: Path, capsys) -> None:
    """``bin/x -> ../../<top>/bin/y`` stays in the archive, but in CUDA_HOME (top folder stripped)
    it points above CUDA_HOME: checked on the final layout, refused before anything is unpacked."""
    archive = _tar([(_file(f"{STEM}/bin/y", 1), b"y"), (_link(f"{STEM}/bin/x", f"../../{STEM}/bin/y"), None)])
    _mirror(tmp_path / "m", archive)
    with loopback.serve(tmp_path / "m") as url:
        refused(_toolkit(capsys, url, tmp_path / "tk"), 3, "links outside the toolkit", f"{STEM}/bin/x")


def _slow_server(handler: Callable[[http.server.BaseHTTPRequestHandler], None]) -> type:
    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            handler(self)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Slow


def test_a_stalled_manifest_names_its_url(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(redist, "_TIMEOUT", 0.5)
    done = threading.Event()

    def stall(req: http.server.BaseHTTPRequestHandler) -> None:
        done.wait(10)

    with loopback.serve(handler=_slow_server(stall)) as url:
        started = time.monotonic()
        refused(_toolkit(capsys, url, tmp_path / "tk"), 3, f"{url}redistrib_{RELEASE}.json")
        done.set()
    assert time.monotonic() - started < 5


def test_a_trickling_archive_server_ends_at_the_deadline(tmp_path: Path, capsys, monkeypatch) -> None:
    """One byte every 0.3 s, each well within the stall timeout (1 s): the overall deadline (2 s
    here, five minutes or more in use) ends the download, naming the URL."""
    archive = _tar([(_file(f"{STEM}/bin/nvcc", 3), b"abc")])
    _mirror(tmp_path / "m", archive)
    manifest = (tmp_path / "m" / f"redistrib_{RELEASE}.json").read_bytes()
    monkeypatch.setattr(redist, "_TIMEOUT", 1.0)
    monkeypatch.setattr(netutil, "DEADLINE", 2.0)
    stop = threading.Event()

    def trickle(req: http.server.BaseHTTPRequestHandler) -> None:
        body = manifest if req.path.endswith(".json") else archive
        req.send_response(200)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        if req.path.endswith(".json"):
            req.wfile.write(body)
            return
        for byte in body:
            if stop.wait(0.3):
                return
            try:
                req.wfile.write(bytes([byte]))
                req.wfile.flush()
            except OSError:
                return

    with loopback.serve(handler=_slow_server(trickle)) as url:
        started = time.monotonic()
        refused(_toolkit(capsys, url, tmp_path / "tk"), 3, "did not finish within 2 s", STEM)
        elapsed = time.monotonic() - started
        stop.set()
    assert elapsed < 4


# ------------------------------------------------------------------------------------- git source
GIT_RECIPE = """\
name: big
version: '1.0'
source:
  git: {{repo: '{url}', ref: v1}}
links_torch: false
arch:
  list: '8.0'
"""


def _lint_git(capsys, tmp_path: Path, url: str) -> tuple[int, str]:
    make_root(tmp_path / "farm", {"big": GIT_RECIPE.format(url=url)})
    return farm(capsys, "lint", "big", "--root", str(tmp_path / "farm"), "--cache-dir", str(tmp_path / "cache"))


def test_a_git_source_larger_than_the_cap_is_stopped_and_nothing_cached(tmp_path: Path, capsys,
                                                                       monkeypatch) -> None:
    """``git daemon`` on 127.0.0.1 serves a repository of 3 MiB (random bytes: the pack is as large);
    with the cap at 1 MiB the fetch is stopped, naming the repository, the ref and what to do."""
    repo = tmp_path / "served" / "big"
    repo.mkdir(parents=True)
    gitremote.git(repo, "init", "-q", "-b", "main")
    (repo / "setup.py").write_text("# big\n")
    (repo / "blob.bin").write_bytes(os.urandom(3 << 20))
    gitremote.git(repo, "add", ".")
    gitremote.git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "v1")
    gitremote.git(repo, "tag", "v1")
    monkeypatch.setattr(fetch, "GIT_MAX_BYTES", 1 << 20)
    with gitremote.daemon(tmp_path / "served") as base:
        refused(_lint_git(capsys, tmp_path, f"{base}big"), 3, "package 'big'", f"{base}big at v1",
                "passed 1 MiB", "nothing was cached", "check the recipe's repo and ref")
        git = tmp_path / "cache" / "git"
        assert not [p.name for p in git.iterdir() if not p.name.endswith(".lock")]  # no tree, no ref pointer
        monkeypatch.setattr(fetch, "GIT_MAX_BYTES", 8 << 20)  # the same repository under a cap it fits
        assert _lint_git(capsys, tmp_path, f"{base}big")[0] == 0


def test_a_git_server_that_never_answers_ends_at_the_deadline(tmp_path: Path, capsys, monkeypatch) -> None:
    """A git:// server on 127.0.0.1 that accepts the connection and never sends a byte (git has no
    timeout of its own): the fetch ends at farm's deadline (2 s here, 30 minutes in use)."""
    monkeypatch.setattr(fetch, "GIT_DEADLINE", 2.0)
    held: list[socket.socket] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        port = server.getsockname()[1]

        def accept() -> None:
            with contextlib.suppress(OSError):
                held.append(server.accept()[0])

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        started = time.monotonic()
        refused(_lint_git(capsys, tmp_path, f"git://127.0.0.1:{port}/big"), 3, "package 'big'",
                f"git://127.0.0.1:{port}/big at v1", "did not finish within 2 s", "nothing was cached")
        elapsed = time.monotonic() - started
        thread.join(timeout=10)
        for conn in held:
            conn.close()
    assert elapsed < 6


@pytest.mark.usefixtures("terminal_sigint")
def test_an_interrupted_git_fetch_stops_git(tmp_path: Path, capsys) -> None:
    """SIGINT (Ctrl-C) while git waits on a server that never answers (127.0.0.1, as above, far
    from the deadline): farm exits 130 and no git process of the fetch is left running."""
    held: list[socket.socket] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(60)
        port = server.getsockname()[1]

        done = threading.Event()

        def accept_then_interrupt() -> None:
            # the signal comes in any case while farm runs: a git that has not connected within the
            # minute fails the test below (``held``) instead of holding it until farm's git deadline
            with contextlib.suppress(OSError):
                held.append(server.accept()[0])  # git is connected and waiting
                time.sleep(0.5)
            if not done.is_set():
                os.kill(os.getpid(), signal.SIGINT)

        thread = threading.Thread(target=accept_then_interrupt, daemon=True)
        thread.start()
        code, err = _lint_git(capsys, tmp_path, f"git://127.0.0.1:{port}/big")
        done.set()
        thread.join(timeout=70)
        for conn in held:
            conn.close()
    assert held, "git did not connect to 127.0.0.1 within 60 s"  # it had, when the signal came
    assert code == 130
    assert "interrupted" in err
    url = f"127.0.0.1:{port}".encode()
    left = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if url in (entry / "cmdline").read_bytes() and (entry / "stat").read_text().split(") ")[1][0] not in "ZX":
                left.append(entry.name)
    assert left == []


# ------------------------------------------------------------------------------------------- lint
def test_an_unusable_cache_folder_costs_time_never_the_verdict(tmp_path: Path, capsys) -> None:
    """A cache folder that is a file (or unwritable): the lint answers as without a cache."""
    src = REPO / "tests" / "data" / "lint" / "sage_fp8"
    blocked = tmp_path / "cache"
    blocked.write_text("not a folder")
    args = ["lint", str(src), "--arch-list", "8.0;8.6;9.0+PTX"]
    fresh = farm(capsys, *args, "--cache-dir", str(tmp_path / "fresh"))
    assert fresh[0] == 1
    assert farm(capsys, *args, "--cache-dir", str(blocked))[0] == fresh[0]


def test_a_redist_root_from_the_environment_is_checked_too(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("FARM_CUDA_REDIST_URL", "::::")
    refused(farm(capsys, "toolkit", "--cuda", CUDA, "--source", "redist", "--root", str(REPO),
                 "--prefix", str(tmp_path / "tk")), 2, "$FARM_CUDA_REDIST_URL", "::::")


@pytest.mark.parametrize("index", ["::::", "http://:80/", "pypi.org/simple"])
def test_a_grid_index_that_is_not_a_url_is_bad_input(capsys, index: str) -> None:
    refused(farm(capsys, "grid", "--root", str(REPO), "--cuda", CUDA, "--index", index), 2, "--index")


# ------------------------------------------------------------------------------- shard done files
@pytest.mark.parametrize("done", [b"[1, 2, 3]", b'{"cell": "x", "objects": 5}', b'{"objects": [5]}', DEEP,
                                  b'{"count": Infinity}', b"\xff"],
                         ids=["list", "objects-5", "objects-ints", "deep", "infinity", "not-utf8"])
def test_a_hostile_shard_record_is_bad_input_at_the_link_job(tmp_path: Path, capsys, cuda_home: Path,
                                                            done: bytes) -> None:
    """`farm build --link` reads each compile shard's ``done-<i>.json`` from a downloaded artifact:
    whatever it holds ends in exit 2 naming the file, before anything is compiled or linked."""
    from tests.test_shard import CELL, _root

    _root(tmp_path)
    objects = tmp_path / "shards" / CELL.id / "objects"
    objects.mkdir(parents=True)
    (objects / "done-0.json").write_bytes(done)
    refused(farm(capsys, "build", "shard_ext", "--root", str(tmp_path), "--builder", "native", "--cuda", "13.0",
                 "--python", "3.11", "--platform", "linux_x86_64", "--cuda-home", str(cuda_home), "--link",
                 "--shard-dir", str(tmp_path / "shards"), "--out", str(tmp_path / "out")), 2, "done-0.json")


@pytest.mark.parametrize("device", ["../x", "banana", "8.9.9.9"])
def test_a_device_that_is_not_a_compute_capability_is_a_usage_error(capsys, device: str) -> None:
    with pytest.raises(SystemExit) as info:  # argparse's own usage error
        main(["explain", "8.0", "--device", device])
    assert info.value.code == 2
    assert "is not a compute capability" in capsys.readouterr().err


@pytest.mark.parametrize("shard", ["", " ", "0/2/", "a/b"])
def test_an_empty_or_malformed_shard_is_bad_input_not_a_full_build(tmp_path: Path, capsys, cuda_home: Path,
                                                                   shard: str) -> None:
    """`--shard ""` ran a full unsharded build with exit 0; it is a shard that does not parse."""
    from tests.test_shard import _root

    _root(tmp_path)
    refused(farm(capsys, "build", "shard_ext", "--root", str(tmp_path), "--builder", "native", "--cuda", "13.0",
                 "--python", "3.11", "--platform", "linux_x86_64", "--cuda-home", str(cuda_home), "--shard", shard,
                 "--out", str(tmp_path / "out")), 2, "--shard", "is not I/N")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("provenance", [DEEP, b'{"schema_version": ' + b"9" * 100_000 + b"}",
                                        b'{"schema_version": Infinity}', b"\xff{}"],
                         ids=["deep", "digits", "infinity", "not-utf8"])
def test_a_wheel_with_hostile_provenance_is_refused_by_the_gate(tmp_path: Path, capsys, provenance: bytes) -> None:
    """A wheel's ``_build_info.json`` crosses a job boundary: the gate refuses the wheel (exit 1,
    `upload refused`, the command-line contract for the gate's verdict) naming it, never a traceback."""
    from tests.support.wheelmaker import make_wheel

    wheel = make_wheel(tmp_path / "dist", "demo", "1.0", {
        "demo/__init__.py": b"", "demo-1.0.dist-info/_build_info.json": provenance})
    root = tmp_path / "farm"
    (root / "packages").mkdir(parents=True)
    (root / "_defaults.yml").write_bytes((REPO / "_defaults.yml").read_bytes())
    (root / "ledger.jsonl").write_text("")
    refused(farm(capsys, "upload", str(tmp_path / "dist"), "--root", str(root), "--target", "index"), 1,
            wheel.name, "_build_info.json is not JSON farm reads")
    assert (root / "ledger.jsonl").read_text() == ""


@pytest.mark.parametrize("command", ["matrix", "audit"])
def test_a_ledger_line_that_never_ends_is_refused_naming_it(tmp_path: Path, capsys, command: str) -> None:
    """A 20 MB line (no newline) on line 2: refused after the cap, never held whole."""
    from farm.provenance.ledgerline import dumps_entry
    from tests.support.ledgermaker import make_entry
    from tests.test_matrix import make_tree

    root = make_tree(tmp_path / "farm")
    (root / "ledger.jsonl").write_bytes(dumps_entry(make_entry()).encode() + b"\n" + b"x" * (20 << 20))
    args = ["--root", str(root), "--no-lint"] if command == "matrix" else ["--from-ledger", "--root", str(root)]
    refused(farm(capsys, command, *args), 2, "ledger.jsonl:2", "longer than 8,388,608 bytes")


@pytest.mark.parametrize("command", ["postbuild", "assert"])
@pytest.mark.parametrize(("flags", "words"), [
    (["--cuda", "13.0/../x", "--torch", "none"], ["unknown CUDA line '13.0/../x'"]),
    (["--cuda", "13.1", "--torch", "none"], ["unknown CUDA line '13.1'", "did you mean"]),
])
def test_a_cell_flag_is_checked_like_its_config_twin(tmp_path: Path, capsys, command: str, flags: list[str],
                                                     words: list[str]) -> None:
    """--cuda names the cell (its id, its wheel label): only a line the config has."""
    wheel = tmp_path / "demo_ext-0.1.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"PK")
    extra = ["--out", str(tmp_path / "out")] if command == "postbuild" else ["--cell"]
    refused(farm(capsys, command, str(wheel), "--root", str(REPO), *flags, *extra), 2, *words)
    assert not (tmp_path / "out").exists()
