"""Cache entries that only this user (or this CI) can have written: sealed with a keyed hash.

CI restores cache folders that anyone with write access to a branch could have filled, so an entry
whose content cannot be re-derived cheaply (a lint answer, a ledger index) carries a keyed BLAKE2b
tag over its purpose, its name and its bytes. The key never lives in a cache folder:

- ``$FARM_CACHE_KEY`` when set (in CI, from a repository secret: a fork's workflow cannot read it,
  so a cache it poisons never verifies);
- else a per-user key file, ``$FARM_KEY_FILE`` or ``$XDG_CONFIG_HOME/farm/cache.key``
  (``~/.config/farm/cache.key``), created with mode 0600 on first use; read only as a regular file
  (a FIFO or a link there is no key farm wrote);
- else (no writable home) a key of this process alone: nothing verifies later, which costs time only.

Package code never holds a key that still verifies: a build step's environment never carries
``$FARM_CACHE_KEY`` (and a build that runs package code on this host refuses to start while farm's
own environment has it: ``/proc/PID/environ`` is readable to the same user), and a key file that
package code could have read, as this user on this host, is replaced by a new key as soon as that
code has run (:func:`retiring`): anything it sealed with the old one never verifies again. The
entries this process itself read verified or wrote (:func:`read`, :func:`write`) are sealed again
with the new key from what it holds in memory, when the file still holds the bytes it knew; the
rest are recomputed when next needed, which costs time only. What is left: a farm command running
on the same host at the same time as such a build believes what the build sealed until the build's
step ends; a container build's package code sees neither.

:func:`unseal` answers ``None`` for anything that does not verify: the caller recomputes, as for
an entry that is missing. A cache never makes a verdict different and never makes a command fail.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Mapping
from hashlib import blake2b
from hmac import compare_digest
from pathlib import Path
from typing import Any

from farm import jsonread
from farm.errors import FileSystemError, UsageError
from farm.fsutil import atomic_write

KEY_ENV = "FARM_CACHE_KEY"
KEY_FILE_ENV = "FARM_KEY_FILE"  # where the per-user key lives instead (a self-hosted runner's, a test run's)
_MAGIC = b"farm-sealed-1\n"
_TAG = 32
_KEY_BYTES = 32
_process_key = os.urandom(_KEY_BYTES)


def key_file() -> str:
    """Where the per-user key lives (outside every cache folder farm writes)."""
    named = os.environ.get(KEY_FILE_ENV)
    if named:
        return named
    config = os.environ.get("XDG_CONFIG_HOME") or Path("~/.config").expanduser()
    return str(Path(config, "farm", "cache.key"))


def _key() -> bytes:
    secret = os.environ.get(KEY_ENV)
    if secret:
        return blake2b(secret.encode("utf-8", "surrogateescape"), digest_size=_KEY_BYTES, person=b"farm-key").digest()
    path = key_file()
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            key = fh.read(_KEY_BYTES + 1) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        if len(key) == _KEY_BYTES:
            return key
        return _process_key  # not a key farm wrote (a FIFO, a link, another size): trust nothing sealed with it
    except FileNotFoundError:
        pass
    except OSError:
        return _process_key
    try:
        Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return _key()
    except OSError:
        return _process_key
    key = os.urandom(_KEY_BYTES)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    return key


# What this process read verified or wrote, by path: (purpose, payload, the file's bytes then).
_known: dict[str, tuple[str, bytes, bytes]] = {}


def read(path: str | os.PathLike[str], purpose: str, cap: int) -> bytes | None:
    """The payload of the sealed file at ``path`` (at most ``cap`` bytes, a regular file), or None
    when it does not verify; ``OSError`` / ``ValueError`` when it cannot be read."""
    blob = jsonread.read_bounded(path, cap)
    payload = unseal(blob, purpose)
    if payload is not None:
        _known[str(Path(path).absolute())] = (purpose, payload, blob)
    return payload


def read_object(path: str | os.PathLike[str], purpose: str, cap: int = 1 << 20) -> dict[str, Any] | None:
    """The JSON object sealed at ``path`` (at most ``cap`` bytes), or None when it cannot be read,
    does not verify or is not an object."""
    try:
        payload = read(path, purpose, cap)
        data = jsonread.loads(payload) if payload is not None else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write(path: Path, payload: bytes, purpose: str) -> None:
    """``payload`` sealed into ``path`` (atomic, not durable: a lost entry is recomputed)."""
    blob = seal(payload, purpose)
    atomic_write(path, [blob], durable=False)
    _known[str(Path(path).absolute())] = (purpose, payload, blob)


def _reseal_known() -> None:
    for path, (purpose, payload, blob) in list(_known.items()):
        try:
            if jsonread.read_bounded(path, len(blob)) != blob:
                raise ValueError(path)  # changed since: not resealed, it fails and is recomputed
            write(Path(path), payload, purpose)
        except (OSError, ValueError, FileSystemError):
            _known.pop(path, None)


def retire_key() -> None:
    """Replace the key file with a new key (the old one's entries are recomputed when next read):
    package code ran on this host as this user and could have read it. Nothing to do under
    ``$FARM_CACHE_KEY``, which farm cannot replace (builds that run package code here refuse it)."""
    if os.environ.get(KEY_ENV):
        return
    path = key_file()
    tmp = f"{path}.{os.getpid()}.new"
    with contextlib.suppress(OSError):  # no writable home: the key of this process alone, as before
        Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(_KEY_BYTES))
        Path(tmp).replace(path)  # a link planted at the path is replaced, never written through
    with contextlib.suppress(OSError):
        Path(tmp).unlink()
    _reseal_known()


@contextlib.contextmanager
def retiring() -> Iterator[None]:
    """Package code runs on this host in the block: the key is retired when it ends, however it ends."""
    try:
        yield
    finally:
        retire_key()


def refuse_env_key(environ: Mapping[str, str], what: str) -> None:
    """A :class:`~farm.errors.UsageError` when ``$FARM_CACHE_KEY`` is in farm's own environment
    and ``what`` (package code) is about to run on this host as this user, who can read it there."""
    if environ.get(KEY_ENV):
        raise UsageError(f"${KEY_ENV} is set, and {what} runs on this host as you: its code could read the key "
                         f"from farm's own environment (/proc/PID/environ) and seal cache entries farm would believe",
                         hint=f"unset {KEY_ENV} for this build (farm then keeps a key file it replaces after every "
                              "build), or build in a container (--builder cibuildwheel); CI gives the key only to "
                              "steps that run no package code")


def _tag(key: bytes, purpose: str, payload: bytes) -> bytes:
    mac = blake2b(key=key, digest_size=_TAG)
    mac.update(purpose.encode("utf-8", "surrogateescape") + b"\0")
    mac.update(payload)
    return mac.digest()


def seal(payload: bytes, purpose: str) -> bytes:
    """``payload`` with its tag; ``purpose`` names the cache and the entry (its key or file name),
    so a valid entry moved under another name does not verify."""
    return _MAGIC + _tag(_key(), purpose, payload) + payload


def unseal(blob: bytes, purpose: str) -> bytes | None:
    """The payload of a :func:`seal`-ed ``blob`` for ``purpose``, or ``None`` when it does not verify."""
    head = len(_MAGIC) + _TAG
    if len(blob) < head or not blob.startswith(_MAGIC):
        return None
    tag, payload = blob[len(_MAGIC):head], blob[head:]
    return payload if compare_digest(tag, _tag(_key(), purpose, payload)) else None
