"""``farm upload``: gate, publish, record each wheel in the ledger as soon as it is out.

Order per run: (1) the gate checks every wheel; a refused wheel is left out with its reasons and
the others go on; (2) the index and twine targets are planned for the wheels that passed
(conflicts there refuse those targets before anything is sent); (3) the targets run: the
static index and twine for the batch, GitHub one wheel at a time (:mod:`farm.publish.releases`),
each target's publications recorded in the ledger as soon as they are out (and, with
``push_ledger``, committed and pushed). The report holds one verdict per wheel and target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from farm.errors import EXIT_DEFECT, EXIT_ENVIRONMENT, EXIT_OK, ToolError, UsageError
from farm.provenance.ledger import iter_entries
from farm.provenance.ledgerwrite import record_published_many
from farm.publish import ghrest, index, twine
from farm.publish.gate import GatedWheel, GateResult, Vouchers, run_gate
from farm.publish.ledgerpush import LedgerPusher
from farm.publish.releases import ClientFactory, github_client, merge_entries, publish_github
from farm.publish.targets import (
    GithubSettings,
    IndexSettings,
    TargetSettings,
    TwineSettings,
)
from farm.publish.verdict import TargetOutcome, Verdict, WheelVerdict

if TYPE_CHECKING:
    from farm.provenance.verdict import Derive

PUBLISH_LOCK_SUFFIX = ".publish.lock"
# Publishes queue behind each other: an upload of a large batch to GitHub takes many minutes.
PUBLISH_LOCK_TIMEOUT_S = 3 * 3600.0


@dataclass(frozen=True)
class UploadReport:
    gate: GateResult
    outcomes: tuple[TargetOutcome, ...] = ()
    merged: tuple[str, ...] = ()
    recorded: int = 0
    dry_run: bool = False
    refusals: tuple[str, ...] = field(default=())
    verdicts: tuple[WheelVerdict, ...] = ()
    pushes: int = 0  # ledger commits pushed
    push_error: str | None = None  # the ledger could not be pushed (its commits stay local)

    @property
    def ok(self) -> bool:
        return self.gate.ok and not self.refusals and all(v.ok for v in self.verdicts) and self.push_error is None

    @property
    def exit_code(self) -> int:
        if any(v.verdict is Verdict.FAILED for v in self.verdicts) or self.push_error is not None:
            return EXIT_ENVIRONMENT
        return EXIT_OK if self.ok else EXIT_DEFECT


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
    twine_plan: twine.TwinePlan | None = None
    index_plan: list[index.IndexUpload] | None = None
    refusals: tuple[str, ...] = ()


def _page_url(settings: IndexSettings, filename: str) -> str:
    """Where a linked index lists a wheel: its project page in the wheel's channel."""
    f = index.describe(filename, "0" * 64, 0, None)
    rel = f"{f.home}/{f.project}/" if f.home else "flat/"
    return f"{settings.base_url}/{rel}" if settings.base_url else rel


def _plan(settings: TargetSettings, batch: Sequence[GatedWheel], vouchers: Vouchers,
          env: Mapping[str, str] | None, earlier: Sequence[str]) -> _Planned:
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
        return _Planned(settings)  # planned and sent wheel by wheel (_github)
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
    assert p.twine_plan is not None
    return TargetOutcome(s.name, "twine", p.twine_plan.present, tuple(f.name for f in p.twine_plan.upload))


def _batch_verdicts(outcome: TargetOutcome, *, dry_run: bool) -> list[WheelVerdict]:
    sent = set(outcome.sent)
    new = Verdict.WOULD_SEND if dry_run else Verdict.PUBLISHED
    return [WheelVerdict(name, outcome.target, new if name in sent else Verdict.PRESENT, url)
            for name, url in outcome.placed]


def _merge_batch(ledger: Path, batch: Sequence[GatedWheel]) -> tuple[str, ...]:
    """Merge exactly the fragments of this batch (other fragments in the folder stay pending)."""
    return merge_entries(ledger, [w.entry for w in batch if w.entry_source == "fragment"])


def ordered(targets: Sequence[TargetSettings]) -> list[TargetSettings]:
    """Targets in run order: an index that links to another target's copies runs after it."""
    return sorted(targets, key=lambda t: isinstance(t, IndexSettings) and t.links is not None)


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------
def upload(
    wheels_dir: Path,
    targets: Sequence[TargetSettings],
    *,
    ledger: Path,
    fragment_dirs: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
    dry_run: bool = False,
    delete_orphans: bool = False,
    github_client: ClientFactory | None = None,
    derive: Derive | None = None,
    reader: str = "auto",
    publishers: int = 1,
    push_ledger: str | None = None,
) -> UploadReport:
    """Gate, send and record, wheel by wheel. ``github_client`` makes the REST client of a
    GitHub target (default :func:`github_client` with the token of ``env``); ``delete_orphans``
    deletes an unrecorded asset that fails re-assertion and sends the wheel in its place;
    ``publishers``: how many jobs publish at once with the same token (each takes that share of
    GitHub's limits); ``push_ledger``: a git remote the ledger's repository pushes to after each
    record (:func:`farm.publish.ledgerpush.commit_and_push`)."""
    wheels = find_wheels(wheels_dir)
    dirs = [Path(wheels_dir), *fragment_dirs]
    vouchers = Vouchers.load(ledger, dirs)
    gate = run_gate(wheels, vouchers, derive=derive, reader=reader)
    factory = github_client or (lambda s: _default_client(s, env, publishers))
    options = _Options(env, dry_run, delete_orphans, factory, derive, reader, push_ledger)
    if dry_run:  # reads only: no lock (a dry run leaves nothing behind)
        return _publish(gate, targets, ledger=ledger, dirs=dirs, vouchers=vouchers, options=options)
    with publish_lock(ledger):
        # Read the ledger again under the lock: another publish may have finished meanwhile.
        return _publish(gate, targets, ledger=ledger, dirs=dirs, vouchers=Vouchers.load(ledger, dirs),
                        options=options)


@dataclass(frozen=True)
class _Options:
    env: Mapping[str, str] | None
    dry_run: bool
    delete_orphans: bool
    factory: ClientFactory
    derive: Derive | None
    reader: str
    push_ledger: str | None


def _default_client(settings: GithubSettings, env: Mapping[str, str] | None, publishers: int) -> ghrest.Client:
    return github_client(settings, env, publishers=publishers)


def publish_lock(ledger: Path) -> Any:
    """One publish at a time per ledger: planning, sending, the index pages and the ledger merge
    form one transaction. Without it a concurrent upload regenerates the index between another's
    copy and its ledger merge, and sees a wheel "in the index but not in the ledger"."""
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
             vouchers: Vouchers, options: _Options) -> UploadReport:
    env, dry_run = options.env, options.dry_run
    verdicts = [WheelVerdict(r.wheel, "gate", Verdict.REFUSED, None, f"{r.check.value}: {r.message}; fix: {r.fix}")
                for r in gate.refused]
    batch = gate.passed
    if not batch:
        return UploadReport(gate, dry_run=dry_run, verdicts=tuple(verdicts))
    targets = ordered(targets)
    names = [t.name for t in targets]
    planned = [_plan(t, batch, vouchers, env, names[:i]) for i, t in enumerate(targets)]
    refusals = [r for p in planned for r in p.refusals]
    if refusals:
        return UploadReport(gate, dry_run=dry_run, refusals=tuple(refusals), verdicts=tuple(verdicts))
    outcomes: list[TargetOutcome] = []
    merged: list[str] = []
    recorded = 0
    sha = {w.filename: w.sha256 for w in batch}
    pusher = LedgerPusher(ledger, options.push_ledger) if options.push_ledger and not dry_run else None
    for p in planned:
        s = p.settings
        if isinstance(s, GithubSettings):
            outcome, github_verdicts, added, n = publish_github(
                s, batch, vouchers, ledger=ledger, client=options.factory(s), derive=options.derive,
                reader=options.reader, delete_orphans=options.delete_orphans, dry_run=dry_run, on_record=pusher)
            outcomes.append(outcome)
            verdicts += github_verdicts
            merged += added
            recorded += n
            continue
        outcome = _dry_outcome(p, batch) if dry_run else _execute(p, batch, ledger, dirs, env)
        outcomes.append(outcome)
        verdicts += _batch_verdicts(outcome, dry_run=dry_run)
        if dry_run:
            continue
        # Record each target as soon as it is done: if a later target fails, the ledger still
        # says where the wheels already are, and a retry (a no-op where they are) completes it.
        merged += _merge_batch(ledger, batch)
        recorded += record_published_many(
            ledger, [(filename, sha[filename], outcome.target, url) for filename, url in outcome.placed])
        if pusher is not None:
            pusher(f"{len(outcome.placed)} wheel(s) on {outcome.target}")
    push_error = pusher.finish() if pusher is not None else None
    return UploadReport(gate, tuple(outcomes), tuple(dict.fromkeys(merged)), recorded, dry_run=dry_run,
                        verdicts=tuple(verdicts), pushes=pusher.pushes if pusher is not None else 0,
                        push_error=push_error)


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
