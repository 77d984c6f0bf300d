"""Ledger entries for tests, in the format of docs/architecture.md (valid against the
``_build_info`` schema plus the ledger keys: tests/test_ledger.py checks it)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from farm.errors import LedgerError
from farm.provenance.ledgerfiles import segments


def make_entry(
    package: str = "demo_ext",
    version: str = "0.1.0",
    *,
    cuda: str = "12.8",
    torch: str = "2.8",
    python: str = "cp311",
    platform: str = "linux_x86_64",
    build_epoch: int | None = 0,
    arch: str = "sm_80;sm_90;compute_90",
    provenance: str = "asserted",
    filename: str | None = None,
    sha256: str | None = None,
    published: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """One ledger entry; the filename follows farm's naming, the sha256 is derived from it."""
    local = f"cu{cuda.replace('.', '')}" + ("" if torch == "none" else f"torch{torch}")
    tag = f"-{build_epoch}" if build_epoch else ""
    abi = "abi3" if python == "abi3" else python
    py = "cp39" if python == "abi3" else python
    filename = filename or f"{package}-{version}+{local}{tag}-{py}-{abi}-{platform}.whl"
    inferred = provenance == "inferred"
    return {
        "schema_version": 1,
        "package": package,
        "dist": package,
        "version": version,
        "cell": {"cuda": cuda, "torch": torch, "python": python, "platform": platform},
        "build_epoch": None if inferred else build_epoch,
        "arch_list": {"requested": None if inferred else arch, "normalised": arch},
        "expected": None if inferred else {},
        "found": {},
        "assertion": None if inferred else {"result": "passed", "native_reader": "farm 0.1.0", "cuobjdump": None},
        "defaults_sha256": None,
        "recipe_sha256": None,
        "run": None if inferred else {"provider": "local", "repository": None, "commit": None, "run_id": None,
                                      "attempt": None},
        "source": None,
        "toolchain": None if inferred else {"nvcc": None, "torch": None, "python": None, "builder": None,
                                            "cibuildwheel": None},
        "extensions": {},
        "provenance": provenance,
        "filename": filename,
        "sha256": sha256 or hashlib.sha256(filename.encode()).hexdigest(),
        "size": 1234,
        "published": list(published or []),
    }


def raw_lines(path: Path) -> Iterator[bytes]:
    """Every line of every file of the ledger at ``path``, unparsed (none when there is no
    ledger)."""
    try:
        files = segments(path)
    except LedgerError:
        return
    for _, file in files:
        with file.open("rb") as handle:
            yield from handle
