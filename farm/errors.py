"""One error type per failure family.

Every error carries *what* went wrong, *where* (file:line, wheel, .so, cell) and *what to do*,
and maps to one exit code of the command-line contract:

- 0 ok
- 1 the check found defects (assertion mismatch, lint error, audit ``wheel-wrong``, upload refused)
- 2 bad input or usage (malformed recipe, unknown package, corrupt file)
- 3 environment failure (tool missing or crashing, network, disk)
"""

from __future__ import annotations

from collections.abc import Iterable

EXIT_OK = 0
EXIT_DEFECT = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """``"did you mean 'x'?"`` for the closest option, or ``""``."""
    import difflib  # only on the error path

    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


class FarmError(Exception):
    """Base of every error farm raises on purpose."""

    exit_code: int = EXIT_BAD_INPUT

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f"\n  fix: {self.hint}"
        return text


class UsageError(FarmError):
    """Bad command-line arguments or an unknown name (package, cuda line, session)."""


class ConfigError(FarmError):
    """A malformed `_defaults.yml` or package recipe."""


class ArchError(FarmError):
    """An arch list that does not parse, or names an arch a CUDA line cannot build."""


class BinaryFormatError(FarmError):
    """A file that should hold ELF/fatbin data but is truncated, corrupt or of an unknown kind."""


class WheelError(FarmError):
    """A wheel that cannot be read safely or does not follow the wheel spec."""


class LedgerError(FarmError):
    """A malformed ledger line or fragment, or a conflicting ledger write."""


class SourceError(FarmError):
    """A package source that cannot be fetched, verified or unpacked."""

    exit_code = EXIT_ENVIRONMENT


class ToolError(FarmError):
    """An external tool (nvcc, cuobjdump, cibuildwheel, podman, gh, twine) is missing or crashed."""

    exit_code = EXIT_ENVIRONMENT


class DefectError(FarmError):
    """A check ran and found defects; raised where a report cannot be returned instead."""

    exit_code = EXIT_DEFECT
