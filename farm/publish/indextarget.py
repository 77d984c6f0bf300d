"""The ``index`` publish target: a batch stored in a static PEP 503 tree (:mod:`farm.publish.index`),
or listed there by the URL another target holds it at, and the tree's wheel-variant channel made
again (:mod:`farm.publish.variantchannel`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from farm.errors import DefectError, FarmError, LedgerError
from farm.fsutil import sha256_file
from farm.provenance.buildinfo import LedgerEntry
from farm.provenance.ledger import iter_entries
from farm.publish import github, index
from farm.publish.adopt import key_of, reassert
from farm.publish.verdict import Placed, PublishRun, TargetOutcome, Verdict, WheelVerdict

if TYPE_CHECKING:
    from farm.provenance.ledgerbook import LedgerBook
    from farm.publish.gate import GatedWheel, Vouchers
    from farm.publish.indexsettings import IndexSettings


def publish_target(s: IndexSettings, batch: Sequence[GatedWheel], run: PublishRun) -> Placed:
    """:meth:`IndexSettings.publish`: the batch listed by the URLs another target holds, or stored."""
    return _linked_index(s, batch, run) if s.links else _stored_index(s, batch, run)


def _page_url(settings: IndexSettings, filename: str) -> str:
    """Where a linked index lists a wheel: its project page in the wheel's channel."""
    f = index.describe(filename, "0" * 64, 0, None)
    rel = f"{f.home}/{f.project}/" if f.home else "flat/"
    return f"{settings.base_url}/{rel}" if settings.base_url else rel


def _published_to(book: LedgerBook, w: GatedWheel, target: str) -> bool:
    rec = book.by_filename(w.filename)
    return rec is not None and rec.sha256 == w.sha256 and any(
        p.target == target for p in book.ledger_entry(rec).published)


def _linked_index(s: IndexSettings, batch: Sequence[GatedWheel], run: PublishRun) -> Placed:
    """The pages link to the copies another target holds: each wheel must be there already or
    have been placed there earlier in this run; one that is not is refused on its own."""
    assert s.links is not None
    book, dry_run = run.book, run.dry_run
    earlier = run.placed_on.get(s.links, set())
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
        return Placed(TargetOutcome(s.name, "index", placed, ()), tuple(verdicts))
    book.refresh()
    before = index.read_packages_json(s.path).get("files") or {}
    remote = index.linked((e for _, e in iter_entries(book.path)), s.links)
    index.regenerate(s.path, run.vouchers.sha256_of_name, remote=remote, create=True,
                     attested=run.vouchers.attestation_of)
    sent = tuple(w.filename for w in ok if w.filename not in before)
    verdicts += [WheelVerdict(name, s.name, Verdict.PUBLISHED if name in sent else Verdict.PRESENT, url)
                 for name, url in placed]
    record = tuple((w, url) for w, (_, url) in zip(ok, placed, strict=True))
    return Placed(TargetOutcome(s.name, "index", placed, sent), tuple(verdicts), record)


def _unrecorded(s: IndexSettings, batch: Sequence[GatedWheel], run: PublishRun
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
        key = key_of(w.build_info)
        if not stored.is_file() or key is None:
            rest.append(w)
            continue
        recorded = run.book.by_filename(w.filename)
        action, why = github.other_bytes(w.sha256, sha256_file(stored), recorded.sha256 if recorded else None,
                                         holder="the index")
        if action is not github.Action.VERIFY:
            rest.append(w)  # the same file, or a refusal: publish_each says so
            continue
        url = index.url_of(w.filename, s.base_url)
        if run.dry_run:
            verdicts.append(WheelVerdict(w.filename, s.name, Verdict.WOULD_VERIFY, url, why))
            continue
        check = reassert(stored, cell=key, gate=run.gate)
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


def _stored_index(s: IndexSettings, batch: Sequence[GatedWheel], run: PublishRun) -> Placed:
    dry_run = run.dry_run
    run.book.refresh()
    batch, adopted, adopt = _unrecorded(s, batch, run)
    # recorded before the pages are made: they list a file the ledger vouches for
    recorded = run.book.record_many([(e, s.name, url) for e, url in adopt])
    merged = tuple(e.filename for (e, _), got in zip(adopt, recorded, strict=True) if got.added)
    try:
        done = index.publish_each(s.path, [(w.path, w.sha256) for w in batch], run.vouchers.sha256_of_name,
                                  base_url=s.base_url, dry_run=dry_run, attested=run.vouchers.attestation_of)
        if adopt and done.report is None:  # nothing else stored: the adopted files' pages all the same
            index.regenerate(s.path, run.vouchers.sha256_of_name, attested=run.vouchers.attestation_of)
    except (DefectError, LedgerError) as exc:  # the tree's own state: no wheel can be added to it
        why = f"the index tree cannot take new wheels: {exc.message}" + (f" ({exc.hint})" if exc.hint else "")
        return Placed(TargetOutcome(s.name, "index", (), ()),
                      tuple(WheelVerdict(w.filename, s.name, Verdict.REFUSED, None, why) for w in batch))
    by_name = {w.filename: w for w in batch}
    verdicts = adopted + [
        WheelVerdict(name, s.name, Verdict.REFUSED, None, f"{why}; a published file name is never overwritten: "
                     "bump build_epoch to rebuild under a new name") for name, why in done.refused]
    new = Verdict.WOULD_SEND if dry_run else Verdict.PUBLISHED
    verdicts += [WheelVerdict(u.filename, s.name, new if u.action == "stored" else Verdict.PRESENT, u.url)
                 for u in done.uploads]
    sent = tuple(u.filename for u in done.uploads if u.action == "stored")
    warnings: tuple[str, ...] = ()
    if s.variants and done.report is not None:
        more, warnings = _variant_verdicts(s, sent, run.vouchers)
        verdicts += more
    placed = tuple((u.filename, u.url) for u in done.uploads) + tuple((e.filename, url) for e, url in adopt)
    outcome = TargetOutcome(s.name, "index", placed, sent, warnings=warnings)
    record = () if dry_run else tuple((by_name[u.filename], u.url) for u in done.uploads)
    return Placed(outcome, tuple(verdicts), record, merged, sum(got.published for got in recorded))


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
