"""``farm upload``: gate, publish wheel by wheel, record each in the ledger as soon as it is out.

Order per run: (1) the gate checks every wheel; a refused wheel is left out with its reasons and
the others go on; (2) the index and twine targets are planned for the wheels that passed
(conflicts there refuse those targets before anything is sent); (3) the targets run: the
static index and twine for the batch, GitHub one wheel at a time, each wheel's ledger entry
merged and its publication recorded right after its asset is there. A crash therefore leaves at
most one asset without a record, which the next run finds under the wheel's name, re-asserts
and adopts (or names an orphan): nothing is blocked, nothing published twice. The report holds
one verdict per wheel and target.
"""

from __future__ import annotations

import enum
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from farm.errors import EXIT_DEFECT, EXIT_ENVIRONMENT, EXIT_OK, LedgerError, ToolError, UsageError
from farm.provenance.buildinfo import LedgerEntry
from farm.provenance.ledger import iter_entries
from farm.provenance.ledgerwrite import merge_fragments, record_published_many, write_fragment
from farm.publish import ghrest, github, index, twine
from farm.publish.adopt import key_of, reassert
from farm.publish.gate import GatedWheel, GateResult, Vouchers, run_gate
from farm.publish.ratelimit import Clock, RealClock, Throttle, github_limits
from farm.publish.targets import (
    GithubSettings,
    IndexSettings,
    TargetSettings,
    TwineSettings,
)

if TYPE_CHECKING:
    from farm.provenance.audit import Derive

PUBLISH_LOCK_SUFFIX = ".publish.lock"
# Publishes queue behind each other: an upload of a large batch to GitHub takes many minutes.
PUBLISH_LOCK_TIMEOUT_S = 3 * 3600.0


class Verdict(str, enum.Enum):
    """What became of one wheel on one target."""

    PUBLISHED = "published"  # sent by this run
    PRESENT = "present"  # already there, the same bytes
    ADOPTED = "adopted"  # an unrecorded earlier build of the cell was there; re-asserted and recorded instead
    REPLACED = "replaced"  # an orphan under its name was deleted and this wheel sent (--delete-orphans)
    WOULD_SEND = "would-send"  # a dry run's plan
    WOULD_VERIFY = "would-verify"  # a dry run: another build is there, to be re-asserted
    ORPHAN = "orphan"  # an unrecorded asset under its name failed re-assertion: to delete
    REFUSED = "refused"  # the gate or the target refused this wheel
    FAILED = "failed"  # the target could not be reached or answered an error (after bounded retries)


OK_VERDICTS = frozenset({Verdict.PUBLISHED, Verdict.PRESENT, Verdict.ADOPTED, Verdict.REPLACED,
                         Verdict.WOULD_SEND, Verdict.WOULD_VERIFY})


@dataclass(frozen=True)
class WheelVerdict:
    wheel: str
    target: str  # a target's name, or "gate"
    verdict: Verdict
    url: str | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict in OK_VERDICTS

    def line(self) -> str:
        return (f"{self.wheel}: {self.target}: {self.verdict.value}" + (f" {self.url}" if self.url else "")
                + (f" ({self.message})" if self.message else ""))

    def to_json(self) -> dict[str, Any]:
        return {"wheel": self.wheel, "target": self.target, "verdict": self.verdict.value, "url": self.url,
                "message": self.message}


@dataclass(frozen=True)
class TargetOutcome:
    target: str
    kind: str
    placed: tuple[tuple[str, str], ...]  # (filename, url) of every wheel of the batch
    sent: tuple[str, ...]  # filenames actually transferred this run
    commands: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    requests: int = 0  # GitHub API requests sent
    rate_limited: int = 0  # GitHub rate-limit answers obeyed
    throttled_s: float = 0.0  # time the client-side throttle waited


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
    return _merge_entries(ledger, [w.entry for w in batch if w.entry_source == "fragment"])


def _merge_entries(ledger: Path, entries: Sequence[LedgerEntry]) -> tuple[str, ...]:
    if not entries:
        return ()
    with tempfile.TemporaryDirectory(prefix="farm-merge-") as tmp:
        for entry in entries:
            write_fragment(entry, Path(tmp))
        return merge_fragments(ledger, Path(tmp)).added


def ordered(targets: Sequence[TargetSettings]) -> list[TargetSettings]:
    """Targets in run order: an index that links to another target's copies runs after it."""
    return sorted(targets, key=lambda t: isinstance(t, IndexSettings) and t.links is not None)


# --------------------------------------------------------------------------------------------
# GitHub, one wheel at a time
# --------------------------------------------------------------------------------------------
TOKEN_VARIABLES = ("GH_TOKEN", "GITHUB_TOKEN")
ClientFactory = Callable[[GithubSettings], ghrest.Client]


def github_client(settings: GithubSettings, env: Mapping[str, str] | None = None, *,
                  clock: Clock | None = None, throttle: Throttle | None = None,
                  publishers: int = 1) -> ghrest.Client:
    """A REST client for ``settings``' repository, with the token of ``GH_TOKEN`` (else
    ``GITHUB_TOKEN``) and GitHub's limits as its throttle, shared by ``publishers`` jobs."""
    import os

    source = os.environ if env is None else env
    token = next((source[v] for v in TOKEN_VARIABLES if source.get(v)), None)
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
    release: ghrest.Release | None
    assets: dict[str, ghrest.RemoteAsset]


@dataclass
class _GithubRun:
    """One GitHub target's pass over a batch: releases read once, then kept up to date."""

    settings: GithubSettings
    client: ghrest.Client
    ledger: Path
    derive: Derive | None
    reader: str
    delete_orphans: bool
    dry_run: bool
    releases: dict[str, _Release] = field(default_factory=dict)
    sent: list[str] = field(default_factory=list)
    placed: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    recorded: int = 0
    merged: list[str] = field(default_factory=list)
    on_record: Callable[[str], None] | None = None

    def state(self, tag: str, *, refresh: bool = False) -> _Release:
        if refresh or tag not in self.releases:
            release = self.client.release(tag)
            assets = {a.name: a for a in self.client.assets(release)} if release else {}
            self.releases[tag] = _Release(release, assets)
        return self.releases[tag]

    def ensure(self, tag: str, package: str) -> ghrest.Release:
        state = self.state(tag)
        if state.release is None:
            state.release = self.client.create_release(tag, f"Prebuilt CUDA wheels of {package}.")
        return state.release

    def record(self, entry: LedgerEntry, url: str) -> None:
        """The wheel's entry merged (when new) and its publication recorded, now."""
        self.merged += _merge_entries(self.ledger, [entry])
        self.recorded += record_published_many(self.ledger, [(entry.filename, entry.sha256, self.settings.name, url)])
        self.placed.append((entry.filename, url))
        if self.on_record is not None:
            self.on_record(f"{entry.filename} on {self.settings.name}")

    def upload(self, w: GatedWheel, tag: str, url: str) -> WheelVerdict | None:
        """Send ``w``; None when GitHub says the name is taken meanwhile (the caller looks again)."""
        state = self.state(tag)
        release = self.ensure(tag, w.build_info.package or w.filename.split("-")[0])
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
        for look in range(2):  # a second look after GitHub's 422 "already_exists"
            state = self.state(tag, refresh=look > 0)
            have = state.assets.get(name)
            present = github.Present(have.sha256, have.size, have.state) if have else None
            action, why = github.decide(w.sha256, w.size, present, ledger_sha256, assets=len(state.assets))
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
                return self.verify(w, have, key, tag, url)
            if action is github.Action.CLEAR:
                assert have is not None
                self.client.delete(have)
                del state.assets[name]
            verdict = self.upload(w, tag, url)
            if verdict is not None:
                return verdict
        return WheelVerdict(name, target, Verdict.FAILED, url, "GitHub says the name is taken but does not list it")

    def verify(self, w: GatedWheel, have: ghrest.RemoteAsset, key: Any, tag: str, url: str) -> WheelVerdict:
        name, target = w.filename, self.settings.name
        with tempfile.TemporaryDirectory(prefix="farm-adopt-") as tmp:
            dest = Path(tmp) / name
            try:
                # At most the size GitHub reports (an asset is under 2 GiB): the disk never holds more.
                self.client.download(have, dest, max_bytes=min(have.size, github.ASSET_MAX_BYTES))
            except ghrest.GithubApiError as exc:  # this asset's trouble, not the run's
                return WheelVerdict(name, target, Verdict.FAILED, url,
                                    f"cannot download the unrecorded asset under this name to re-assert it: "
                                    f"{exc.message}; run again, or delete the asset")
            check = reassert(dest, cell=key, ledger=self.ledger, derive=self.derive, reader=self.reader)
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
        del self.state(tag).assets[name]
        verdict = self.upload(w, tag, url)
        if verdict is None or verdict.verdict is not Verdict.PUBLISHED:
            return verdict or WheelVerdict(name, target, Verdict.FAILED, url, "the name was taken again meanwhile")
        return WheelVerdict(name, target, Verdict.REPLACED, url,
                            f"deleted the orphan asset (sha256 {check.sha256}: {reasons}) and sent this build")


def _github(s: GithubSettings, batch: Sequence[GatedWheel], vouchers: Vouchers, *, ledger: Path,
            client: ghrest.Client, derive: Derive | None, reader: str, delete_orphans: bool,
            dry_run: bool, on_record: Callable[[str], None] | None,
            ) -> tuple[TargetOutcome, list[WheelVerdict], tuple[str, ...], int]:
    run = _GithubRun(s, client, ledger, derive, reader, delete_orphans, dry_run, on_record=on_record)
    verdicts: list[WheelVerdict] = []
    stop: str | None = None
    for w in sorted(batch, key=lambda w: w.filename):
        if stop is not None:
            verdicts.append(WheelVerdict(w.filename, s.name, Verdict.FAILED, None, f"not attempted: {stop}"))
            continue
        try:
            recorded = vouchers.ledger.by_filename(w.filename)
            verdicts.append(run.one(w, recorded.sha256 if recorded is not None else None))
        except ghrest.GithubApiError as exc:
            verdicts.append(WheelVerdict(w.filename, s.name, Verdict.FAILED, None, exc.message))
            if exc.status in (401, 403, 429) or exc.status is None:
                # the token, its rate limit or the network: every later wheel would fail the same way
                stop = f"GitHub stopped answering this run ({exc.message})"
    sent = tuple(run.sent)
    outcome = TargetOutcome(s.name, "github", tuple(run.placed), sent, (), tuple(dict.fromkeys(run.warnings)),
                            client.requests, client.rate_limited, client.throttle.waited_s)
    return outcome, verdicts, tuple(run.merged), run.recorded


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
    pusher = _Pusher(ledger, options.push_ledger) if options.push_ledger and not dry_run else None
    for p in planned:
        s = p.settings
        if isinstance(s, GithubSettings):
            outcome, github_verdicts, added, n = _github(
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


@dataclass
class _Pusher:
    """The ledger committed and pushed after each record (:mod:`farm.publish.ledgerpush`). A
    push that fails is not tried again until the run's end: the records stay in the local
    commits meanwhile, and publishing goes on."""

    ledger: Path
    remote: str
    pushes: int = 0
    error: str | None = None

    def __call__(self, what: str) -> None:
        if self.error is None:
            self.error = self._push(f"ledger: {what}")

    def _push(self, message: str) -> str | None:
        from farm.publish.ledgerpush import commit_and_push

        try:
            result = commit_and_push(self.ledger.parent, self.ledger, message, remote=self.remote)
        except (ToolError, LedgerError) as exc:
            return str(exc)
        self.pushes += result.committed
        return None

    def finish(self) -> str | None:
        """A last push (of anything a failed one left behind); its error, if it fails too."""
        if self.error is not None:
            self.error = self._push("ledger: records of a publish")
        return self.error


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
