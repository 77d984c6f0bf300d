"""GitHub Releases through ``gh``: a pure planner of exact command lines, and a runner.

One release per package (tag from the target's ``tag`` format, ``{package}`` by default).
Assets are only ever added: ``gh release upload`` runs without ``--clobber``, an asset of the
same name and the same sha256 is skipped (a re-upload is a no-op), and one with another sha256
refuses the whole batch. A release holds at most 1,000 assets: the plan refuses to cross it and
warns from ``warn_assets`` on, with what to do (a tag per version or per CUDA line).

The token comes from the environment (``GH_TOKEN`` / ``GITHUB_TOKEN``, read by ``gh`` itself);
it is never part of a command line or of output.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from farm import jsonread
from farm.errors import DefectError, ToolError, redact
from farm.publish.targets import GithubSettings

ASSET_CAP = 1000  # GitHub's per-release limit
ASSET_MAX_BYTES = 2 * 1024**3  # "< 2 GiB" per asset
# Files per `gh release upload` call: keeps argv short and a failed call cheap to retry.
UPLOAD_CHUNK = 50


@dataclass(frozen=True)
class Asset:
    """An asset already on a release; ``sha256`` is None where GitHub reports no digest."""

    name: str
    size: int
    sha256: str | None = None


@dataclass(frozen=True)
class Wheel:
    path: Path
    package: str
    version: str
    sha256: str
    size: int
    # True when the ledger already records this exact file as published to this target.
    recorded: bool = False


@dataclass(frozen=True)
class GithubPlan:
    commands: tuple[tuple[str, ...], ...]
    uploads: tuple[tuple[str, str], ...]  # (filename, url) of every wheel the batch places
    skipped: tuple[str, ...]  # already there, same sha256
    warnings: tuple[str, ...]
    refusals: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.refusals

    def lines(self) -> list[str]:
        return [shlex.join(c) for c in self.commands]


def tag_for(settings: GithubSettings, wheel: Wheel) -> str:
    return settings.tag.format(package=wheel.package, version=wheel.version)


def asset_url(repository: str, tag: str, filename: str) -> str:
    return f"https://github.com/{repository}/releases/download/{quote(tag)}/{quote(filename)}"


def plan(settings: GithubSettings, wheels: Sequence[Wheel],
         releases: Mapping[str, Sequence[Asset] | None]) -> GithubPlan:
    """The exact ``gh`` commands that place ``wheels`` (pure).

    ``releases``: tag -> its current assets, or None when the release does not exist yet; the
    runner fills it with :func:`view` (``gh api``, paginated). Every refusal is found before any command runs."""
    repo = settings.repository
    by_tag: dict[str, list[Wheel]] = {}
    for w in wheels:
        by_tag.setdefault(tag_for(settings, w), []).append(w)
    commands: list[tuple[str, ...]] = []
    uploads: list[tuple[str, str]] = []
    skipped: list[str] = []
    warnings: list[str] = []
    refusals: list[str] = []
    for tag, tag_wheels in sorted(by_tag.items()):
        if tag not in releases:
            raise ValueError(f"release state of {tag!r} not given")
        current = releases[tag]
        existing = {a.name: a for a in current or ()}
        todo: list[Wheel] = []
        for w in sorted(tag_wheels, key=lambda w: w.path.name):
            name = w.path.name
            if w.size >= ASSET_MAX_BYTES:
                refusals.append(f"{name}: {w.size} bytes; a release asset must be under 2 GiB")
                continue
            have = existing.get(name)
            if have is None:
                todo.append(w)
            elif have.sha256 == w.sha256 or (have.sha256 is None and w.recorded and have.size == w.size):
                skipped.append(name)
                uploads.append((name, asset_url(repo, tag, name)))
            elif have.sha256 is None:
                refusals.append(f"{name}: release {tag} already has an asset of that name and GitHub "
                                "reports no digest to compare; delete it or verify it by hand")
            else:
                refusals.append(f"{name}: release {tag} already has it with sha256 {have.sha256}, this "
                                f"wheel has {w.sha256}; published assets are never replaced")
        total = len(existing) + len(todo)
        if total > ASSET_CAP:
            refusals.append(
                f"release {tag} would hold {total} assets, over GitHub's cap of {ASSET_CAP}: set "
                f"publish.{settings.name}.tag to '{{package}}-{{version}}' (a release per version) "
                "before uploading more")
        elif todo and total >= settings.warn_assets:
            warnings.append(
                f"release {tag} will hold {total} of {ASSET_CAP} assets: switch publish."
                f"{settings.name}.tag to '{{package}}-{{version}}' before the next version")
        if not todo:
            continue
        if current is None:
            commands.append(("gh", "release", "create", tag, "--repo", repo, "--title", tag,
                             "--notes", f"Prebuilt CUDA wheels of {tag_wheels[0].package}."))
        for i in range(0, len(todo), UPLOAD_CHUNK):
            chunk = todo[i:i + UPLOAD_CHUNK]
            commands.append(("gh", "release", "upload", tag, "--repo", repo, *(str(w.path) for w in chunk)))
        uploads.extend((w.path.name, asset_url(repo, tag, w.path.name)) for w in todo)
    if refusals:  # a refused plan runs nothing at all
        commands, uploads = [], []
    return GithubPlan(tuple(commands), tuple(uploads), tuple(skipped), tuple(warnings), tuple(refusals))


# --------------------------------------------------------------------------------------------
# Runner (the I/O shell)
# --------------------------------------------------------------------------------------------
def parse_assets(text: str) -> list[Asset]:
    """Assets from the lines of ``gh api --paginate .../assets --jq '.[] | {name, size, digest}'``
    (one JSON object per line, every page)."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            a = jsonread.loads(line)
            digest = a.get("digest") or ""
            out.append(Asset(a["name"], int(a.get("size") or 0),
                             digest.split(":", 1)[1] if digest.startswith("sha256:") else None))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ToolError(f"cannot read an asset from `gh api` output ({type(exc).__name__}: {exc}): "
                            f"{line[:200]!r}", hint="check the installed gh version") from None
    return out


def _gh() -> str:
    gh = shutil.which("gh")
    if gh is None:
        raise ToolError("`gh` is not on PATH", hint="install the GitHub CLI (https://cli.github.com)")
    return gh


def _run(argv: Sequence[str], env: Mapping[str, str] | None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, check=False,
                              env=dict(env) if env is not None else None, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"cannot run {shlex.join(argv[:3])}: {exc}") from exc


def _last_line(proc: subprocess.CompletedProcess[str], env: Mapping[str, str] | None) -> str | None:
    """gh's last line of stderr, redacted (gh may echo a token or an authenticated URL)."""
    lines = proc.stderr.strip().splitlines()
    return redact(lines[-1], env) if lines else None


def view(repository: str, tag: str, *, env: Mapping[str, str] | None = None) -> list[Asset] | None:
    """Every asset of release ``tag`` (None: no such release).

    The REST listing is paginated (100 per page) so a release near the 1,000-asset cap is counted
    in full; ``digest`` is GitHub's sha256 of each asset."""
    gh = _gh()
    proc = _run([gh, "api", f"repos/{repository}/releases/tags/{quote(tag)}", "--jq", ".id"], env)
    if proc.returncode != 0:
        if "HTTP 404" in proc.stderr:
            return None
        raise ToolError(f"`gh api repos/{repository}/releases/tags/{tag}` exited {proc.returncode}",
                        hint=_last_line(proc, env))
    release_id = proc.stdout.strip()
    proc = _run([gh, "api", "--paginate", f"repos/{repository}/releases/{release_id}/assets?per_page=100",
                 "--jq", ".[] | {name, size, digest}"], env)
    if proc.returncode != 0:
        raise ToolError(f"listing the assets of release {tag} of {repository} exited {proc.returncode}",
                        hint=_last_line(proc, env))
    return parse_assets(proc.stdout)


def releases_of(settings: GithubSettings, wheels: Iterable[Wheel], *,
                env: Mapping[str, str] | None = None) -> dict[str, list[Asset] | None]:
    return {tag: view(settings.repository, tag, env=env)
            for tag in sorted({tag_for(settings, w) for w in wheels})}


def execute(the_plan: GithubPlan, *, env: Mapping[str, str] | None = None) -> None:
    """Run the plan's commands in order; stop at the first failure."""
    if not the_plan.ok:
        raise DefectError("refused: " + "; ".join(the_plan.refusals))
    gh = _gh()
    for argv in the_plan.commands:
        proc = _run([gh, *argv[1:]], env)
        if proc.returncode != 0:
            raise ToolError(f"`{shlex.join(argv[:4])} ...` exited {proc.returncode}",
                            hint=_last_line(proc, env))
