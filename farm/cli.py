"""The ``farm`` command line: a thin dispatcher over the library.

Each command lives in ``farm/commands/<name>.py`` with ``configure(parser)`` and
``run(args) -> int``; it is imported only when called, so ``farm matrix`` does not pay for the
wheel or upload code.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import TYPE_CHECKING, NoReturn

from farm import __version__
from farm.errors import EXIT_BAD_INPUT, MAX_MESSAGE, FarmError, Interrupted, UsageError, clip, os_error, redact

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType

# name -> (module, one-line help). Only commands whose capability exists are listed.
COMMANDS: dict[str, tuple[str, str]] = {
    "matrix": ("farm.commands.matrix", "cells to build, with stale and skipped counts"),
    "lint": ("farm.commands.lint", "the arch-gate lint on a recipe's source, or on a source tree with a given list"),
    "build": ("farm.commands.build", "plan and run builds (cibuildwheel or native), then postbuild"),
    "postbuild": ("farm.commands.postbuild", "assert, relabel + stamp _build_info.json, write ledger fragments"),
    "assert": ("farm.commands.assert_", "the post-build assertion alone: found arches == expected, per extension"),
    "inspect": ("farm.commands.inspect", "per .so (or every .so in a wheel): fatbins and their entries"),
    "explain": ("farm.commands.explain", "per device capability: the image the driver picks, or none"),
    "doctor": ("farm.commands.doctor", "will the installed CUDA extensions run on this GPU, driver and torch?"),
    "upload": ("farm.commands.upload", "gate every wheel, publish to the targets, merge fragments into the ledger"),
    "index": ("farm.commands.index", "regenerate a static PEP 503 index tree from its files and the ledger"),
    "audit": ("farm.commands.audit", "judge published wheels against their own provenance"),
    "backfill": ("farm.commands.backfill", "record inferred ledger entries for wheels without provenance"),
    "attestation": ("farm.commands.attestation", "record a published wheel's signed provenance, or check what it says"),
    "rebuild": ("farm.commands.rebuild", "a wheel's cell built again from its provenance: the same file, or the diff"),
    "grid": ("farm.commands.grid", "the grid against PyTorch's published wheel index: rows and phantoms to add"),
    "toolkit": ("farm.commands.toolkit", "a verified CUDA_HOME from NVIDIA's redistributable archives or PyPI wheels"),
    "slice": ("farm.commands.slice", "one shard's build entries from a wave's plan (the shard jobs' matrix)"),
    "publish-shard": ("farm.commands.publish_shard", "publish one build shard's wheels, one artifact at a time"),
    "wave": ("farm.commands.wave", "after a run's publishes: what was published, what failed, next wave?"),
    "chain": ("farm.commands.chain", "dispatch the next wave, merged with the run already waiting"),
    "cache-plan": ("farm.commands.cache_plan", "the Actions cache plan: each cache key's measured size against 10 GB"),
    "cache": ("farm.commands.cache", "prune the build caches: toolkits, environments, sources no recent cell uses"),
    "ledger": ("farm.commands.ledger", "the ledger's files: migrate a single ledger.jsonl into ledger/, check sizes"),
    "simulate": ("farm.commands.simulate", "an epoch bump drained on a simulated GitHub: days, waste, limits, goals"),
}


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors (exit 2) are also one JSON object on stdout when the command
    line asks for ``--json``, as every other error of a command is (:func:`_fail`)."""

    json_errors = False  # set by main() from the whole command line: the parse has not finished

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        command = self.prog.removeprefix("farm").strip() or None
        sys.exit(_fail(command, UsageError(message, hint=f"{self.prog} --help"), self.json_errors))


def _wants_json(argv: Sequence[str]) -> bool:
    """``--json`` (or an abbreviation argparse would take for it) before any ``--``."""
    options = argv[:argv.index("--")] if "--" in argv else argv
    return any(len(arg) >= 4 and "--json".startswith(arg) for arg in options)


def _top_parser() -> argparse.ArgumentParser:
    lines = "\n".join(f"  {name:<14} {text}" for name, (_, text) in COMMANDS.items())
    parser = _Parser(
        prog="farm",
        description="Build orchestration for a CUDA wheel farm.",
        epilog=f"commands:\n{lines}\n\nexit codes: 0 ok, 1 defects found, 2 bad input, 3 environment failure, "
               "4 farm doctor cannot tell, 130/143 interrupted by SIGINT/SIGTERM; with --json every error is "
               "also one JSON object on stdout",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"farm {__version__}")
    parser.add_argument("command", choices=sorted(COMMANDS), metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _Parser.json_errors = _wants_json(argv)
    if not argv:  # no command is a usage error, not a successful run
        _top_parser().print_help(sys.stderr)
        return EXIT_BAD_INPUT
    if argv[0].startswith("-"):
        _top_parser().parse_args(argv)  # --help / --version exit 0; anything else is argparse's exit 2
        return EXIT_BAD_INPUT
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        _top_parser().error(f"unknown command {name!r} (choose from {', '.join(sorted(COMMANDS))})")
    module_name, text = COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = _Parser(prog=f"farm {name}", description=text)
    module.configure(parser)
    args = parser.parse_args(rest)
    code = _run(module, name, args)
    return _flush(name, code)


def console() -> None:
    """The ``farm`` console script."""
    sys.exit(main())


def _flush(name: str, code: int) -> int:
    """The output out before the exit code is final: a reader that left is not an error of ours
    (see _run), a full disk is, and neither ends in the interpreter's own message at exit."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
    except OSError as exc:
        code = max(code, _fail(name, os_error(exc, doing="write the output to"), as_json=False))
        _discard_stdout()
    return code


def _run(module: ModuleType, name: str, args: argparse.Namespace) -> int:
    as_json = bool(getattr(args, "json", False))
    try:
        return int(module.run(args))
    except FarmError as exc:
        return _fail(name, exc, as_json)
    except Interrupted as exc:  # a command that stops what it started (farm build) says what it stopped
        print(f"farm {name}: {exc.line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"farm {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `farm ... | head`: the reader left; not an error of ours
        _discard_stdout()
        return 0
    except OSError as exc:  # disk full, permission denied: the environment, not the input
        return _fail(name, os_error(exc, doing="access"), as_json)


def _discard_stdout() -> None:
    """What is left in stdout's buffer goes nowhere: no second error when it is flushed at exit."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _fail(name: str | None, exc: FarmError, as_json: bool) -> int:
    """The error on stderr; with ``--json`` also as one JSON object on stdout, so a machine
    reader gets an answer it can parse whatever happened (``name``: the command; None before one)."""
    print(f"farm {name}: error: {exc}" if name else f"farm: error: {exc}", file=sys.stderr)
    if as_json:
        where = redact(clip(exc.where, MAX_MESSAGE)) if exc.where else None
        try:
            print(json.dumps({"ok": False, "error": {
                "command": name, "type": type(exc).__name__, "exit_code": exc.exit_code,
                "message": redact(clip(exc.message, MAX_MESSAGE)), "where": where,
                "fix": redact(clip(exc.hint, MAX_MESSAGE)) if exc.hint else None}}, indent=2))
            sys.stdout.flush()
        except OSError:  # stdout itself failed (a full disk, a closed pipe): the error is on stderr
            _discard_stdout()
    return exc.exit_code


if __name__ == "__main__":  # pragma: no cover
    console()
