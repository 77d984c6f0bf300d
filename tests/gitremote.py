"""A git remote on disk for the ledger tests: a bare repository and clones that write to it."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def clone(bare: Path, dest: Path) -> Path:
    """A clone of ``bare`` at ``dest``, with an identity to commit as."""
    subprocess.run(["git", "clone", "-q", str(bare), str(dest)], check=True, capture_output=True)
    git(dest, "config", "user.name", "writer")
    git(dest, "config", "user.email", "writer@example.org")
    return dest


def bare_remote(where: Path, ledger: str = "") -> Path:
    """A bare repository at ``where`` whose ``main`` holds ``ledger.jsonl`` with ``ledger``."""
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(where)], check=True)
    seed = clone(where, where.with_name(where.name + "-seed"))
    (seed / "ledger.jsonl").write_text(ledger)
    git(seed, "add", "ledger.jsonl")
    git(seed, "commit", "-qm", "seed")
    git(seed, "push", "-q", "origin", "HEAD:main")
    return where


def append(repo: Path, text: str) -> None:
    with (repo / "ledger.jsonl").open("a") as fh:
        fh.write(text)
