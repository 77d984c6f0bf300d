"""The ``farm`` dispatcher: the exit codes (0 ok, 1 defects, 2 bad input, 3 environment) for the
command line itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from farm.cli import COMMANDS, main
from farm.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT
from tests.support.cudafix import CudaFixtures
from tests.support.wheelmaker import make_wheel


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_BAD_INPUT
    assert "commands:" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["nosuch"], ["--bogus"], ["matrix", "--bogus"]])
def test_unknown_commands_and_flags_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == EXIT_BAD_INPUT


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["--version"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)
    assert "exit codes" in out


def test_json_errors_are_a_json_object_on_stdout_too(capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parent.parent
    assert main(["matrix", "no_such_package", "--root", str(root), "--json"]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert "unknown package 'no_such_package'" in captured.err
    doc = json.loads(captured.out)
    assert doc["ok"] is False
    assert doc["error"]["exit_code"] == EXIT_BAD_INPUT
    assert doc["error"]["command"] == "matrix"
    assert "no_such_package" in doc["error"]["message"]


def _one_json_error(out: str, command: str | None, code: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(out)  # the whole of stdout: one object, nothing before or after it
    assert doc["ok"] is False
    assert doc["error"]["command"] == command
    assert doc["error"]["exit_code"] == code
    return doc


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_takes_json(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--json` on every command, and a usage error under it is one JSON object on stdout as
    well as argparse's usage and message on stderr."""
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    assert "--json" in capsys.readouterr().out
    for argv in ([name, "--json", "--no-such-option"], [name, "--no-such-option", "--js"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == EXIT_BAD_INPUT
        captured = capsys.readouterr()
        assert captured.err.startswith("usage: farm "), captured.err
        doc = _one_json_error(captured.out, name, EXIT_BAD_INPUT)
        message = str(doc["error"]["message"])
        assert "--no-such-option" in message or "required" in message, message  # argparse names the first


def _bad_input(name: str, tmp: Path) -> list[str]:
    """A command line of ``name`` that fails inside the command (not in argparse)."""
    missing, none = str(tmp / "missing"), str(tmp / "none")
    return {
        "matrix": ["--root", missing], "lint": ["pkg", "--root", missing], "build": ["pkg", "--root", missing],
        "postbuild": [str(tmp / "x.whl"), "--out", str(tmp / "out")],
        "assert": [str(tmp / "x.whl"), "--arch", "8.0"], "inspect": [str(tmp / "x.so")], "explain": ["sm_999"],
        "doctor": ["--python", missing], "upload": [missing, "--root", missing], "index": [missing],
        "audit": [missing, "--root", missing], "backfill": [missing, "--root", missing], "grid": ["--root", missing],
        "toolkit": ["--cuda", "9.9", "--root", missing], "slice": ["--plan", missing, "--shard", "0"],
        "publish-shard": ["--plan", missing, "--shard", "0", "--run-id", "1", "--report", none, "--root", missing],
        "wave": ["--plan", missing, "--reports", none], "chain": ["--ref", "main", "--repository", "not a repo"],
        "cache-plan": ["--root", missing], "cache": ["prune", "--root", missing],
        "simulate": ["--runners", "4", "--root", missing], "rebuild": [str(tmp / "x.whl"), "--root", missing],
        "attestation": ["check", str(tmp / "x.whl"), "--repository", "o/r"],
    }[name]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_commands_errors_are_one_json_object(name: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main([name, *_bad_input(name, tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code in (1, 2, 3), captured
    _one_json_error(captured.out, name, code)
    assert captured.err.startswith(f"farm {name}: error: ")


def test_a_usage_error_before_any_command_is_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["nosuch", "--json"], ["--json"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == EXIT_BAD_INPUT
        _one_json_error(capsys.readouterr().out, None, EXIT_BAD_INPUT)
    assert main(["explain", "--", "--json"]) == EXIT_BAD_INPUT  # after --, --json is the argument, not the flag
    assert capsys.readouterr().out == ""


def _console(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    """The console script's path (``python -m farm.cli`` runs :func:`farm.cli.console`)."""
    streams = kwargs or {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    proc: subprocess.CompletedProcess[bytes] = subprocess.run(  # type: ignore[call-overload]
        [sys.executable, "-m", "farm.cli", *argv], check=False, **streams)
    return proc


@pytest.mark.parametrize("flags", [[], ["--json"], ["--json", "--stubs"]])
def test_the_console_script_prints_what_main_prints(
    cuda_fixtures: CudaFixtures, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    """The console script's output and exit code are those of :func:`main`, a bad file among good
    ones included."""
    argv = ["inspect", *flags, str(cuda_fixtures.path("rdc")), str(cuda_fixtures.path("bad-magic"))]
    code = main(argv)
    expected = capsys.readouterr()
    proc = _console(*argv)
    assert (proc.returncode, proc.stdout.decode(), proc.stderr.decode()) == (code, expected.out, expected.err)
    assert code == EXIT_BAD_INPUT


def test_the_console_script_into_a_closed_pipe_is_not_an_error(cuda_fixtures: CudaFixtures) -> None:
    """``farm inspect LIB | head -0``: the reader left before the output was written."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = _console("inspect", str(cuda_fixtures.path("rdc")), stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (0, b"")


@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_the_console_script_onto_a_full_disk_fails(cuda_fixtures: CudaFixtures, flags: list[str]) -> None:
    """Whether the output fills the buffer inside the command or is flushed on the way out."""
    with open("/dev/full", "wb") as full:
        for paths in ([cuda_fixtures.path("default")], [cuda_fixtures.path("rdc")] * 200):
            proc = _console("inspect", *flags, *map(str, paths), stdout=full, stderr=subprocess.PIPE)
            assert proc.returncode == EXIT_ENVIRONMENT
            assert b"no space left on the device" in proc.stderr
            assert b"Traceback" not in proc.stderr


def test_the_console_script_leaves_no_temporary_file(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    """A wheel's members are extracted to temporary files: they are gone when the command exits."""
    wheel = make_wheel(tmp_path / "in", "demo", "1.0", {"demo/_C.so": cuda_fixtures.path("rdc"),
                                                        "demo.libs/libk.so.1": cuda_fixtures.path("default")})
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    for flags in ([], ["--json", "--stubs"]):
        proc = _console("inspect", *flags, str(wheel), env={**os.environ, "TMPDIR": str(scratch)},
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.returncode == 0
        assert b"demo/_C.so" in proc.stdout
    assert list(scratch.iterdir()) == []
