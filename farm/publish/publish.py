"""``farm upload``: gate, publish, record each wheel in the ledger as soon as it is out.

Order per run: (1) the gate checks every wheel; a refused wheel is left out with its reasons and
the others go on; (2) the targets run in turn, each wheel on its own: GitHub one wheel at a
time (:mod:`farm.publish.releases`), the static index storing each wheel it can take
(:func:`farm.publish.index.publish_each`), twine sending each wheel by its own run
(:func:`farm.publish.twine.upload_each`). A wheel refused or failed on a target is that wheel's
verdict there and never stops another wheel. Each placement is recorded in the ledger as soon as
it is made, through the publish's open :class:`~farm.provenance.ledgerbook.LedgerBook` (one
appended line per new wheel), and with ``push_ledger`` committed and pushed. The report holds
one verdict per wheel and target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from farm.errors import (
    EXIT_DEFECT,
    EXIT_ENVIRONMENT,
    EXIT_OK,
    DefectError,
    FarmError,
    LedgerError,
    ToolError,
    UsageError,
)
from farm.fsutil import sha256_file
from farm.provenance.buildinfo import LedgerEntry
from farm.provenance.ledger import iter_entries
from farm.provenance.ledgerbook import LedgerBook
from farm.publish import ghrest, github, index, twine
from farm.publish.adopt import key_of, reassert
from farm.publish.gate import GatedWheel, GateResult, Vouchers, run_gate
from farm.publish.ledgerpush import LedgerPusher
from farm.publish.releases import ClientFactory, github_client, publish_github
from farm.publish.targets import (
    GithubSettings,
    IndexSettings,
    TargetSettings,
    TwineSettings,
)
from farm.publish.verdict import TargetOutcome, Verdict, WheelVerdict

if TYPE_CHECKING:
    from farm.provenance.verdict import Derive
    from farm.publish.variantchannel import VariantReport

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
    verdicts: tuple[WheelVerdict, ...] = ()
    pushes: int = 0  # ledger commits pushed
    push_error: str | None = None  # the ledger could not be pushed (its commits stay local)

    @property
    def ok(self) -> bool:
        return self.gate.ok and all(v.ok for v in self.verdicts) and self.push_error is None

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


def _page_url(settings: IndexSettings, filename: str) -> str:
    """Where a linked index lists a wheel: its project page in the wheel's channel."""
    f = index.describe(filename, "0" * 64, 0, None)
    rel = f"{f.home}/{f.project}/" if f.home else "flat/"
    return f"{settings.base_url}/{rel}" if settings.base_url else rel


@dataclass(frozen=True)
class _Done:
    """One target's pass over a batch: its outcome, a verdict per wheel, the (wheel, url) pairs
    to record in the ledger, and what the pass recorded itself (an adopted file: before the pages
    that list it are made) as (file name, line added, publication added)."""

    outcome: TargetOutcome
    verdicts: tuple[WheelVerdict, ...]
    record: tuple[tuple[GatedWheel, str], ...]
    recorded: tuple[tuple[str, bool, bool], ...] = ()


def _published_to(book: LedgerBook, w: GatedWheel, target: str) -> bool:
    rec = book.by_filename(w.filename)
    return rec is not None and rec.sha256 == w.sha256 and any(
        p.target == target for p in book.ledger_entry(rec).published)


def _linked_index(s: IndexSettings, batch: Sequence[GatedWheel], book: LedgerBook, vouchers: Vouchers,
                  placed_earlier: Mapping[str, set[str]], *, dry_run: bool) -> _Done:
    """The pages link to the copies another target holds: each wheel must be there already or
    have been placed there earlier in this run; one that is not is refused on its own."""
    assert s.links is not None
    earlier = placed_earlier.get(s.links, set())
    ok: list[GatedWheel] = []
    verdicts: list[WheelVerdict] = []
    for w in batch:
        if w.filename in earlier or _published_to(book, w, s.links):
            ok.append(w)
        else:
            verdicts.append(WheelVerdict(w.filename, s.name, Verdict.REFUSED, None,
                                         f"not published to {s.links!r}, which this index links to; "
                                         f"run with --target {s.links} --target {s.name}"))
    placed = tuple((w.filename, _page_url(s, w.filename)) for w in ok)
    if dry_run or not ok:
        verdicts += [WheelVerdict(name, s.name, Verdict.WOULD_SEND, url) for name, url in placed]
        return _Done(TargetOutcome(s.name, "index", placed, ()), tuple(verdicts), ())
    book.refresh()
    before = index.read_packages_json(s.path).get("files") or {}
    remote = index.linked((e for _, e in iter_entries(book.path)), s.links)
    index.regenerate(s.path, vouchers.sha256_of_name, remote=remote, create=True)
    sent = tuple(w.filename for w in ok if w.filename not in before)
    verdicts += [WheelVerdict(name, s.name, Verdict.PUBLISHED if name in sent else Verdict.PRESENT, url)
                 for name, url in placed]
    record = tuple((w, url) for w, (_, url) in zip(ok, placed, strict=True))
    return _Done(TargetOutcome(s.name, "index", placed, sent), tuple(verdicts), record)


def _variant_verdicts(s: IndexSettings, stored: Sequence[str],
                      vouchers: Vouchers) -> tuple[list[WheelVerdict], tuple[str, ...]]:
    """The wheel-variant channel made again after the tree took ``stored``: a verdict per stored
    wheel with a variant on ``<target>/variants``, and a warning per stored wheel without one."""
    from farm.publish import variantchannel  # noqa: PLC0415 (variantlib, the upload extra's, is optional)

    target = f"{s.name}/{variantchannel.DIR}"
    try:
        report = variantchannel.regenerate(s.path, vouchers.sha256_of_name)
    except FarmError as exc:
        why = f"the wheel-variant channel was not made: {exc.message}" + (f" ({exc.hint})" if exc.hint else "")
        return [WheelVerdict(name, target, Verdict.FAILED, None, why) for name in stored], ()
    made = [(name, v) for name in stored if (v := report.made.get(name)) is not None]
    folder = variantchannel.FOLDER
    verdicts = [WheelVerdict(name, target, Verdict.PUBLISHED, index.url_of(v.filename, s.base_url, folder),
                             v.describe()) for name, v in made]
    return verdicts, tuple(f"{name}: no wheel variant: {why}" for name, why in report.left_out if name in stored)


def _unrecorded(s: IndexSettings, batch: Sequence[GatedWheel], book: LedgerBook, options: _Options
                ) -> tuple[list[GatedWheel], list[WheelVerdict], list[tuple[LedgerEntry, str]]]:
    """The wheels whose name the tree holds with other bytes that the ledger does not record (a
    publish stopped between storing a file and recording it): that file re-asserted and adopted
    (recorded; this build is not stored), or named an orphan, as on GitHub (farm.publish.adopt).
    Returns the wheels left to publish, the verdicts and the entries to record."""
    rest: list[GatedWheel] = []
    verdicts: list[WheelVerdict] = []
    adopt: list[tuple[LedgerEntry, str]] = []
    for w in batch:
        stored = s.path / index.FILES / w.filename
        if not stored.is_file():
            rest.append(w)
            continue
        recorded = book.by_filename(w.filename)
        action, why = github.other_bytes(w.sha256, sha256_file(stored), recorded.sha256 if recorded else None,
                                         holder="the index")
        key = key_of(w.build_info)
        if action is not github.Action.VERIFY or key is None:
            rest.append(w)  # the same file, or a refusal: publish_each says so
            continue
        url = index.url_of(w.filename, s.base_url)
        if options.dry_run:
            verdicts.append(WheelVerdict(w.filename, s.name, Verdict.WOULD_VERIFY, url, why))
            continue
        check = reassert(stored, cell=key, ledger=book, derive=options.derive, reader=options.reader)
        if check.entry is not None:
            adopt.append((check.entry, url))
            verdicts.append(WheelVerdict(w.filename, s.name, Verdict.ADOPTED, url, (
                f"an earlier build (sha256 {check.sha256}) was stored without a ledger record; it passed the gate "
                f"again and is now recorded; this build ({w.sha256}) is not stored")))
        else:
            verdicts.append(WheelVerdict(w.filename, s.name, Verdict.ORPHAN, url, (
                f"the file under this name (sha256 {check.sha256}) has no ledger record and fails re-assertion: "
                f"{'; '.join(check.problems)}; delete {stored} and publish again")))
    return rest, verdicts, adopt


def _stored_index(s: IndexSettings, batch: Sequence[GatedWheel], book: LedgerBook, vouchers: Vouchers, *,
                  options: _Options) -> _Done:
    dry_run = options.dry_run
    book.refresh()
    batch, adopted_verdicts, adopt = _unrecorded(s, batch, book, options)
    # recorded before the pages are made, which list a file the ledger vouches for
    recorded = tuple((e.filename, got.added, got.published)
                     for (e, _), got in zip(adopt, book.record_many([(e, s.name, url) for e, url in adopt]),
                                            strict=True))
    try:
        done = index.publish_each(s.path, [(w.path, w.sha256) for w in batch], vouchers.sha256_of_name,
                                  base_url=s.base_url, dry_run=dry_run)
        if adopt and done.report is None:  # nothing else stored: the adopted files' pages all the same
            index.regenerate(s.path, vouchers.sha256_of_name)
    except (DefectError, LedgerError) as exc:  # the tree's own state: no wheel can be added to it
        why = f"the index tree cannot take new wheels: {exc.message}" + (f" ({exc.hint})" if exc.hint else "")
        return _Done(TargetOutcome(s.name, "index", (), ()),
                     tuple(WheelVerdict(w.filename, s.name, Verdict.REFUSED, None, why) for w in batch), ())
    by_name = {w.filename: w for w in batch}
    verdicts = adopted_verdicts + [
        WheelVerdict(name, s.name, Verdict.REFUSED, None, f"{why}; a published file name is never overwritten: "
                     "bump build_epoch to rebuild under a new name") for name, why in done.refused]
    new = Verdict.WOULD_SEND if dry_run else Verdict.PUBLISHED
    verdicts += [WheelVerdict(u.filename, s.name, new if u.action == "stored" else Verdict.PRESENT, u.url)
                 for u in done.uploads]
    sent = tuple(u.filename for u in done.uploads if u.action == "stored")
    warnings: tuple[str, ...] = ()
    if s.variants and done.report is not None:
        more, warnings = _variant_verdicts(s, sent, vouchers)
        verdicts += more
    placed = tuple((u.filename, u.url) for u in done.uploads) + tuple((e.filename, url) for e, url in adopt)
    outcome = TargetOutcome(s.name, "index", placed, sent, warnings=warnings)
    record = () if dry_run else tuple((by_name[u.filename], u.url) for u in done.uploads)
    return _Done(outcome, tuple(verdicts), record, recorded)


def _twine(s: TwineSettings, batch: Sequence[GatedWheel], env: Mapping[str, str] | None, *, dry_run: bool) -> _Done:
    sendable = [twine.TwineWheel(w.path, w.sha256) for w in batch]
    by_name = {w.filename: w for w in batch}
    if dry_run:
        plan = twine.plan(sendable, twine.existing_for(s, sendable, env=env))
        verdicts = [WheelVerdict(name, s.name, Verdict.REFUSED, None, why) for name, why in plan.refused]
        verdicts += [WheelVerdict(name, s.name, Verdict.PRESENT, url) for name, url in plan.present]
        verdicts += [WheelVerdict(p.name, s.name, Verdict.WOULD_SEND, None) for p in plan.upload]
        return _Done(TargetOutcome(s.name, "twine", plan.present, tuple(p.name for p in plan.upload)),
                     tuple(verdicts), ())
    _, results = twine.upload_each(s, sendable, env=env)
    verdicts = []
    for r in results:
        if r.url is not None:
            verdicts.append(WheelVerdict(r.filename, s.name, Verdict.PUBLISHED if r.sent else Verdict.PRESENT, r.url))
        else:
            verdicts.append(WheelVerdict(r.filename, s.name, Verdict.REFUSED if r.refused else Verdict.FAILED,
                                         None, r.problem))
    placed = tuple((r.filename, r.url) for r in results if r.url is not None)
    return _Done(TargetOutcome(s.name, "twine", placed, tuple(r.filename for r in results if r.sent and r.url)),
                 tuple(verdicts), tuple((by_name[name], url) for name, url in placed))


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
    book: LedgerBook | None = None,
    pusher: LedgerPusher | None = None,
) -> UploadReport:
    """Gate, send and record, wheel by wheel. ``github_client`` makes the REST client of a
    GitHub target (default :func:`github_client` with the token of ``env``); ``delete_orphans``
    deletes an unrecorded asset that fails re-assertion and sends the wheel in its place;
    ``publishers``: how many jobs publish at once with the same token (each takes that share of
    GitHub's limits); ``push_ledger``: a git remote the ledger's repository is pushed to
    (:class:`farm.publish.ledgerpush.LedgerPusher`). A job that publishes many batches passes
    its open ``book`` of ``ledger`` (read once, records appended) and its ``pusher``."""
    wheels = find_wheels(wheels_dir)
    if not dry_run and any(isinstance(t, IndexSettings) and t.variants for t in targets):
        from farm.publish import variantchannel  # noqa: PLC0415 (variantlib, the upload extra's, is optional)

        variantchannel.require()  # before anything is published
    dirs = [Path(wheels_dir), *fragment_dirs]
    book = LedgerBook.open(ledger) if book is None else book
    if book.path != Path(ledger):
        raise UsageError(f"the open ledger is {book.path}, not {ledger}")
    vouchers = Vouchers.of(book, dirs)
    gate = run_gate(wheels, vouchers, derive=derive, reader=reader)
    factory = github_client or (lambda s: _default_client(s, env, publishers))
    own_pusher = pusher is None and push_ledger is not None and not dry_run
    if own_pusher:
        assert push_ledger is not None
        pusher = LedgerPusher(Path(ledger), push_ledger)
    options = _Options(env, dry_run, delete_orphans, factory, derive, reader, None if dry_run else pusher)
    if dry_run:  # reads only: no lock (a dry run leaves nothing behind)
        return _publish(gate, targets, book=book, vouchers=vouchers, options=options)
    with publish_lock(ledger):
        # Under the lock the book is brought up to date: another publish may have finished meanwhile.
        book.refresh()
        report = _publish(gate, targets, book=book, vouchers=vouchers, options=options)
    if pusher is not None:
        error = pusher.finish() if own_pusher else pusher.error  # a shared pusher is finished by its job
        report = replace(report, pushes=pusher.pushes, push_error=error)
    return report


@dataclass(frozen=True)
class _Options:
    env: Mapping[str, str] | None
    dry_run: bool
    delete_orphans: bool
    factory: ClientFactory
    derive: Derive | None
    reader: str
    pusher: LedgerPusher | None


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


def _publish(gate: GateResult, targets: Sequence[TargetSettings], *, book: LedgerBook, vouchers: Vouchers,
             options: _Options) -> UploadReport:
    """Each target in turn, each wheel on its own: a wheel refused or failed on a target is
    that wheel's verdict there; the others go on. Each placement is recorded as it is made."""
    env, dry_run, pusher = options.env, options.dry_run, options.pusher
    verdicts = [WheelVerdict(r.wheel, "gate", Verdict.REFUSED, None, f"{r.check.value}: {r.message}; fix: {r.fix}")
                for r in gate.refused]
    batch = gate.passed
    if not batch:
        return UploadReport(gate, dry_run=dry_run, verdicts=tuple(verdicts))
    outcomes: list[TargetOutcome] = []
    merged: list[str] = []
    recorded = 0
    placed_on: dict[str, set[str]] = {}
    for s in ordered(targets):
        if isinstance(s, GithubSettings):
            outcome, github_verdicts, added, n = publish_github(
                s, batch, vouchers, book=book, client=options.factory(s), derive=options.derive,
                reader=options.reader, delete_orphans=options.delete_orphans, dry_run=dry_run, on_record=pusher)
            target_verdicts: Sequence[WheelVerdict] = github_verdicts
            merged += added
            recorded += n
        else:
            if isinstance(s, IndexSettings) and s.links:
                done = _linked_index(s, batch, book, vouchers, placed_on, dry_run=dry_run)
            elif isinstance(s, IndexSettings):
                done = _stored_index(s, batch, book, vouchers, options=options)
            else:
                assert isinstance(s, TwineSettings)
                done = _twine(s, batch, env, dry_run=dry_run)
            outcome, target_verdicts = done.outcome, done.verdicts
            merged += [name for name, added, _ in done.recorded if added]
            recorded += sum(published for _, _, published in done.recorded)
            # Recorded as soon as the target is done: if a later target fails, the ledger still
            # says where the wheels already are, and a retry (a no-op where they are) completes it.
            for (w, _), got in zip(done.record, book.record_many([(w.entry, s.name, url) for w, url in done.record]),
                                   strict=True):
                merged += [w.filename] if got.added else []
                recorded += got.published
            if pusher is not None and done.record:
                pusher(f"{len(done.record)} wheel(s) on {s.name}")
        outcomes.append(outcome)
        verdicts += target_verdicts
        placed_on[s.name] = {v.wheel for v in target_verdicts if v.ok}
    return UploadReport(gate, tuple(outcomes), tuple(dict.fromkeys(merged)), recorded, dry_run=dry_run,
                        verdicts=tuple(verdicts))


def regenerate_index(root: Path, *, ledger: Path, fragment_dirs: Sequence[Path] = (),
                     allow_drop: Sequence[str] = (), links: str | None = None) -> index.IndexReport:
    """``farm index DIR``: every page of the tree at ``root`` from its files and the ledger
    (``links``: also every ledger entry published to that target, linked to its URL there)."""
    with publish_lock(ledger):
        return _regenerate_index(root, ledger=ledger, fragment_dirs=fragment_dirs, allow_drop=allow_drop, links=links)


def regenerate_variants(root: Path, *, ledger: Path, fragment_dirs: Sequence[Path] = (),
                        allow_drop: Sequence[str] = ()) -> VariantReport:
    """The wheel-variant channel of the tree at ``root``, from its files and the ledger."""
    from farm.publish import variantchannel  # noqa: PLC0415 (variantlib, the upload extra's, is optional)

    with publish_lock(ledger):
        vouchers = Vouchers.load(ledger, fragment_dirs)
        return variantchannel.regenerate(root, vouchers.sha256_of_name, allow_drop=allow_drop)


def _regenerate_index(root: Path, *, ledger: Path, fragment_dirs: Sequence[Path], allow_drop: Sequence[str],
                      links: str | None) -> index.IndexReport:
    vouchers = Vouchers.load(ledger, fragment_dirs)
    remote = index.linked((e for _, e in iter_entries(ledger)), links) if links and ledger.exists() else []
    return index.regenerate(root, vouchers.sha256_of_name, allow_drop=allow_drop, remote=remote,
                            create=bool(links))
