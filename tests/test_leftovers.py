"""Operators' accidents: a run killed mid-write leaves temp files that the next run of the same
command removes (never taken as output), and a full disk or an unwritable folder is an
environment error (exit 3) that names the path and the remedy."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.errors import FileSystemError
from farm.fsutil import atomic_write, sweep_leftovers
from farm.provenance.buildinfo import inferred_build_info
from farm.provenance.crawl import Scratch, _stream
from farm.provenance.stamp import stamp_wheel
from tests.support.wheelmaker import make_wheel

REPO = Path(__file__).resolve().parent.parent

STAMP = """
import sys
from pathlib import Path
from farm.provenance.buildinfo import inferred_build_info
from farm.provenance.stamp import stamp_wheel
info = inferred_build_info(dist="demo", version="1.0", cell={}, found={}, extensions={})
stamp_wheel(Path(sys.argv[1]), Path(sys.argv[2]), local="cu130", build_tag=None, build_info=info)
"""


def _big_wheel(tmp_path: Path, size: int = 96 << 20) -> Path:
    return make_wheel(tmp_path / "raw", "big", "1.0", {"big/blob.bin": os.urandom(size), "big/__init__.py": b""})


@pytest.mark.slow  # writes and stamps a 96 MiB wheel twice
def test_a_killed_stamp_is_swept_by_the_next_run(tmp_path: Path) -> None:
    wheel = _big_wheel(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", STAMP, str(wheel), str(out)], cwd=REPO)
    deadline = time.monotonic() + 60
    parts: list[Path] = []
    while not parts and time.monotonic() < deadline and proc.poll() is None:
        parts = list(out.glob(".*.part")) if out.is_dir() else []
        time.sleep(0.001)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert parts, "the stamp finished before it could be killed: make the wheel bigger"
    assert list(out.glob(".*.part")), "a killed stamp leaves its temp file"
    assert not list(out.glob("*.whl"))  # ... which is never taken as a wheel

    rerun = subprocess.run([sys.executable, "-c", STAMP, str(wheel), str(out)], cwd=REPO, check=False)
    assert rerun.returncode == 0
    assert [p.name for p in out.iterdir()] == ["big-1.0+cu130-cp311-cp311-linux_x86_64.whl"]


def test_a_live_writers_temp_file_is_left_alone(tmp_path: Path) -> None:
    mine = tmp_path / f".x.whl.{os.getpid()}.abc123.part"
    mine.write_bytes(b"in progress")
    dead = tmp_path / ".x.whl.999999999.abc123.part"  # no such pid
    dead.write_bytes(b"left behind")
    other = tmp_path / ".notes.tmp"  # not a farm temp name
    other.write_bytes(b"")
    assert sweep_leftovers(tmp_path) == [dead]
    assert mine.exists()
    assert other.exists()


@contextlib.contextmanager
def _small_filesystem(tmp_path: Path, options: str = "size=2m") -> Iterator[Path]:
    """A real 2 MiB tmpfs where the test may mount one (root on Linux)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)],
                                           capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a small filesystem here (needs root); test_disk_full_simulated covers it")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_disk_full_names_the_path_and_the_remedy_on_a_real_full_filesystem(tmp_path: Path) -> None:
    wheel = _big_wheel(tmp_path, 4 << 20)
    with _small_filesystem(tmp_path) as mnt:
        out = mnt / "dist"
        info = inferred_build_info(dist="demo", version="1.0", cell={}, found={}, extensions={})
        with pytest.raises(FileSystemError) as exc:
            stamp_wheel(wheel, out, local="cu130", build_tag=None, build_info=info)
        assert exc.value.exit_code == 3
        text = str(exc.value)
        assert "no space left on the device" in text
        assert str(out) in text
        assert "df -h" in text
        assert not list(out.iterdir()), "nothing half-written is left"


def test_disk_full_through_the_command_line(tmp_path: Path) -> None:
    with _small_filesystem(tmp_path) as mnt:
        (mnt / "idx" / "files").mkdir(parents=True)
        # `farm index` writes pages: fill the disk first, so the first page write fails
        with contextlib.suppress(OSError):
            (mnt / "filler").write_bytes(os.urandom(3 << 20))
        proc = subprocess.run([sys.executable, "-m", "farm.cli", "index", str(mnt / "idx"), "--root", str(REPO),
                               "--json"], cwd=tmp_path, capture_output=True, text=True, check=False)
        assert proc.returncode == 3, proc.stderr
        assert "no space left on the device" in proc.stderr
        assert str(mnt / "idx") in proc.stderr
        assert "Traceback" not in proc.stderr
        assert '"exit_code": 3' in proc.stdout  # --json: the error as an object on stdout too


def test_disk_full_simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(FileSystemError, match="no space left on the device") as exc:
        atomic_write(tmp_path / "ledger.jsonl", [b"x"])
    assert str(tmp_path / "ledger.jsonl") in str(exc.value)
    assert not list(tmp_path.iterdir())


def test_unwritable_folder_names_the_folder(tmp_path: Path) -> None:
    if os.geteuid() != 0:  # a folder without write permission
        locked = tmp_path / "ro"
        locked.mkdir(mode=0o500)
        with pytest.raises(FileSystemError, match="permission denied") as exc:
            atomic_write(locked / "x", [b"x"])
        assert f"ls -ld {locked}" in str(exc.value)
        return
    with _small_filesystem(tmp_path, "size=1m,ro") as locked:  # root writes anywhere but here
        with pytest.raises(FileSystemError, match="read-only filesystem") as exc:
            atomic_write(locked / "x", [b"x"])
        assert exc.value.exit_code == 3
        assert f"ls -ld {locked}" in str(exc.value)


def test_a_killed_audits_downloads_are_swept_by_the_next_audit(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    dead = scratch / "farm-audit-999999999-abc123"  # no such pid: a killed audit's folder
    dead.mkdir(parents=True)
    (dead / "half.whl").write_bytes(b"\0" * 1024)
    live = scratch / f"farm-audit-{os.getpid()}-xyz"  # a running audit's (this process)
    live.mkdir()
    assert list(_stream(iter(()), Scratch(scratch), 1.0, None)) == []
    assert not dead.exists()
    assert live.exists()
