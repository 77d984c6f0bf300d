"""Lint results cached by (source identity, lint version, arch list, ignores, build subdir).

A re-run on the same pinned source reads one small JSON file. Writes go through a temporary
file and a rename, so a crash never leaves a truncated entry. An entry is sealed
(:mod:`farm.cacheseal`) for its key: one that does not verify (written by someone else, edited,
moved under another key), is unreadable or is too large is ignored and recomputed, never an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from farm import cacheseal
from farm.errors import FileSystemError
from farm.lint.report import LintReport
from farm.model.arch import ArchList
from farm.model.config import LintIgnore

MAX_ENTRY = 64 << 20  # findings of the largest trees are a few MB


def cache_key(identity: str, lint_version: str, archs: ArchList, ignores: Sequence[LintIgnore],
              build_subdir: str | None) -> str:
    material = {
        "identity": identity,
        "lint_version": lint_version,
        "archs": archs.canonical(),
        "ignores": sorted([i.rule, i.path, i.reason, i.where] for i in ignores),
        "build_subdir": build_subdir or "",
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def load(cache_dir: Path, key: str) -> LintReport | None:
    path = Path(cache_dir) / "lint" / f"{key}.json"
    try:
        data = cacheseal.read_object(path, f"lint:{key}", MAX_ENTRY)
        return None if data is None else LintReport.from_json(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store(cache_dir: Path, key: str, report: LintReport) -> None:
    # a cache: atomic (never a torn file), not durable (a lost entry is recomputed)
    with contextlib.suppress(OSError, FileSystemError):  # an unwritable cache costs the next run time, no more
        cacheseal.write(Path(cache_dir) / "lint" / f"{key}.json", json.dumps(report.to_json()).encode(), f"lint:{key}")
