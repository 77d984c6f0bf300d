"""Cache entries that only this user (or this CI) can have written: sealed with a keyed hash.

CI restores cache folders that anyone with write access to a branch could have filled, so an entry
whose content cannot be re-derived cheaply (a lint answer, a ledger index) carries a keyed BLAKE2b
tag over its purpose, its name and its bytes. The key never lives in a cache folder:

- ``$FARM_CACHE_KEY`` when set (in CI, from a repository secret: a fork's workflow cannot read it,
  so a cache it poisons never verifies);
- else a per-user key file, ``$XDG_CONFIG_HOME/farm/cache.key`` (``~/.config/farm/cache.key``),
  created with mode 0600 on first use;
- else (no writable home) a key of this process alone: nothing verifies later, which costs time only.

:func:`unseal` answers ``None`` for anything that does not verify: the caller recomputes, as for
an entry that is missing. A cache never makes a verdict different and never makes a command fail.
"""

from __future__ import annotations

import os
from hashlib import blake2b
from hmac import compare_digest
from pathlib import Path

KEY_ENV = "FARM_CACHE_KEY"
_MAGIC = b"farm-sealed-1\n"
_TAG = 32
_KEY_BYTES = 32
_process_key = os.urandom(_KEY_BYTES)


def key_file() -> str:
    """Where the per-user key lives (outside every cache folder farm writes)."""
    config = os.environ.get("XDG_CONFIG_HOME") or Path("~/.config").expanduser()
    return str(Path(config, "farm", "cache.key"))


def _key() -> bytes:
    secret = os.environ.get(KEY_ENV)
    if secret:
        return blake2b(secret.encode("utf-8", "surrogateescape"), digest_size=_KEY_BYTES, person=b"farm-key").digest()
    path = key_file()
    try:
        with open(path, "rb") as fh:
            key = fh.read(_KEY_BYTES + 1)
        if len(key) == _KEY_BYTES:
            return key
        return _process_key  # not a key farm wrote: trust nothing sealed with it, rewrite nothing
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
