"""The ``farm`` dispatcher: exit codes of DESIGN §6 for the command line itself."""

from __future__ import annotations

import pytest

from farm.cli import COMMANDS, main
from farm.errors import EXIT_BAD_INPUT


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
    assert all(name in out for name in COMMANDS) and "exit codes" in out


def test_json_errors_are_a_json_object_on_stdout_too(capsys: pytest.CaptureFixture[str]) -> None:
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    assert main(["matrix", "no_such_package", "--root", str(root), "--json"]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert "unknown package 'no_such_package'" in captured.err
    doc = json.loads(captured.out)
    assert doc["ok"] is False
    assert doc["error"]["exit_code"] == EXIT_BAD_INPUT and doc["error"]["command"] == "matrix"
    assert "no_such_package" in doc["error"]["message"]
