"""The ``farm`` command line: a thin dispatcher over the library.

Each command lives in ``farm/commands/<name>.py`` with ``configure(parser)`` and
``run(args) -> int``; it is imported only when called, so ``farm matrix`` does not pay for the
wheel or upload code.

A command module may set ``SHORT_LIVED = True``: it runs in bounded time, keeps no reference cycles
worth collecting, and has closed every file it opened when ``run`` returns. The console script
(:func:`console`) then runs it without the cyclic garbage collector and leaves without tearing the
interpreter down: on ``farm inspect`` of a large library those two were a tenth of the command.
"""

from __future__ import annotations

import argparse
import os
import sys

from farm import __version__
from farm.errors import EXIT_BAD_INPUT, MAX_MESSAGE, FarmError, clip, os_error, redact

TYPE_CHECKING = False  # annotations only: collections.abc is not on `farm inspect`'s start-up path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType
    from typing import NoReturn

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
    "grid": ("farm.commands.grid", "the grid against PyTorch's published wheel index: rows and phantoms to add"),
    "toolkit": ("farm.commands.toolkit", "a verified CUDA_HOME from NVIDIA's redistributable archives or PyPI wheels"),
    "slice": ("farm.commands.slice", "one shard's build entries from a wave's plan (the shard jobs' matrix)"),
    "publish-shard": ("farm.commands.publish_shard", "publish one build shard's wheels, one artifact at a time"),
    "wave": ("farm.commands.wave", "after a run's publishes: what was published, what failed, next wave?"),
    "chain": ("farm.commands.chain", "dispatch the next wave, merged with the run already waiting"),
    "cache": ("farm.commands.cache", "prune the build caches: toolkits, environments, sources no recent cell uses"),
}


def _terminal_width() -> int:
    """What argparse's formatter takes from ``shutil.get_terminal_size``, without importing shutil
    (and zlib, bz2 and lzma with it): argparse makes a formatter for every argument it is given,
    and that import was a tenth of a remembered ``farm lint``."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):  # no stdout, or not a terminal
            columns = 0
    return (columns or 80) - 2


class _Formatter(argparse.HelpFormatter):
    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _terminal_width() if width is None else width)


class _RawDescriptionFormatter(_Formatter, argparse.RawDescriptionHelpFormatter):
    pass


def _top_parser() -> argparse.ArgumentParser:
    lines = "\n".join(f"  {name:<14} {text}" for name, (_, text) in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="farm",
        description="Build orchestration for a CUDA wheel farm.",
        epilog=f"commands:\n{lines}\n\nexit codes: 0 ok, 1 defects found, 2 bad input, 3 environment failure",
        formatter_class=_RawDescriptionFormatter,
    )
    parser.add_argument("--version", action="version", version=f"farm {__version__}")
    parser.add_argument("command", choices=sorted(COMMANDS), metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None, *, _console: bool = False) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
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
    # __import__ with a fromlist returns the command module itself, without importing importlib
    # (and warnings with it) for one call
    module = __import__(module_name, fromlist=("run",))
    short_lived = _console and getattr(module, "SHORT_LIVED", False)
    if _console and not short_lived:
        import gc

        gc.enable()  # console() started without it
    parser = argparse.ArgumentParser(prog=f"farm {name}", description=text, formatter_class=_Formatter)
    module.configure(parser)
    args = parser.parse_args(rest)
    code = _run(module, name, args)
    if short_lived:
        _leave(name, code)
    return code


def console() -> None:
    """The ``farm`` console script: :func:`main`, with the cyclic garbage collector off until the
    command is known to need it (module docstring)."""
    import gc

    gc.disable()
    sys.exit(main(_console=True))


def _leave(name: str, code: int) -> NoReturn:
    """Exit now, after the output is out: a short-lived command has nothing left to close, and
    freeing its objects one by one would only cost time."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left: not an error of ours (see _run)
        pass
    except OSError as exc:  # disk full while writing the output: the command did not succeed
        code = max(code, _fail(name, os_error(exc, doing="write the output to"), as_json=False))
        _discard_stdout()
    sys.stderr.flush()
    os._exit(code)


def _run(module: ModuleType, name: str, args: argparse.Namespace) -> int:
    as_json = bool(getattr(args, "json", False))
    try:
        return int(module.run(args))
    except FarmError as exc:
        return _fail(name, exc, as_json)
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


def _fail(name: str, exc: FarmError, as_json: bool) -> int:
    """The error on stderr; with ``--json`` also as one JSON object on stdout, so a machine
    reader gets an answer it can parse whatever happened."""
    print(f"farm {name}: error: {exc}", file=sys.stderr)
    if as_json:
        import json

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
