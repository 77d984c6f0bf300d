"""Git remotes for the tests: a bare repository on disk and clones that write to it (the ledger
tests), and ``git daemon`` serving a folder of repositories on 127.0.0.1 (the source fetch)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


def one_commit_repo(repo: Path, files: dict[str, str]) -> str:
    """A repository at ``repo`` whose ``main`` is one commit holding ``files``; its commit id."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for rel, text in files.items():
        (repo / rel).write_text(text)
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "c")
    return git(repo, "rev-parse", "HEAD").strip()


def pushed_ledger(repo: Path, rel: str) -> bytes:
    """The file at ``rel`` as the remote's ``main`` of the clone ``repo`` has it now."""
    git(repo, "fetch", "-q", "origin", "main")
    return subprocess.run(["git", "-C", str(repo), "show", f"FETCH_HEAD:{rel}"], check=True,
                          capture_output=True).stdout


def append(repo: Path, text: str) -> None:
    with (repo / "ledger.jsonl").open("a") as fh:
        fh.write(text)


@contextmanager
def daemon(base: Path) -> Iterator[str]:
    """``git daemon`` serving every repository under ``base`` on 127.0.0.1 (git:// protocol);
    yields the base URL, ending in ``/``. The daemon stops when the block ends."""
    with socket.socket() as probe:  # a free port for the daemon to listen on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(["git", "daemon", "--export-all", "--reuseaddr", "--informative-errors",
                             f"--base-path={base}", "--listen=127.0.0.1", f"--port={port}", str(base)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):  # listening within seconds
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"git daemon exited with {proc.returncode}") from None
                time.sleep(0.05)
        yield f"git://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
