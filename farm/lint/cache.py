"""Lint results cached by (source identity, lint version, arch list, ignores, build subdir).

A re-run on the same pinned source reads one small JSON file. Writes go through a temporary
file and a rename, so a crash never leaves a truncated entry; an unreadable entry is ignored
and recomputed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from farm.fsutil import atomic_write
from farm.lint.report import LintReport
from farm.model.arch import ArchList
from farm.model.config import LintIgnore


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
        return LintReport.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(cache_dir: Path, key: str, report: LintReport) -> None:
    # a cache: atomic (never a torn file), not durable (a lost entry is recomputed)
    data = json.dumps(report.to_json()).encode()
    atomic_write(Path(cache_dir) / "lint" / f"{key}.json", [data], durable=False)
