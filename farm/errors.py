"""One error type per failure family.

Every error carries *what* went wrong, *where* (file:line, wheel, .so, cell) and *what to do*,
and maps to one exit code of the command-line contract:

- 0 ok
- 1 the check found defects (assertion mismatch, lint error, audit ``wheel-wrong``, upload refused)
- 2 bad input or usage (malformed recipe, unknown package, corrupt file)
- 3 environment failure (tool missing or crashing, network, disk)
"""

from __future__ import annotations

import errno
import os
import re
import signal
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

EXIT_OK = 0
EXIT_DEFECT = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
EXIT_CANNOT_TELL = 4  # farm doctor: nothing found to fail, but no GPU or no driver to check against


def version_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sorts as versions read: ``12.9`` before ``12.10``, ``cp39`` before ``cp310``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part)


def _number(text: str) -> tuple[str, tuple[int, ...]] | None:
    """``12.8`` -> ("", (12, 8)); ``cp311`` -> ("cp", (3, 11)); anything else -> None."""
    m = re.fullmatch(r"([a-z]*)(\d+(?:\.\d+)*)", text)
    if m is None:
        return None
    if m[1] == "cp" and "." not in m[2]:  # a Python tag: cp311 is 3.11
        return "cp", (int(m[2][0]), int(m[2][1:] or 0))
    return m[1], tuple(int(p) for p in m[2].split("."))


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """``"did you mean 'x'?"`` for the closest option, or ``""``. Versions are close by value
    (``12.7`` -> ``12.8``, ``cp315`` -> ``cp314``), other words by spelling."""
    options = list(options)
    wanted = _number(word)
    numbered = [o for o in options if wanted is not None and (n := _number(o)) is not None and n[0] == wanted[0]]
    if wanted is not None and numbered:
        def distance(parts: tuple[int, ...]) -> tuple[int, int, int]:
            assert wanted is not None
            width = max(len(parts), len(wanted[1]))
            have, want = parts + (0,) * (width - len(parts)), wanted[1] + (0,) * (width - len(wanted[1]))
            first = next((i for i in range(width) if have[i] != want[i]), width - 1)
            # the longest shared prefix, then the nearest at the first difference, then the newer
            return -first, abs(have[first] - want[first]), -have[first]

        best = min(numbered, key=lambda o: distance(_number(o)[1]))  # type: ignore[index]
        return f"did you mean {best!r}?"
    # imported here: only a mistyped name pays for it, not every command that loads these errors
    import difflib  # noqa: PLC0415

    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


REDACTED = "***"


# secret variable names (gh's and twine's own, and any *_TOKEN / *_PASSWORD / *_SECRET: CI tokens,
# a target's own password_env) and credentials in URLs
_SECRET_NAME = re.compile(r"(?:^|_)(?:TOKEN|PASSWORD|SECRET)$")
_URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")


def redactor(env: Mapping[str, str] | None = None) -> Callable[[str], str]:
    """:func:`redact` with the secret values looked up once (for relaying a long log line by line)."""
    values: set[str] = set()
    for source in (os.environ, env or {}):
        values.update(v for k, v in source.items() if len(v) >= 4 and _SECRET_NAME.search(k.upper()))
    ordered = sorted(values, key=len, reverse=True)  # longest first: a secret may contain another

    def apply(text: str) -> str:
        for value in ordered:
            text = text.replace(value, REDACTED)
        return _URL_CREDENTIALS.sub(rf"\g<scheme>{REDACTED}@", text)

    return apply


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` without the values of secret variables (of this process's environment and of
    ``env``, the one a child ran with) and without credentials in URLs (``https://u:p@host``).

    Every message farm shows passes through here (:meth:`FarmError.__str__`); output of a child
    process (gh, twine, git, pip, a build) that is relayed any other way is passed through it
    explicitly.
    """
    return redactor(env)(text)


MAX_SHOWN = 120
MAX_MESSAGE = 8000


def clip(text: object, limit: int = MAX_SHOWN) -> str:
    """``text`` cut to ``limit`` characters: a value from the input goes into a message through
    this, so a huge (or alias-expanded) value cannot make an unbounded message."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def pip_failure(output: str, limit: int = 600) -> str:
    """What pip said went wrong, clipped: its ``ERROR:`` lines when it printed any (they name the
    requirement it could not find), else the whole output. pip prints its warnings first (an
    ignored find-links location, a deprecation), so clipping the whole output can keep only them."""
    errors = [line.strip() for line in output.splitlines() if line.lstrip().startswith("ERROR:")]
    return clip(" / ".join(errors) if errors else output.strip(), limit)


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
        return redact(clip(text, MAX_MESSAGE))


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


class Stalled(ToolError):
    """A build step made no progress (no output, next to no CPU in its processes) for longer than
    farm's limit, and was stopped with everything beneath it (``farm.builder.procs``)."""


class OutOfTime(ToolError):
    """A job's clock, or what it may spend waiting on a rate limit, is used up: what it has not
    done is handed on to the next job (never waited for past the job's limit)."""


class FileSystemError(FarmError):
    """The disk is full, or a path is not writable (or readable) for this user."""

    exit_code = EXIT_ENVIRONMENT


_NO_SPACE = {28, 122}  # ENOSPC, EDQUOT
_NO_PERMISSION = {1, 13, 30}  # EPERM, EACCES, EROFS


def os_error(exc: OSError, path: object = None, doing: str = "write") -> FarmError:
    """An :class:`OSError` as a message that names the path and the remedy.

    ``path``: the file farm was writing when the error carries no name (a full disk fails a
    ``write()``, which knows no file name)."""
    target = exc.filename if exc.filename is not None else path
    where = str(target) if target is not None else None
    folder = str(Path(where).parent) if where else "the output folder"
    code = exc.errno or 0
    if code in _NO_SPACE:
        return FileSystemError(
            f"no space left on the device (cannot {doing} {where or 'a file'})", where=where,
            hint=f"free space on the filesystem of {folder} (`df -h{' ' + folder if where else ''}`) or write "
                 "elsewhere (--out, TMPDIR), then run the command again; nothing half-written was kept under its "
                 "final name")
    if code in _NO_PERMISSION:
        why = "read-only filesystem" if code == errno.EROFS else "permission denied"
        return FileSystemError(
            f"{why} (cannot {doing} {where or 'a file'})", where=where,
            hint=f"make {folder} writable for this user (`ls -ld {folder}`), or choose another folder")
    return FileSystemError(f"cannot {doing} {where or 'a file'}: {exc.strerror or exc}", where=where,
                           hint="check the path and the filesystem, then run the command again")


class DefectError(FarmError):
    """A check ran and found defects; raised where a report cannot be returned instead."""

    exit_code = EXIT_DEFECT


class NetworkError(FarmError):
    """An index page or a download that cannot be reached, answers an HTTP error, or is cut off
    (farm.netutil); each caller words it for its own step."""

    exit_code = EXIT_ENVIRONMENT

    def __init__(self, message: str, *, url: str, status: int | None = None, where: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, where=where, hint=hint)
        self.url = url
        self.status = status  # the HTTP status, where the server answered one


class TooLarge(NetworkError):
    """More bytes than the step allows (an index page, a wheel, an archive): nothing more is read."""

    def __init__(self, message: str, *, url: str, cap: int) -> None:
        super().__init__(message, url=url)
        self.cap = cap


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived while a command ran (``farm.builder.procs.interruptible``). Not a
    :class:`FarmError`: no per-cell handler may swallow it. Whatever was running for the command
    is stopped on the way out and named in :attr:`stopped`; the command exits 128 + the signal's
    number (130 for SIGINT, 143 for SIGTERM), as a shell reports a process the signal ended."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.stopped: list[str] = []

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def line(self) -> str:
        name = signal.Signals(self.signum).name
        if not self.stopped:
            return f"interrupted by {name} (no build process was running)"
        return f"interrupted by {name}: stopped {'; '.join(self.stopped)}"
