"""Any PyPI-compatible repository, through twine.

twine refuses ``--skip-existing`` off PyPI, so the files already there are looked up first in
the repository's simple API (PEP 691 JSON when offered, PEP 503 HTML otherwise): a file of the
same name and sha256 is skipped (a re-upload is a no-op), one with another sha256 is refused.
Each wheel is sent by its own twine run (:func:`upload_each`): twine stops at its first failed
file, and one wheel's refusal must never stop another's. After the uploads the simple API is
read again: a wheel is placed only where it is listed with its sha256.

Credentials come from the environment variables the target names (``TWINE_USERNAME`` /
``TWINE_PASSWORD`` by default); they are passed to twine through its environment, never on a
command line, and scrubbed from any output shown.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name, parse_wheel_filename

from farm import DISTRIBUTION
from farm.errors import NetworkError, ToolError, redact
from farm.netutil import LinkedFile, project_url, read_page
from farm.publish.verdict import Placed, PublishRun, TargetOutcome, Verdict, WheelVerdict

if TYPE_CHECKING:
    from farm.publish.gate import GatedWheel
    from farm.publish.twinesettings import TwineSettings


# A file the repository lists: absolute URL and the sha256 its link declares (or None).
Listed = LinkedFile


def listed_files(settings: TwineSettings, project: str, *, env: Mapping[str, str] | None = None) -> dict[str, Listed]:
    """filename -> :class:`Listed` for ``project`` (empty when the repository has no page)."""
    env = os.environ if env is None else env
    url = project_url(settings.simple_url, project)
    headers = {}
    user, password = env.get(settings.username_env), env.get(settings.password_env)
    if user and password:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    try:
        page = read_page(url, headers=headers)
    except NetworkError as exc:
        if exc.status == 404:
            return {}
        if exc.status is not None:
            raise ToolError(f"GET {url} answered HTTP {exc.status}",
                            hint="check simple_url and the credentials in the environment") from None
        raise ToolError(f"cannot reach {url}: {redact(exc.message, {'TWINE_PASSWORD': password or ''})}",
                        hint=f"check publish.{settings.name}.simple_url") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSON that is not PEP 691
        raise ToolError(f"{url} is not a simple API page ({type(exc).__name__}: {exc})",
                        hint=f"check publish.{settings.name}.simple_url: "
                             "it must be the repository's /simple/ root") from None
    return {f.filename: f for f in page.files}


@dataclass(frozen=True)
class TwineWheel:
    path: Path
    sha256: str


@dataclass(frozen=True)
class TwinePlan:
    upload: tuple[Path, ...]
    present: tuple[tuple[str, str], ...]  # (filename, url) already there with the same sha256
    refused: tuple[tuple[str, str], ...]  # (filename, why) of each wheel the repository cannot take

    @property
    def ok(self) -> bool:
        return not self.refused


def plan(wheels: Sequence[TwineWheel], existing: Mapping[str, Mapping[str, Listed]]) -> TwinePlan:
    """Which wheels to send (pure). ``existing``: project -> filename -> Listed."""
    upload: list[Path] = []
    present: list[tuple[str, str]] = []
    refused: list[tuple[str, str]] = []
    for w in sorted(wheels, key=lambda w: w.path.name):
        project = canonicalize_name(parse_wheel_filename(w.path.name)[0])
        have = existing.get(project, {}).get(w.path.name)
        if have is None:
            upload.append(w.path)
        elif have.sha256 == w.sha256:
            present.append((w.path.name, have.url))
        elif have.sha256 is None:
            refused.append((w.path.name, ("already in the repository and its page declares no sha256 "
                                         "to compare; verify it by hand")))
        else:
            refused.append((w.path.name, (f"the repository holds sha256 {have.sha256}, this wheel has "
                                         f"{w.sha256}; a published file is never replaced")))
    return TwinePlan(tuple(upload), tuple(present), tuple(refused))


def existing_for(settings: TwineSettings, wheels: Iterable[TwineWheel], *,
                 env: Mapping[str, str] | None = None) -> dict[str, dict[str, Listed]]:
    projects = {canonicalize_name(parse_wheel_filename(w.path.name)[0]) for w in wheels}
    return {p: listed_files(settings, p, env=env) for p in sorted(projects)}


def command(settings: TwineSettings, files: Sequence[Path]) -> list[str]:
    """The twine command line: no credentials in it (they travel in the environment)."""
    return [sys.executable, "-m", "twine", "upload", "--non-interactive", "--disable-progress-bar",
            "--repository-url", settings.repository_url, *(str(f) for f in files)]


@dataclass(frozen=True)
class TwineResult:
    """One wheel's end: ``url`` where the repository lists it with its sha256 (None: not
    placed, ``problem`` says why; ``refused``: a defect, another file under its name)."""

    filename: str
    url: str | None
    sent: bool = False
    problem: str = ""
    refused: bool = False


def _send(settings: TwineSettings, path: Path, env: Mapping[str, str]) -> str | None:
    """One twine run for one file; its failure in words (None: twine succeeded)."""
    child = dict(env)
    # twine reads TWINE_USERNAME / TWINE_PASSWORD; map the target's own variable names.
    for src, dst in ((settings.username_env, "TWINE_USERNAME"), (settings.password_env, "TWINE_PASSWORD")):
        if env.get(src):
            child[dst] = env[src]
    try:
        proc = subprocess.run(command(settings, [path]), capture_output=True, text=True,
                              env=child, check=False, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"cannot run twine: {exc}") from None
    if proc.returncode == 0:
        return None
    if "No module named twine" in proc.stderr:
        raise ToolError("twine is not installed", hint=f"pip install '{DISTRIBUTION}[upload]'")
    tail = redact((proc.stdout + proc.stderr).strip(), child).splitlines()[-5:]
    return f"twine upload to {settings.repository_url} exited {proc.returncode}" + (
        f": {' | '.join(tail)}" if tail else "")


def upload_each(settings: TwineSettings, wheels: Sequence[TwineWheel], *,
                env: Mapping[str, str] | None = None) -> tuple[TwinePlan, list[TwineResult]]:
    """Check, send each missing wheel on its own, verify. Returns the plan and one result per
    wheel. The repository unreachable, or twine missing, raises :class:`ToolError` (every wheel
    would fail alike); a wheel twine fails to send is that wheel's result."""
    env = dict(os.environ if env is None else env)
    the_plan = plan(wheels, existing_for(settings, wheels, env=env))
    problems = dict(the_plan.refused)
    failed: dict[str, str] = {}
    for path in the_plan.upload:
        why = _send(settings, path, env)
        if why is not None:
            failed[path.name] = why
    sent = {p.name for p in the_plan.upload} - set(failed)
    after = existing_for(settings, wheels, env=env)
    results: list[TwineResult] = []
    for w in sorted(wheels, key=lambda w: w.path.name):
        name = w.path.name
        if name in problems:
            results.append(TwineResult(name, None, problem=problems[name], refused=True))
            continue
        if name in failed:
            results.append(TwineResult(name, None, problem=failed[name]))
            continue
        project = canonicalize_name(parse_wheel_filename(name)[0])
        have = after.get(project, {}).get(name)
        if have is None or have.sha256 not in (w.sha256, None):
            results.append(TwineResult(name, None, name in sent, "after the upload the repository does not list "
                                       "it with its sha256; nothing was recorded in the ledger"))
        else:
            results.append(TwineResult(name, have.url, name in sent))
    return the_plan, results


def publish_target(s: TwineSettings, batch: Sequence[GatedWheel], run: PublishRun) -> Placed:
    env = run.env
    sendable = [TwineWheel(w.path, w.sha256) for w in batch]
    by_name = {w.filename: w for w in batch}
    if run.dry_run:
        planned = plan(sendable, existing_for(s, sendable, env=env))
        verdicts = [WheelVerdict(name, s.name, Verdict.REFUSED, None, why) for name, why in planned.refused]
        verdicts += [WheelVerdict(name, s.name, Verdict.PRESENT, url) for name, url in planned.present]
        verdicts += [WheelVerdict(p.name, s.name, Verdict.WOULD_SEND, None) for p in planned.upload]
        return Placed(TargetOutcome(s.name, "twine", planned.present, tuple(p.name for p in planned.upload)),
                      tuple(verdicts))
    _, results = upload_each(s, sendable, env=env)
    verdicts = []
    for r in results:
        if r.url is not None:
            verdicts.append(WheelVerdict(r.filename, s.name, Verdict.PUBLISHED if r.sent else Verdict.PRESENT, r.url))
        else:
            verdicts.append(WheelVerdict(r.filename, s.name, Verdict.REFUSED if r.refused else Verdict.FAILED,
                                         None, r.problem))
    placed = tuple((r.filename, r.url) for r in results if r.url is not None)
    return Placed(TargetOutcome(s.name, "twine", placed, tuple(r.filename for r in results if r.sent and r.url)),
                  tuple(verdicts), tuple((by_name[name], url) for name, url in placed))
