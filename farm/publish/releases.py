"""GitHub Releases, one wheel at a time: each wheel sent (or found there, adopted, named an
orphan) and recorded in the ledger before the next is looked at.

A crash therefore leaves at most one asset without a record, which the next run finds under the
wheel's name and re-asserts (:mod:`farm.publish.adopt`). A wheel the ledger already holds (this is
its second target) is different: its line changes, and the book writes all such publications of
the pass in one rewrite at its end; a crash before that loses only records the next run makes
again, finding each asset with the ledger's sha256 (``PRESENT``). The decisions are the pure ones
of :mod:`farm.publish.github`; the calls are :mod:`farm.publish.ghrest`'s.

A job that publishes many wheels keeps what it has read of each release in a :class:`ReleaseCache`
across its batches, kept current by its own uploads and deletes, so it asks GitHub about a
release once (farm/publish/budget.py counts the requests). It does not list a release's assets
before sending a wheel the ledger does not record: it uploads, and only GitHub's 422 for a name
already taken makes it list them and decide (an earlier build to adopt, the same bytes, an upload
that never finished). A wheel the ledger records is looked for in the listing first (a re-run
finds its assets there and sends nothing). A release the job has not seen is looked up by tag
where the ledger records wheels under that tag, and created at once where it records none (a
release another job created meanwhile answers 422 and is then looked up).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from farm.errors import ToolError
from farm.provenance.buildinfo import LedgerEntry
from farm.provenance.ledgerbook import LedgerBook
from farm.provenance.ledgerline import ExistsKey
from farm.publish import ghrest, github
from farm.publish.adopt import Regate, key_of, reassert
from farm.publish.ratelimit import Clock, RealClock, Throttle, github_limits
from farm.publish.verdict import Placed, PublishRun, TargetOutcome, Verdict, WheelVerdict

if TYPE_CHECKING:
    from farm.publish.gate import GatedWheel, Vouchers
    from farm.publish.githubsettings import GithubSettings

ClientFactory = Callable[["GithubSettings"], ghrest.Client]


def github_client(settings: GithubSettings, env: Mapping[str, str] | None = None, *,
                  clock: Clock | None = None, throttle: Throttle | None = None,
                  publishers: int = 1) -> ghrest.Client:
    """A REST client for ``settings``' repository, with the token of ``GH_TOKEN`` (else
    ``GITHUB_TOKEN``) and GitHub's limits as its throttle, shared by ``publishers`` jobs."""
    token = ghrest.env_token(os.environ if env is None else env)
    if token is None:
        raise ToolError(f"publishing to {settings.repository} needs a token in GH_TOKEN or GITHUB_TOKEN",
                        hint="a GitHub App installation token, or a fine-grained token with contents: write "
                             "on that repository (docs/upload.md)")
    clock = clock or RealClock()
    return ghrest.Client(settings.repository, token, api_url=settings.api_url, uploads_url=settings.uploads_url,
                         throttle=throttle or Throttle(github_limits(publishers=publishers), clock=clock),
                         clock=clock)


@dataclass
class _Release:
    """A release as this job knows it: ``assets`` are all of them when ``listed``, else only those
    this job placed there itself."""

    release: ghrest.GithubRelease | None
    assets: dict[str, ghrest.RemoteAsset]
    listed: bool = False


@dataclass
class ReleaseCache:
    """What one publishing job has read of a target's releases (tag -> release), and the tags
    its ledger records wheels under (the hint for looking a release up or creating it)."""

    releases: dict[str, _Release] = field(default_factory=dict)
    recorded_tags: frozenset[str] | None = None


@dataclass
class _GithubRun:
    """One GitHub target's pass over a batch: releases read once, then kept up to date."""

    settings: GithubSettings
    client: ghrest.Client
    book: LedgerBook
    gate: Regate  # an unrecorded asset under a wheel's name is re-asserted by it
    delete_orphans: bool
    dry_run: bool
    cache: ReleaseCache = field(default_factory=ReleaseCache)
    sent: list[str] = field(default_factory=list)
    placed: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    recorded: int = 0
    merged: list[str] = field(default_factory=list)
    on_record: Callable[[str], None] | None = None

    def state(self, tag: str, *, listed: bool = False, fresh: bool = False) -> _Release:
        """The release ``tag`` as far as this job knows it (``listed``: with every asset; ``fresh``:
        listed again, after GitHub said a name is taken that the job's listing lacks)."""
        known = self.cache.releases.get(tag)
        if known is None:
            release = self.client.release(tag)
            known = self.cache.releases[tag] = _Release(release, {}, listed=release is None)
        if fresh and known.release is not None:
            known.listed = False
        if listed and not known.listed:
            assert known.release is not None
            known.assets = {a.name: a for a in self.client.assets(known.release)}
            known.listed = True
        return known

    def ensure(self, tag: str, package: str) -> ghrest.GithubRelease:
        """The release ``tag``, created when there is none: at once, without a lookup, for a tag
        the ledger records no wheel under (one request either way, as a rule)."""
        known = self.cache.releases.get(tag)
        if known is None:
            if self.cache.recorded_tags is None:  # the release tags of every cell the ledger records
                self.cache.recorded_tags = frozenset(github.tag_for(self.settings.tag, rec.key)
                                                     for rec in self.book.index.records if rec.key is not None)
            if tag in self.cache.recorded_tags:
                known = self.state(tag)
            else:
                release = self.client.create_release(tag, f"Prebuilt CUDA wheels of {package}.")
                known = self.cache.releases[tag] = _Release(release, {}, listed=False)
        if known.release is None:
            known.release = self.client.create_release(tag, f"Prebuilt CUDA wheels of {package}.")
        return known.release

    def record(self, entry: LedgerEntry, url: str) -> None:
        """The wheel's entry and its publication recorded: a new wheel's line appended now; a
        recorded wheel's publication at the end of the pass (:meth:`LedgerBook.flush`)."""
        got = self.book.record(entry, self.settings.name, url)
        if got.added:
            self.merged.append(entry.filename)
        self.recorded += got.published
        self.placed.append((entry.filename, url))
        if self.on_record is not None:
            self.on_record(f"{entry.filename} on {self.settings.name}")

    def upload(self, w: GatedWheel, tag: str, url: str) -> WheelVerdict | None:
        """Send ``w``; None when GitHub says the name is taken (the caller lists and looks)."""
        release = self.ensure(tag, w.build_info.package or w.filename.split("-")[0])
        state = self.cache.releases[tag]
        got = self.client.upload(release, w.path, w.filename)
        if got is None:
            return None
        state.assets[w.filename] = got
        if got.sha256 not in (None, w.sha256):
            return WheelVerdict(w.filename, self.settings.name, Verdict.FAILED, url,
                                f"GitHub reports sha256 {got.sha256} for the upload, the wheel has {w.sha256}")
        self.sent.append(w.filename)
        self.record(w.entry, url)
        if len(state.assets) >= self.settings.warn_assets:
            self.warnings.append(f"release {tag} holds {len(state.assets)} of {github.ASSET_CAP} assets")
        return WheelVerdict(w.filename, self.settings.name, Verdict.PUBLISHED, url)

    def one(self, w: GatedWheel, ledger_sha256: str | None) -> WheelVerdict:
        name, target = w.filename, self.settings.name
        key = key_of(w.build_info)
        assert key is not None, "the gate passes asserted wheels only"
        tag = github.tag_for(self.settings.tag, key)
        url = github.asset_url(self.settings.repository, tag, name)
        for look in range(2):  # a second look, at every asset, after GitHub's 422 "already_exists"
            state = self.cache.releases.get(tag)
            # listed first where an asset is expected (the ledger records the wheel), else only
            # after GitHub's 422 says the name is taken
            if look or self.dry_run or ledger_sha256 is not None or (state is not None and state.release is None):
                state = self.state(tag, listed=True, fresh=look > 0)
            have = state.assets.get(name) if state else None
            present = github.Present(have.sha256, have.size, have.state) if have else None
            # an unlisted release's count is GitHub's to check: its 422 past the cap refuses the upload
            action, why = github.decide(w.sha256, w.size, present, ledger_sha256,
                                        assets=len(state.assets) if state and state.listed else 0)
            if action is github.Action.REFUSE:
                return WheelVerdict(name, target, Verdict.REFUSED, url, why)
            if self.dry_run:
                would = {github.Action.PRESENT: Verdict.PRESENT, github.Action.VERIFY: Verdict.WOULD_VERIFY}
                return WheelVerdict(name, target, would.get(action, Verdict.WOULD_SEND), url, why)
            if action is github.Action.PRESENT:
                self.record(w.entry, url)
                return WheelVerdict(name, target, Verdict.PRESENT, url)
            if action is github.Action.VERIFY:
                assert have is not None
                return self.verify(w, have, key, tag, url, ledger_sha256)
            if action is github.Action.CLEAR:
                assert have is not None
                assert state is not None
                self.client.delete(have)
                del state.assets[name]
            try:
                verdict = self.upload(w, tag, url)
            except ghrest.GithubApiError as exc:
                if exc.status != 422 or look:
                    raise
                continue  # refused unlisted (a full release): the second look lists it and says why
            if verdict is not None:
                return verdict
        return WheelVerdict(name, target, Verdict.FAILED, url, "GitHub says the name is taken but does not list it")

    def verify(self, w: GatedWheel, have: ghrest.RemoteAsset, key: ExistsKey, tag: str, url: str,
               ledger_sha256: str | None) -> WheelVerdict:
        """Read the other bytes under ``w``'s name: the same as ``w`` after all (GitHub gave no
        digest), an earlier build to adopt, or an orphan."""
        name, target = w.filename, self.settings.name
        with tempfile.TemporaryDirectory(prefix="farm-adopt-") as tmp:
            dest = Path(tmp) / name
            try:
                # At most the size GitHub reports (an asset is under 2 GiB): the disk never holds more.
                sha256 = self.client.download(have, dest, max_bytes=min(have.size, github.ASSET_MAX_BYTES))
            except ghrest.GithubApiError as exc:  # this asset's trouble, not the run's
                return WheelVerdict(name, target, Verdict.FAILED, url,
                                    f"cannot download the asset under this name to read it: "
                                    f"{exc.message}; run again, or delete the asset")
            action, why = github.other_bytes(w.sha256, sha256, ledger_sha256)
            if action is github.Action.PRESENT:
                self.record(w.entry, url)
                return WheelVerdict(name, target, Verdict.PRESENT, url)
            if action is github.Action.REFUSE:
                return WheelVerdict(name, target, Verdict.REFUSED, url, why)
            check = reassert(dest, cell=key, gate=self.gate)
        if check.entry is not None:
            self.record(check.entry, url)
            return WheelVerdict(name, target, Verdict.ADOPTED, url,
                                f"an earlier build (sha256 {check.sha256}) was published without a ledger record; "
                                f"it passed the gate again and is now recorded; this build ({w.sha256}) is not sent")
        reasons = "; ".join(check.problems)
        if not self.delete_orphans:
            return WheelVerdict(name, target, Verdict.ORPHAN, url,
                                f"the asset under this name (sha256 {check.sha256}) has no ledger record and fails "
                                f"re-assertion: {reasons}; delete it (farm upload --delete-orphans) and publish again")
        self.client.delete(have)
        del self.cache.releases[tag].assets[name]
        verdict = self.upload(w, tag, url)
        if verdict is None or verdict.verdict is not Verdict.PUBLISHED:
            return verdict or WheelVerdict(name, target, Verdict.FAILED, url, "the name was taken again meanwhile")
        return WheelVerdict(name, target, Verdict.REPLACED, url,
                            f"deleted the orphan asset (sha256 {check.sha256}: {reasons}) and sent this build")


def publish_github(s: GithubSettings, batch: Sequence[GatedWheel], vouchers: Vouchers, *, book: LedgerBook,
            client: ghrest.Client, gate: Regate, delete_orphans: bool,
            dry_run: bool, on_record: Callable[[str], None] | None, cache: ReleaseCache | None = None,
            ) -> tuple[TargetOutcome, list[WheelVerdict], tuple[str, ...], int]:
    """Publish ``batch`` to ``s`` in file name order; returns the target's outcome, each wheel's
    verdict, the entries merged into the ledger and the publications recorded. ``cache``: what
    the job read of the target's releases in its earlier batches (kept current here)."""
    run = _GithubRun(s, client, book, gate, delete_orphans, dry_run, on_record=on_record,
                     cache=cache if cache is not None else ReleaseCache())
    verdicts: list[WheelVerdict] = []
    try:
        _pass(run, sorted(batch, key=lambda w: w.filename), vouchers, verdicts)
    finally:  # the publications held for recorded wheels are written, whatever stopped the pass
        book.flush()
    outcome = TargetOutcome(s.name, "github", tuple(run.placed), tuple(run.sent), (),
                            tuple(dict.fromkeys(run.warnings)), client.requests, client.rate_limited,
                            client.throttle.waited_s)
    return outcome, verdicts, tuple(run.merged), run.recorded


def _pass(run: _GithubRun, batch: Sequence[GatedWheel], vouchers: Vouchers, verdicts: list[WheelVerdict]) -> None:
    """Each wheel of ``batch`` in turn, its verdict appended; after GitHub stops answering (the
    token, its rate limit, the network), the rest are not attempted."""
    stop: str | None = None
    for w in batch:
        if stop is not None:
            verdicts.append(WheelVerdict(w.filename, run.settings.name, Verdict.FAILED, None, f"not attempted: {stop}"))
            continue
        try:
            recorded = vouchers.ledger.by_filename(w.filename)
            verdicts.append(run.one(w, recorded.sha256 if recorded is not None else None))
        except ghrest.GithubApiError as exc:
            verdicts.append(WheelVerdict(w.filename, run.settings.name, Verdict.FAILED, None, exc.message))
            if exc.status in (401, 403, 429) or exc.status is None:
                # the token, its rate limit or the network: every later wheel would fail the same way
                stop = f"GitHub stopped answering this run ({exc.message})"


def publish_target(s: GithubSettings, batch: Sequence[GatedWheel], run: PublishRun) -> Placed:
    """:meth:`GithubSettings.publish`: the batch through :func:`publish_github`, with what the
    job read of the releases in its earlier batches."""
    cache = run.kept.setdefault(s.name, ReleaseCache())
    assert isinstance(cache, ReleaseCache)
    outcome, verdicts, merged, recorded = publish_github(
        s, batch, run.vouchers, book=run.book, client=run.github_client(s), gate=run.gate,
        delete_orphans=run.delete_orphans, dry_run=run.dry_run, on_record=run.pusher, cache=cache)
    return Placed(outcome, tuple(verdicts), merged=merged, recorded=recorded)
