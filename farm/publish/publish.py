"""``farm upload``: gate, plan every target, send, then record in the ledger.

Order matters and is fixed: (1) the gate checks every wheel; (2) every target is planned and
checked for conflicts (same name, other sha256; asset cap; lost index projects) before anything
is sent; (3) the targets run; (4) the fragments of the batch are merged into the ledger and each
entry records where its wheel now lives. A refusal at (1) or (2) sends nothing and writes nothing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import parse_wheel_filename

from farm.errors import ToolError, UsageError
from farm.provenance.ledger import iter_entries
from farm.provenance.ledgerwrite import merge_fragments, record_published_many, write_fragment
from farm.publish import github, index, twine
from farm.publish.gate import GatedWheel, GateResult, Vouchers, run_gate
from farm.publish.targets import (
    GithubSettings,
    IndexSettings,
    TargetSettings,
    TwineSettings,
)

PUBLISH_LOCK_SUFFIX = ".publish.lock"
# Publishes queue behind each other: an upload of a large batch to GitHub takes many minutes.
PUBLISH_LOCK_TIMEOUT_S = 3 * 3600.0


@dataclass(frozen=True)
class TargetOutcome:
    target: str
    kind: str
    placed: tuple[tuple[str, str], ...]  # (filename, url) of every wheel of the batch
    sent: tuple[str, ...]  # filenames actually transferred this run
    commands: tuple[str, ...] = ()  # gh command lines (github)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class UploadReport:
    gate: GateResult
    outcomes: tuple[TargetOutcome, ...] = ()
    merged: tuple[str, ...] = ()
    recorded: int = 0
    dry_run: bool = False
    refusals: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.gate.ok and not self.refusals


def find_wheels(directory: Path) -> list[Path]:
    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError("not a directory", where=str(directory), hint="pass the folder postbuild wrote")
    wheels = sorted(directory.glob("*.whl"))
    if not wheels:
        raise UsageError("no wheels to upload", where=str(directory),
                         hint="pass the --out folder of `farm postbuild`")
    return wheels


@dataclass
class _Planned:
    settings: TargetSettings
    github_plan: github.GithubPlan | None = None
    twine_plan: twine.TwinePlan | None = None
    index_plan: list[index.IndexUpload] | None = None
    refusals: tuple[str, ...] = ()


def _github_wheels(settings: GithubSettings, batch: Sequence[GatedWheel]) -> list[github.Wheel]:
    out = []
    for w in batch:
        recorded = any(p.target == settings.name for p in w.entry.published)
        out.append(github.Wheel(w.path, w.build_info.package or parse_wheel_filename(w.filename)[0],
                                w.build_info.version, w.sha256, w.size, recorded))
    return out


def _page_url(settings: IndexSettings, filename: str) -> str:
    """Where a linked index lists a wheel: its project page in the wheel's channel."""
    f = index.describe(filename, "0" * 64, 0, None)
    rel = f"{f.home}/{f.project}/" if f.home else "flat/"
    return f"{settings.base_url}/{rel}" if settings.base_url else rel


def _plan(settings: TargetSettings, batch: Sequence[GatedWheel], vouchers: Vouchers,
          env: Mapping[str, str] | None, github_state: Mapping[str, Sequence[github.Asset] | None] | None,
          earlier: Sequence[str]) -> _Planned:
    if isinstance(settings, IndexSettings) and settings.links:
        # The pages link to the copies another target holds: each wheel must be there already
        # or be sent there earlier in this run.
        missing = [w.filename for w in batch if settings.links not in earlier
                   and not any(p.target == settings.links for p in w.entry.published)]
        return _Planned(settings, refusals=tuple(
            f"{settings.name}: {name} is not published to {settings.links!r}, which this index links to; "
            f"run with --target {settings.links} --target {settings.name}" for name in missing))
    if isinstance(settings, IndexSettings):
        uploads, _ = index.publish(settings.path, [(w.path, w.sha256) for w in batch], vouchers.sha256_of_name,
                                   base_url=settings.base_url, dry_run=True)
        return _Planned(settings, index_plan=uploads)
    if isinstance(settings, GithubSettings):
        wheels = _github_wheels(settings, batch)
        state = github_state if github_state is not None else github.releases_of(settings, wheels, env=env)
        gh_plan = github.plan(settings, wheels, state)
        return _Planned(settings, github_plan=gh_plan,
                        refusals=tuple(f"{settings.name}: {r}" for r in gh_plan.refusals))
    assert isinstance(settings, TwineSettings)
    sendable = [twine.TwineWheel(w.path, w.sha256) for w in batch]
    tw_plan = twine.plan(sendable, twine.existing_for(settings, sendable, env=env))
    return _Planned(settings, twine_plan=tw_plan, refusals=tuple(f"{settings.name}: {r}" for r in tw_plan.refusals))


def _linked_index(s: IndexSettings, batch: Sequence[GatedWheel], ledger: Path,
                  fragment_dirs: Sequence[Path], *, dry_run: bool) -> TargetOutcome:
    placed = tuple((w.filename, _page_url(s, w.filename)) for w in batch)
    if dry_run:
        return TargetOutcome(s.name, "index", placed, ())
    vouchers = Vouchers.load(ledger, fragment_dirs)
    assert s.links is not None
    before = index.read_packages_json(s.path).get("files") or {}
    remote = index.linked((e for _, e in iter_entries(ledger)), s.links)
    index.regenerate(s.path, vouchers.sha256_of_name, remote=remote, create=True)
    return TargetOutcome(s.name, "index", placed, tuple(w.filename for w in batch if w.filename not in before))


def _execute(p: _Planned, batch: Sequence[GatedWheel], ledger: Path, fragment_dirs: Sequence[Path],
             env: Mapping[str, str] | None) -> TargetOutcome:
    s = p.settings
    if isinstance(s, IndexSettings) and s.links:
        return _linked_index(s, batch, ledger, fragment_dirs, dry_run=False)
    if isinstance(s, IndexSettings):
        # Read the ledger afresh: an earlier target of this run has rewritten it.
        vouchers = Vouchers.load(ledger, fragment_dirs)
        uploads, _ = index.publish(s.path, [(w.path, w.sha256) for w in batch], vouchers.sha256_of_name,
                                   base_url=s.base_url)
        return TargetOutcome(s.name, "index", tuple((u.filename, u.url) for u in uploads),
                             tuple(u.filename for u in uploads if u.action == "stored"))
    if isinstance(s, GithubSettings):
        assert p.github_plan is not None
        github.execute(p.github_plan, env=env)
        sent = tuple(n for n, _ in p.github_plan.uploads if n not in p.github_plan.skipped)
        return TargetOutcome(s.name, "github", p.github_plan.uploads, sent, tuple(p.github_plan.lines()),
                             p.github_plan.warnings)
    assert isinstance(s, TwineSettings)
    the_plan, placed = twine.upload(s, [twine.TwineWheel(w.path, w.sha256) for w in batch], env=env)
    return TargetOutcome(s.name, "twine", tuple(placed), tuple(f.name for f in the_plan.upload))


def _dry_outcome(p: _Planned, batch: Sequence[GatedWheel]) -> TargetOutcome:
    s = p.settings
    if isinstance(s, IndexSettings) and s.links:
        return _linked_index(s, batch, Path(), (), dry_run=True)
    if p.index_plan is not None:
        return TargetOutcome(s.name, "index", tuple((u.filename, u.url) for u in p.index_plan),
                             tuple(u.filename for u in p.index_plan if u.action == "stored"))
    if p.github_plan is not None:
        return TargetOutcome(s.name, "github", p.github_plan.uploads,
                             tuple(n for n, _ in p.github_plan.uploads if n not in p.github_plan.skipped),
                             tuple(p.github_plan.lines()), p.github_plan.warnings)
    assert p.twine_plan is not None
    return TargetOutcome(s.name, "twine", p.twine_plan.present, tuple(f.name for f in p.twine_plan.upload))


def _merge_batch(ledger: Path, batch: Sequence[GatedWheel]) -> tuple[str, ...]:
    """Merge exactly the fragments of this batch (other fragments in the folder stay pending)."""
    fresh = [w for w in batch if w.entry_source == "fragment"]
    if not fresh:
        return ()
    with tempfile.TemporaryDirectory(prefix="farm-merge-") as tmp:
        for w in fresh:
            write_fragment(w.entry, Path(tmp))
        return merge_fragments(ledger, Path(tmp)).added


def ordered(targets: Sequence[TargetSettings]) -> list[TargetSettings]:
    """Targets in run order: an index that links to another target's copies runs after it."""
    return sorted(targets, key=lambda t: isinstance(t, IndexSettings) and t.links is not None)


def upload(
    wheels_dir: Path,
    targets: Sequence[TargetSettings],
    *,
    ledger: Path,
    fragment_dirs: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
    dry_run: bool = False,
    github_state: Mapping[str, Sequence[github.Asset] | None] | None = None,
    **gate_options: Any,
) -> UploadReport:
    """Gate, plan, send and record. ``github_state`` replaces reading the releases with ``gh api``
    (tests, dry runs without network)."""
    wheels = find_wheels(wheels_dir)
    dirs = [Path(wheels_dir), *fragment_dirs]
    vouchers = Vouchers.load(ledger, dirs)
    gate = run_gate(wheels, vouchers, **gate_options)
    if not gate.ok:
        return UploadReport(gate, dry_run=dry_run)
    if dry_run:  # reads only: no lock (a dry run leaves nothing behind)
        return _publish(gate, targets, ledger=ledger, dirs=dirs, vouchers=vouchers, env=env,
                        dry_run=True, github_state=github_state)
    with publish_lock(ledger):
        # Read the ledger again under the lock: another publish may have finished meanwhile.
        return _publish(gate, targets, ledger=ledger, dirs=dirs, vouchers=Vouchers.load(ledger, dirs), env=env,
                        dry_run=False, github_state=github_state)


def publish_lock(ledger: Path) -> Any:
    """One publish at a time per ledger: planning, sending, the index pages and the ledger merge
    form one transaction. Without it a concurrent upload regenerates the index between another's
    copy and its ledger merge, and sees a wheel "in the index but not in the ledger"."""
    from filelock import FileLock, Timeout

    class _Lock(FileLock):
        def __enter__(self) -> Any:
            try:
                return super().__enter__()
            except Timeout:
                raise ToolError(f"another publish has held {self.lock_file} for {PUBLISH_LOCK_TIMEOUT_S:.0f} s",
                                hint="wait for it to finish (or remove the file if no farm upload runs)") from None

    Path(ledger).parent.mkdir(parents=True, exist_ok=True)
    return _Lock(f"{ledger}{PUBLISH_LOCK_SUFFIX}", timeout=PUBLISH_LOCK_TIMEOUT_S)


def _publish(gate: GateResult, targets: Sequence[TargetSettings], *, ledger: Path, dirs: Sequence[Path],
             vouchers: Vouchers, env: Mapping[str, str] | None, dry_run: bool,
             github_state: Mapping[str, Sequence[github.Asset] | None] | None) -> UploadReport:
    batch = gate.passed
    targets = ordered(targets)
    names = [t.name for t in targets]
    planned = [_plan(t, batch, vouchers, env, github_state, names[:i]) for i, t in enumerate(targets)]
    refusals = [r for p in planned for r in p.refusals]
    if refusals:
        return UploadReport(gate, dry_run=dry_run, refusals=tuple(refusals))
    if dry_run:
        return UploadReport(gate, tuple(_dry_outcome(p, batch) for p in planned), dry_run=True)
    outcomes: list[TargetOutcome] = []
    merged: tuple[str, ...] = ()
    recorded = 0
    sha = {w.filename: w.sha256 for w in batch}
    for i, p in enumerate(planned):
        outcome = _execute(p, batch, ledger, dirs, env)
        outcomes.append(outcome)
        # Record each target as soon as it is done: if a later target fails, the ledger still
        # says where the wheels already are, and a retry (a no-op where they are) completes it.
        if i == 0:
            merged = _merge_batch(ledger, batch)
        recorded += record_published_many(
            ledger, [(filename, sha[filename], outcome.target, url) for filename, url in outcome.placed])
    return UploadReport(gate, tuple(outcomes), merged, recorded)


def regenerate_index(root: Path, *, ledger: Path, fragment_dirs: Sequence[Path] = (),
                     allow_drop: Sequence[str] = (), links: str | None = None) -> index.IndexReport:
    """``farm index DIR``: every page of the tree at ``root`` from its files and the ledger
    (``links``: also every ledger entry published to that target, linked to its URL there)."""
    with publish_lock(ledger):
        return _regenerate_index(root, ledger=ledger, fragment_dirs=fragment_dirs, allow_drop=allow_drop, links=links)


def _regenerate_index(root: Path, *, ledger: Path, fragment_dirs: Sequence[Path], allow_drop: Sequence[str],
                      links: str | None) -> index.IndexReport:
    vouchers = Vouchers.load(ledger, fragment_dirs)
    remote = index.linked((e for _, e in iter_entries(ledger)), links) if links and ledger.exists() else []
    return index.regenerate(root, vouchers.sha256_of_name, allow_drop=allow_drop, remote=remote,
                            create=bool(links))
