"""The ledger committed and pushed in small steps, safe against other writers.

Publishing runs for hours while maintainers and other publish jobs push to the same branch. A
plain ``git push`` is then rejected and the records it carried are lost. :func:`commit_and_push`
commits the ledger (its folder of segments, or a single file), pushes, and on a rejection
fetches, rebases its commits onto the remote branch and pushes again, a bounded number of times
with a growing pause. Where both sides changed a ledger file, git's line merge is not asked:
:func:`merge_ledgers` merges the two versions by record (keyed by file name; an entry's
``published`` list is the union of both), because the ledger only ever grows: entries are added
and publications recorded, never removed. Two different builds under one file name are a real
conflict and stop the push with both sha256s named, and the local commit kept.

A rejection that is not about the remote having moved is not retried: a retry cannot fix it.
Those GitHub names (:data:`REFUSALS`: a file over 100 MB, GH001; a protected branch, GH006; a
ruleset or push protection, GH013; permissions) are said with their fix; nothing is lost either
way: the commit stays in the local branch, and the next call pushes it.
"""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.errors import LedgerError, ToolError, clip
from farm.provenance.ledgerfiles import SEGMENT_SUFFIX
from farm.provenance.ledgerline import dumps_entry, parse_line, validate_entry
from farm.publish.ratelimit import Clock, RealClock

ATTEMPTS = 8
PAUSE_S = 2.0  # the first pause after a rejection; doubled each time, with jitter
MAX_PAUSE_S = 60.0
GIT_TIMEOUT_S = 600.0
# git's words for "the remote has commits you do not have"
_BEHIND = ("non-fast-forward", "fetch first", "[rejected]", "stale info", "cannot lock ref")
# What GitHub says when it refuses a push that no retry will make it take, and the fix.
REFUSALS = (
    ("GH001", "GitHub refuses a pushed file over 100 MB (GH001: large files)",
     ("the ledger is one file per package and epoch (`farm ledger migrate` moves a single ledger.jsonl "
      "there); find the large file with `git diff --stat origin/HEAD` and keep it out of the commit")),
    ("GH006", "the branch is protected (GH006)",
     ("let the publish job's token push to it (a ruleset bypass for the GitHub Actions app), or publish to "
      "an unprotected branch")),
    ("GH013", "a repository rule or push protection refused the push (GH013)",
     "read the rule GitHub names above and let the job's token bypass it, or fix what it found"),
    ("GH007", "the commit's author e-mail is private (GH007)",
     "set the job's git identity to a noreply address (build.yml's publish step does)"),
    ("Permission to", "the token may not push here", "give the job `contents: write` (docs/ci.md)"),
    ("The requested URL returned error: 403", "the token may not push here",
     "give the job `contents: write` (docs/ci.md)"),
    ("shallow update not allowed", "the checkout is shallow and the remote refuses it",
     "check out with `fetch-depth: 0`, or fetch the branch whole before pushing"),
)
_IDENTITY = {"GIT_AUTHOR_NAME": "farm", "GIT_AUTHOR_EMAIL": "farm@localhost",
             "GIT_COMMITTER_NAME": "farm", "GIT_COMMITTER_EMAIL": "farm@localhost"}


@dataclass(frozen=True)
class PushResult:
    """``committed``: a new commit was made; ``attempts``: pushes tried; ``rebased``: how often
    the local commits were replayed onto the remote; ``merged``: of those, how often the
    ledger's own merge resolved a conflict."""

    committed: bool
    pushed: bool
    attempts: int
    rebased: int
    merged: int


# --------------------------------------------------------------------------------------------
# The merge (pure)
# --------------------------------------------------------------------------------------------
def _entries(text: bytes, where: str) -> list[tuple[str, bytes, dict[str, Any]]]:
    """(filename, line, entry) of every line, validated."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        here = f"{where}:{number}"
        entry = parse_line(raw, here)  # the ledger's own line reader and checks
        rec = validate_entry(entry, here)
        out.append((rec.filename, raw, entry))
    return out


def merge_ledgers(ours: bytes, theirs: bytes, *, where: str = "ledger.jsonl") -> bytes:
    """One ledger holding every record of both (pure).

    ``ours``' lines come first, in their order and byte for byte where unchanged; then the
    entries only ``theirs`` has, in its order. An entry in both takes the union of their
    ``published`` lists, and the ``attestation`` either side records (ours where both do). The
    same file name with another sha256, or with any other field different, raises
    :class:`LedgerError`: two builds cannot share a published name."""
    merged: dict[str, tuple[bytes, dict[str, Any]]] = {}
    for side, text in (("ours", ours), ("theirs", theirs)):
        for filename, raw, entry in _entries(text, f"{where} ({side})"):
            prior = merged.get(filename)
            if prior is None:
                merged[filename] = (raw, entry)
                continue
            old = prior[1]
            if old["sha256"] != entry["sha256"]:
                raise LedgerError(f"{filename} is recorded with sha256 {old['sha256']} on one side and "
                                  f"{entry['sha256']} on the other", where=where,
                                  hint="two builds were published under one name: keep the one on the release, "
                                       "delete the other's asset, and push again")
            joined = ("published", "attestation")
            rest = {k: v for k, v in entry.items() if k not in joined}
            if {k: v for k, v in old.items() if k not in joined} != rest:
                raise LedgerError(f"{filename}: the two sides record different provenance for sha256 "
                                  f"{entry['sha256']}", where=where, hint="keep the line the wheel's own "
                                  "_build_info.json agrees with")
            published = list(old["published"])
            published += [p for p in entry["published"] if p not in published]
            attestation = old.get("attestation") or entry.get("attestation")
            if published != old["published"] or attestation != old.get("attestation"):
                combined = {**old, "published": published, **({"attestation": attestation} if attestation else {})}
                merged[filename] = (dumps_entry(combined).encode(), combined)
    return b"".join(raw.rstrip(b"\n") + b"\n" for raw, _ in merged.values())


# --------------------------------------------------------------------------------------------
# git (the I/O shell)
# --------------------------------------------------------------------------------------------
class _Git:
    def __init__(self, repo: Path, env: Mapping[str, str] | None) -> None:
        self.repo = repo
        base = dict(os.environ if env is None else env)
        # A commit needs an identity; CI runners often have none configured.
        self.env = {**_IDENTITY, **base, "GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true"}

    def run(self, *args: str, check: bool = True, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        try:
            proc = subprocess.run(["git", "-C", str(self.repo), *args], capture_output=True, input=stdin,
                                  env=self.env, timeout=GIT_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ToolError(f"cannot run git {args[0]}: {exc}", where=str(self.repo)) from None
        if check and proc.returncode != 0:
            raise ToolError(f"git {' '.join(args[:3])} exited {proc.returncode}: "
                            f"{clip(proc.stderr.decode('utf-8', 'replace').strip(), 500)}", where=str(self.repo))
        return proc

    def out(self, *args: str) -> str:
        return self.run(*args).stdout.decode().strip()


def _pause(attempt: int) -> float:
    pause: float = min(PAUSE_S * 2 ** attempt, MAX_PAUSE_S) * random.uniform(0.5, 1.0)
    return pause


def commit_and_push(repo: Path, ledger: Path, message: str, *, remote: str = "origin", branch: str | None = None,
                    attempts: int = ATTEMPTS, clock: Clock | None = None,
                    env: Mapping[str, str] | None = None) -> PushResult:
    """Commit ``ledger`` (a file in the git work tree ``repo``) when it changed, then push
    ``HEAD`` to ``remote``'s ``branch`` (default: the current branch), fetching and rebasing
    on a rejection, at most ``attempts`` pushes. Raises :class:`ToolError` when the push cannot
    be made (the commit stays local) and :class:`LedgerError` on a conflict no merge can settle."""
    clock = clock or RealClock()
    git = _Git(Path(repo), env)
    rel = os.path.relpath(Path(ledger).resolve(), Path(git.out("rev-parse", "--show-toplevel")).resolve())
    branch = branch or git.out("rev-parse", "--abbrev-ref", "HEAD")
    git.run("add", "--", rel)
    committed = git.run("diff", "--cached", "--quiet", "--", rel, check=False).returncode != 0
    if committed:
        git.run("commit", "-q", "-m", message, "--", rel)
    merged = 0
    for attempt in range(1, attempts + 1):
        push = git.run("push", "--porcelain", remote, f"HEAD:refs/heads/{branch}", check=False)
        if push.returncode == 0:
            return PushResult(committed, True, attempt, attempt - 1, merged)
        said = (push.stdout + push.stderr).decode("utf-8", "replace")
        known = next(((what, fix) for code, what, fix in REFUSALS if code in said), None)
        if known is not None or not any(word in said for word in _BEHIND):
            what, fix = known or ("git push was refused", ("fix the cause git names above (branch protection, a "
                                                           "hook, permissions) and run the push again"))
            raise ToolError(f"git push to {remote} {branch}: {what}, which no retry changes: {clip(said.strip(), 500)}",
                            where=str(repo), hint=f"{fix}; the ledger commit is kept locally")
        git.run("fetch", "-q", remote, branch)
        merged += _rebase(git, rel)
        if attempt < attempts:
            clock.sleep(_pause(attempt - 1))
    raise ToolError(f"git push to {remote} {branch}: rejected {attempts} times, each time another writer had pushed "
                    "first", where=str(repo), hint="the ledger commit is kept locally and rebased; run the push again")


def _rebase(git: _Git, rel: str) -> int:
    """Replay the local commits onto ``FETCH_HEAD``, settling every conflict in the ledger's
    files with :func:`merge_ledgers`; returns how many conflicts that was."""
    merged = 0
    proc = git.run("rebase", "-q", "FETCH_HEAD", check=False)
    while proc.returncode != 0:
        conflicted = [p for p in git.out("diff", "--name-only", "--diff-filter=U").splitlines() if p]
        # only the ledger ``rel`` and the files of its folder are merged here
        if not conflicted or not all(p == rel or p.startswith(rel.rstrip("/") + "/") for p in conflicted):
            git.run("rebase", "--abort", check=False)
            stopped = ", ".join(conflicted) or "an error"
            raise ToolError(f"rebasing the ledger commit onto the remote stopped on {stopped}: "
                            f"{clip(proc.stderr.decode('utf-8', 'replace').strip(), 300)}", where=str(git.repo),
                            hint="only the ledger is merged automatically; rebase by hand")
        for path in conflicted:
            # During a rebase, stage 2 is the remote side (with the commits replayed so far), stage 3 ours.
            # A segment both sides created has no common ancestor (stage 1); both stages are there.
            upstream = git.run("show", f":2:{path}").stdout
            replayed = git.run("show", f":3:{path}").stdout
            try:
                text = merge_ledgers(upstream, replayed, where=path)
            except LedgerError:
                git.run("rebase", "--abort", check=False)
                raise
            (git.repo / path).write_bytes(text)
            git.run("add", "--", path)
            merged += 1
        proc = git.run("rebase", "--continue", check=False)
    _normalise(git, rel)
    return merged


def _normalise(git: _Git, rel: str) -> None:
    """git's own line merge (where it saw no conflict) can repeat a record that both sides
    added at different places: merged with itself, each file name is kept once per file."""
    root = git.repo / rel
    files = [root] if root.is_file() else sorted(p for p in root.rglob(f"*{SEGMENT_SUFFIX}") if p.is_file())
    changed = []
    for path in files:
        text = path.read_bytes()
        once = merge_ledgers(text, b"", where=str(path.relative_to(git.repo)))
        if once != text:
            path.write_bytes(once)
            changed.append(str(path.relative_to(git.repo)))
    if changed:
        git.run("commit", "-q", "-m", "ledger: one record per file name after a rebase", "--", *changed)


@dataclass
class LedgerPusher:
    """The ledger committed and pushed as a publish records wheels (called with what was
    recorded). A commit hashes the whole ledger file, so a job that records thousands of wheels
    commits at most once per ``every_s`` seconds: the records between stay in the ledger file
    meanwhile, and :meth:`finish` commits and pushes the rest. A job killed in between loses at
    most those records, and their assets are found unrecorded and re-asserted by the next
    publish (farm/publish/adopt.py). A push that fails is not tried again until :meth:`finish`:
    the records stay in local commits meanwhile, and publishing goes on."""

    ledger: Path
    remote: str
    every_s: float = 0.0
    clock: Clock = field(default_factory=RealClock)
    pushes: int = 0
    error: str | None = None
    _last: float | None = None
    _pending: list[str] = field(default_factory=list)

    def __call__(self, what: str) -> None:
        self._pending.append(what)
        now = self.clock.now()
        if self.error is None and (self._last is None or now - self._last >= self.every_s):
            self._last = now
            self.error = self._push(self._message())

    def _message(self) -> str:
        what, self._pending = self._pending, []
        return f"ledger: {what[0]}" if len(what) == 1 else f"ledger: {len(what)} records ({what[0]}, ...)"

    def _push(self, message: str) -> str | None:
        try:
            result = commit_and_push(self.ledger.parent, self.ledger, message, remote=self.remote, clock=self.clock)
        except (ToolError, LedgerError) as exc:
            return str(exc)
        self.pushes += result.committed
        return None

    def finish(self) -> str | None:
        """A last commit and push (of the records since the last one, and of anything a failed
        push left behind); its error, if it fails too."""
        if self.error is not None or self._pending:
            self.error = self._push(self._message() if self._pending else "ledger: records of a publish")
        return self.error
