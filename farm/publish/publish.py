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

from farm.errors import EXIT_DEFECT, EXIT_ENVIRONMENT, EXIT_OK, ToolError, UsageError
from farm.provenance.buildinfo import LedgerEntry
from farm.provenance.ledger import iter_entries
from farm.provenance.ledgerbook import LedgerBook
from farm.publish import index, releases
from farm.publish.gate import GateResult, Vouchers, run_gate
from farm.publish.indexsettings import IndexSettings
from farm.publish.ledgerpush import LedgerPusher
from farm.publish.releases import ClientFactory, ReleaseCache
from farm.publish.targets import PublishTarget, ordered
from farm.publish.verdict import PublishRun, TargetOutcome, Verdict, WheelVerdict

if TYPE_CHECKING:
    from farm.provenance.judge import Derive
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


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------
def upload(
    wheels_dir: Path,
    targets: Sequence[PublishTarget],
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
    release_caches: dict[str, ReleaseCache] | None = None,
) -> UploadReport:
    """Gate, send and record, wheel by wheel. ``github_client`` makes the REST client of a
    GitHub target (default :func:`~farm.publish.releases.github_client` with the token of ``env``); ``delete_orphans``
    deletes an unrecorded asset that fails re-assertion and sends the wheel in its place;
    ``publishers``: how many jobs publish at once with the same token (each takes that share of
    GitHub's limits); ``push_ledger``: a git remote the ledger's repository is pushed to
    (:class:`farm.publish.ledgerpush.LedgerPusher`). A job that publishes many batches passes
    its open ``book`` of ``ledger`` (read once, records appended), its ``pusher``, and its
    ``release_caches`` (target name -> what it has read of that target's releases)."""
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
    factory = github_client or (lambda s: releases.github_client(s, env, publishers=publishers))
    own_pusher = pusher is None and push_ledger is not None and not dry_run
    if own_pusher:
        assert push_ledger is not None
        pusher = LedgerPusher(Path(ledger), push_ledger)

    def regate(path: Path, entry: LedgerEntry) -> list[str]:
        return run_gate([path], Vouchers(book, {entry.sha256: entry}), derive=derive, reader=reader).lines()

    run = PublishRun(book, vouchers, env, dry_run, delete_orphans, factory, regate, None if dry_run else pusher, {},
                     {} if release_caches is None else release_caches)
    if dry_run:  # reads only: no lock (a dry run leaves nothing behind)
        return _publish(gate, targets, run)
    with publish_lock(ledger):
        # Under the lock the book is brought up to date: another publish may have finished meanwhile.
        book.refresh()
        report = _publish(gate, targets, run)
    if pusher is not None:
        error = pusher.finish() if own_pusher else pusher.error  # a shared pusher is finished by its job
        report = replace(report, pushes=pusher.pushes, push_error=error)
    return report


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


def _publish(gate: GateResult, targets: Sequence[PublishTarget], run: PublishRun) -> UploadReport:
    """Each target in turn, each wheel on its own: a wheel refused or failed on a target is
    that wheel's verdict there; the others go on. Each placement is recorded as it is made."""
    verdicts = [WheelVerdict(r.wheel, "gate", Verdict.REFUSED, None, f"{r.check.value}: {r.message}; fix: {r.fix}")
                for r in gate.refused]
    batch = gate.passed
    if not batch:
        return UploadReport(gate, dry_run=run.dry_run, verdicts=tuple(verdicts))
    outcomes: list[TargetOutcome] = []
    merged: list[str] = []
    recorded = 0
    placed_on: dict[str, set[str]] = {}
    run = replace(run, placed_on=placed_on)
    for s in ordered(targets):
        done = s.publish(batch, run)
        merged += done.merged
        recorded += done.recorded
        # Recorded as soon as the target is done: if a later target fails, the ledger still
        # says where the wheels already are, and a retry (a no-op where they are) completes it.
        for (w, _), got in zip(done.record, run.book.record_many([(w.entry, s.name, url) for w, url in done.record]),
                               strict=True):
            merged += [w.filename] if got.added else []
            recorded += got.published
        if run.pusher is not None and done.record:
            run.pusher(f"{len(done.record)} wheel(s) on {s.name}")
        outcomes.append(done.outcome)
        verdicts += done.verdicts
        placed_on[s.name] = {v.wheel for v in done.verdicts if v.ok}
    return UploadReport(gate, tuple(outcomes), tuple(dict.fromkeys(merged)), recorded, dry_run=run.dry_run,
                        verdicts=tuple(verdicts))


def regenerate_index(root: Path, *, ledger: Path, fragment_dirs: Sequence[Path] = (),
                     allow_drop: Sequence[str] = (), links: str | None = None) -> index.IndexReport:
    """``farm index DIR``: every page of the tree at ``root`` from its files and the ledger
    (``links``: also every ledger entry published to that target, linked to its URL there)."""
    with publish_lock(ledger):
        vouchers = Vouchers.load(ledger, fragment_dirs)
        remote = index.linked((e for _, e in iter_entries(ledger)), links) if links and ledger.exists() else []
        return index.regenerate(root, vouchers.sha256_of_name, allow_drop=allow_drop, remote=remote,
                                create=bool(links), attested=vouchers.attestation_of)


def regenerate_variants(root: Path, *, ledger: Path, fragment_dirs: Sequence[Path] = (),
                        allow_drop: Sequence[str] = ()) -> VariantReport:
    """The wheel-variant channel of the tree at ``root``, from its files and the ledger."""
    from farm.publish import variantchannel  # noqa: PLC0415 (variantlib, the upload extra's, is optional)

    with publish_lock(ledger):
        vouchers = Vouchers.load(ledger, fragment_dirs)
        return variantchannel.regenerate(root, vouchers.sha256_of_name, allow_drop=allow_drop)
