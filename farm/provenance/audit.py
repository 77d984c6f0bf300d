"""Audit and backfill: published wheels judged against their **own** provenance (DESIGN §4.9).

A wheel's provenance is its embedded ``_build_info.json``, else its ledger entry (by sha256, then
by file name). The verdicts:

- ``ok``: the binary holds what its provenance says it was built for, and today's policy agrees;
- ``wheel-wrong``: the binary differs from its provenance (or the ledger records other bytes
  under its name): a defect;
- ``config-moved``: the binary matches its provenance but today's policy resolves another list:
  bump ``build_epoch`` to rebuild;
- ``unledgered``: no provenance at all (``farm backfill`` records what inspection can say);
- ``inferred``: its only provenance is a backfilled guess, which matches the binary.

:func:`judge` is the pure core; :func:`wheel_facts` reads a wheel; :func:`today_from_config` is
the one place that consults the current configuration.
"""

from __future__ import annotations

import enum
import hashlib
import re
import shutil
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from farm.binary.wheelfile import SafeWheel
from farm.errors import FarmError, LedgerError, NetworkError, TooLarge, ToolError, UsageError, WheelError
from farm.fsutil import sweep_dead_dirs, temp_dir_prefix
from farm.netutil import download, read_page
from farm.provenance import buildinfo
from farm.provenance.buildinfo import BuildInfo, Bundled, LedgerEntry, Published
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerwrite import merge_fragments, write_fragment
from farm.provenance.stamp import WheelName

if TYPE_CHECKING:
    from farm.binary.assertion import Expected
    from farm.model.arch import ArchList
    from farm.model.config import FarmConfig

_CHUNK = 1 << 20


class Verdict(str, enum.Enum):
    OK = "ok"
    WHEEL_WRONG = "wheel-wrong"
    CONFIG_MOVED = "config-moved"
    UNLEDGERED = "unledgered"
    INFERRED = "inferred"


# today's expected list per extension for a provenance, or None when the config cannot say
Today = Callable[[BuildInfo, Iterable[str]], Mapping[str, str] | None]


@dataclass(frozen=True)
class WheelFacts:
    """What the file itself says: bytes, extension contents, embedded provenance."""

    filename: str
    location: str  # path or URL
    sha256: str
    size: int
    found: Mapping[str, str]  # extension archive path -> canonical arch list (native reader)
    extensions: Mapping[str, str]  # extension archive path -> sha256
    embedded: BuildInfo | None
    problem: str | None = None  # unreadable wheel or provenance: judged wheel-wrong
    # with both readers: "<member>: <how they differ>" for each extension they disagree on
    disagreements: tuple[str, ...] = ()
    vendored: Mapping[str, str] = field(default_factory=dict)  # bundled library (*.libs/) -> targets found


@dataclass(frozen=True)
class AuditRow:
    filename: str
    location: str
    verdict: Verdict
    source: str | None  # where the provenance came from: embedded | ledger | None
    reasons: tuple[str, ...]
    found: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"filename": self.filename, "location": self.location, "verdict": self.verdict.value,
                "provenance_source": self.source, "reasons": list(self.reasons), "found": dict(self.found)}


# -- the pure core --------------------------------------------------------------------------------
def _compare(recorded: Mapping[str, str] | None, actual: Mapping[str, str], *, where: str, says: str,
             holds: str) -> list[str]:
    """Differences between a recorded per-extension map and the file's, one line each."""
    if recorded is None:
        return []
    out = []
    for path in sorted(set(recorded) | set(actual)):
        if path not in actual:
            out.append(f"{path}: in {where} but not in the wheel")
        elif path not in recorded:
            out.append(f"{path}: in the wheel but not in {where}")
        elif recorded[path] != actual[path]:
            out.append(f"{path}: {says} {recorded[path] or '(none)'}, {holds} {actual[path] or '(none)'}")
    return out


def vendored_difference(recorded: Mapping[str, Bundled], now: Mapping[str, str]) -> list[str]:
    """How the bundled libraries (``*.libs/``) differ from what a provenance records for them."""
    out = []
    for path in sorted(set(recorded) | set(now)):
        if path not in recorded:
            out.append(f"{path}: a bundled library (found {now[path] or 'no device code'}) that its provenance "
                       "does not record: never asserted")
        elif path not in now:
            out.append(f"{path}: recorded as a bundled library but not in the wheel")
        else:
            got = recorded[path].found
            if _names_of(got) != _names_of(now[path]):
                out.append(f"{path}: recorded as holding {got or '(none)'}, the bundled library holds "
                           f"{now[path] or '(none)'}")
    return out


def _names_of(text: object) -> frozenset[str] | None:
    from farm.model.arch import ArchList as _ArchList

    if not isinstance(text, str):
        return None
    try:
        return frozenset(_ArchList.parse(text).names()) if text else frozenset()
    except FarmError:
        return None


def judge(facts: WheelFacts, ledger_entry: LedgerEntry | None, today: Mapping[str, str] | None,
          *, ledger_sha256_for_name: str | None = None, superseded_by: str | None = None) -> AuditRow:
    """The verdict for one wheel from its facts, its ledger entry and today's expected lists.

    ``superseded_by``: the published wheel of the same cell at a later build_epoch that holds
    today's lists (the rebuild this wheel's config-moved verdict asked for has happened)."""

    def row(verdict: Verdict, source: str | None, reasons: list[str]) -> AuditRow:
        return AuditRow(facts.filename, facts.location, verdict, source, tuple(reasons), facts.found)

    if facts.problem:
        return row(Verdict.WHEEL_WRONG, None, [facts.problem])
    renamed = []  # listed after what the binary itself shows
    if ledger_sha256_for_name is not None and ledger_sha256_for_name != facts.sha256:
        renamed.append(f"the ledger records sha256 {ledger_sha256_for_name} for {facts.filename}; "
                       f"this file is {facts.sha256}")
    provenance, source = ((facts.embedded, "embedded") if facts.embedded is not None
                          else (ledger_entry.info if ledger_entry is not None else None, "ledger"))
    if provenance is None:
        if renamed:
            return row(Verdict.WHEEL_WRONG, "ledger", renamed)
        return row(Verdict.UNLEDGERED, None, ["no embedded _build_info.json and no ledger entry"])

    wrong: list[str] = []
    if provenance.provenance == buildinfo.ASSERTED:
        result = provenance.assertion.result if provenance.assertion is not None else None
        if result != "passed":
            wrong.append(f"its provenance says the assertion {result or 'never ran'}")
    # A passed assertion recorded found == expected: one comparison names the difference once.
    if provenance.found is not None:
        wrong += _compare(provenance.found, facts.found, where="its provenance",
                          says="recorded as holding", holds="the binary holds")
    else:
        wrong += _compare(provenance.expected, facts.found, where="its provenance",
                          says="built to hold", holds="the binary holds")
    wrong += _compare(provenance.extensions, facts.extensions, where="its provenance",
                      says="recorded with sha256", holds="the file's is")
    if facts.embedded is not None and ledger_entry is not None:
        wrong += _compare(ledger_entry.info.found, facts.found, where="the ledger",
                          says="the ledger records", holds="the binary holds")
    if provenance.provenance == buildinfo.ASSERTED:
        wrong += vendored_difference(provenance.bundled, facts.vendored)
        # A stamped wheel renamed to another cell (or epoch) claims what it was not built for.
        wrong += [f"file name: {p}" for p in buildinfo.name_problems(facts.filename, provenance)]
    wrong += renamed
    if wrong:
        return row(Verdict.WHEEL_WRONG, source, wrong)
    if provenance.provenance == buildinfo.INFERRED:
        return row(Verdict.INFERRED, source, ["provenance was inferred by backfill, not asserted at build time"])
    if today is not None:
        built = provenance.expected or {}
        moved = [f"{p}: built for {built.get(p) or '(none)'}, today's policy resolves {today[p] or '(none)'}"
                 for p in sorted(today) if today[p] != built.get(p)]
        if moved:
            advice = (f"superseded by {superseded_by}, published with today's lists: nothing to rebuild"
                      if superseded_by else "bump build_epoch to rebuild")
            return row(Verdict.CONFIG_MOVED, source, [*moved, advice])
        return row(Verdict.OK, source, [])
    return row(Verdict.OK, source, ["not compared with today's policy (no config for this cell)"])


# -- reading a wheel ------------------------------------------------------------------------------
def _hash_member(wheel: SafeWheel, name: str) -> str:
    digest = hashlib.sha256()
    with wheel.zip.open(name) as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def wheel_facts(path: Path, *, location: str | None = None, reader: str = "native",
                cuobjdump: Path | None = None) -> WheelFacts:
    """Inspect ``path`` (native reader, or ``both``), hash it and its extensions, read its provenance.

    An unreadable wheel, binary or ``_build_info.json`` becomes ``problem``: in a sweep over
    thousands of wheels one broken file is a finding, not the end of the sweep.
    """
    from farm.binary.inspection import inspect_wheel

    path = Path(path)
    location = location or str(path)
    sha256 = buildinfo.sha256_file(path)
    size = path.stat().st_size
    embedded = None
    try:
        WheelName.parse(path.name)  # a file pip would not take as a wheel is a finding too
        inspection = inspect_wheel(path, reader, cuobjdump=cuobjdump, stubs=False)  # found sets only
        found = {so.path: so.found.canonical() for so in inspection.extensions}
        disagreements = tuple(f"{so.path}: {so.disagreement}" for so in inspection.extensions + inspection.vendored
                              if not so.agrees)
        vendored = {so.path: so.found.canonical() for so in inspection.vendored}
        with SafeWheel(path) as wheel:
            extensions = {name: _hash_member(wheel, name) for name in found}
            dist_info = wheel.dist_info()
            member = f"{dist_info}/{buildinfo.BUILD_INFO_NAME}"
            if dist_info and member in wheel.names():
                embedded = buildinfo.read_embedded(wheel, member, where=f"{location}!{member}")
    except ToolError:
        raise  # the environment, not the wheel
    except FarmError as exc:
        return WheelFacts(path.name, location, sha256, size, {}, {}, None, problem=_problem(exc, path, location))
    return WheelFacts(path.name, location, sha256, size, found, extensions, embedded,
                      disagreements=disagreements, vendored=vendored)


def _problem(exc: FarmError, path: Path, location: str) -> str:
    """The error with its place inside the wheel (``member: what``); the wheel itself is named
    beside it already. Its fix follows on a second line."""
    where = exc.where or ""
    for wheel in (location, str(path)):
        if where.startswith(wheel):
            where = where[len(wheel):].lstrip("!")
            break
    text = f"{where}: {exc.message}" if where else exc.message
    return f"{text}\n  fix: {exc.hint}" if exc.hint else text


# -- today's policy (the config glue) -------------------------------------------------------------
@dataclass(frozen=True)
class Derived:
    """What the configuration resolves today for a provenance's cell."""

    requested: ArchList  # the cell's list (recipe override or policy row)
    origin: str  # the rule it came from, e.g. "policy x86_64 13.0"
    expected: Expected  # per extension, with the recipe's per-extension lists


# a provenance -> what today's config resolves for its cell, or None when it has no such cell
Derive = Callable[[BuildInfo], "Derived | None"]


def derive_from_config(config: FarmConfig) -> Derive:
    """The one place that re-derives a wheel's expectation from the configuration.

    Deliberately not the wheel's own build spec: the gate and audit ask whether a built wheel
    still matches what today's config says (a trust check), so they resolve the cell again,
    through the same resolver the build used (:func:`farm.model.spec.arch_request`)."""
    from farm.binary.assertion import Expected
    from farm.model.cells import Cell
    from farm.model.spec import arch_request

    def derive(provenance: BuildInfo) -> Derived | None:
        package, cell = provenance.package, provenance.cell
        if package is None or package not in config.recipes or cell.cuda is None or cell.torch is None \
                or cell.python is None or cell.platform is None:
            return None
        recipe = config.recipes[package]
        try:
            request = arch_request(config, recipe, Cell(package, provenance.version, cell.cuda,
                                                        cell.torch, cell.python, cell.platform))
        except (FarmError, KeyError):
            return None
        if request is None:
            return None
        from farm.provenance.postbuild import vendored_rules

        return Derived(request.archs, request.origin,
                       Expected(request.archs, per_extension=request.extensions, vendored=vendored_rules(recipe)))

    return derive


def today_from_config(config: FarmConfig) -> Today:
    """Today's expected list per extension for a provenance's cell, from ``config`` (what
    :func:`derive_from_config` derives, per path)."""
    derive = derive_from_config(config)

    def today(provenance: BuildInfo, paths: Iterable[str]) -> Mapping[str, str] | None:
        derived = derive(provenance)
        if derived is None:
            return None
        return {p: derived.expected.for_extension(p)[0].canonical() for p in paths}

    return today


# -- where wheels are: a folder or an index -------------------------------------------------------
# Nothing a real index serves is larger: GitHub caps an asset below 2 GiB.
MAX_WHEEL_BYTES = 2 << 30


def index_wheels(url: str, *, max_depth: int = 4, timeout: float = 60.0) -> list[tuple[str, str | None]]:
    """(wheel URL, sha256 from the page or None) for every wheel under a simple-API index ``url``
    (PEP 503 or PEP 691): pages are followed below ``url`` only, at most ``max_depth`` levels deep."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise UsageError(f"{url!r} is not an http(s) index URL")
    base = url if url.endswith("/") else url + "/"
    seen_pages: set[str] = set()
    wheels: dict[str, str | None] = {}
    pending = [(base, 0)]
    while pending:
        page, depth = pending.pop()
        if page in seen_pages:
            continue
        seen_pages.add(page)
        try:
            listing = read_page(page, timeout=timeout)
        except TooLarge as exc:
            raise WheelError(f"index page larger than {exc.cap >> 20} MiB", where=page,
                             hint="point the audit at a PEP 503 index (project pages of links)") from None
        except NetworkError as exc:
            raise ToolError(f"cannot fetch {page}: {exc.message}",
                            hint="check the index URL and the network") from None
        except ValueError as exc:
            raise WheelError(f"not a simple-API page: {exc}", where=page,
                             hint="point the audit at a PEP 503 index (project pages of links)") from None
        for file in listing.files:
            if PurePosixPath(urllib.parse.urlsplit(file.url).path).name.endswith(".whl"):
                wheels.setdefault(file.url, file.sha256)
        for sub in listing.pages:
            if sub.startswith(base) and depth < max_depth:
                pending.append((sub, depth + 1))
    return sorted(wheels.items())


def _download(url: str, dest: Path, timeout: float, limit: int | None = None) -> str:
    """Stream ``url`` to ``dest``; return its sha256. Stops (a :class:`WheelError`) past ``limit``
    bytes, so the scratch folder never holds more than that."""
    cap = MAX_WHEEL_BYTES if limit is None else min(limit, MAX_WHEEL_BYTES)
    try:
        return download(url, dest, max_bytes=cap, timeout=timeout).sha256
    except TooLarge:
        raise WheelError(f"larger than {_human(cap)}: "
                         + ("not a wheel any target publishes" if cap == MAX_WHEEL_BYTES
                            else "more than the audit's scratch space (--max-scratch)"),
                         where=url, hint="check what the index links to, or give the audit more scratch") from None
    except NetworkError as exc:
        raise ToolError(f"cannot download {url}: {exc.message}", hint="check the index and the network") from None


def _human(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 and n % (1 << 30) == 0 else f"{n:,} bytes"


@dataclass(frozen=True)
class Located:
    path: Path
    location: str
    problem: str | None = None


@dataclass(frozen=True)
class Shard:
    """``I/N``: this audit judges the wheels whose sha256 (or file name, when the sha256 is not
    known before downloading) falls in bucket I of N; N audits together judge each wheel once."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        try:
            i, n = (int(x) for x in text.split("/"))
        except ValueError:
            raise UsageError(f"--shard {text!r}: write it as I/N, e.g. 0/4") from None
        if not (n >= 1 and 0 <= i < n):
            raise UsageError(f"--shard {text!r}: need 0 <= I < N", hint="the shards of N audits are 0/N ... N-1/N")
        return cls(i, n)

    def takes(self, sha256: str | None, name: str) -> bool:
        if self.count == 1:
            return True
        key = sha256 if sha256 else hashlib.sha256(name.encode()).hexdigest()
        return int(key[:12], 16) % self.count == self.index


class Scratch:
    """Where downloaded wheels wait to be judged: one at a time, each deleted after its verdict,
    at most ``limit`` bytes each. ``peak`` is the most bytes the folder ever held, measured on disk
    after each download, so the bound is observed rather than assumed."""

    def __init__(self, parent: Path | None = None, limit: int | None = None) -> None:
        self.parent, self.limit, self.peak, self.downloads = parent, limit, 0, 0

    @property
    def cap(self) -> int:
        return MAX_WHEEL_BYTES if self.limit is None else min(self.limit, MAX_WHEEL_BYTES)

    def observe(self, folder: Path) -> None:
        self.downloads += 1
        self.peak = max(self.peak, sum(f.stat().st_size for f in folder.iterdir() if f.is_file()))


def _stream(items: Iterable[tuple[str, str | None]], scratch: Scratch, timeout: float,
            shard: Shard | None) -> Iterator[Located]:
    """Download each (URL, sha256 or None) into a private folder, yield it, delete it after use:
    a sweep over thousands of wheels needs the disk of one."""
    if scratch.parent is not None:
        scratch.parent.mkdir(parents=True, exist_ok=True)
    parent = scratch.parent or Path(tempfile.gettempdir())
    sweep_dead_dirs(parent, "farm-audit")  # the downloads of a killed audit
    tmp = Path(tempfile.mkdtemp(prefix=temp_dir_prefix("farm-audit"), dir=parent))
    try:
        for url, sha256 in items:
            name = urllib.parse.unquote(PurePosixPath(urllib.parse.urlsplit(url).path).name)
            if shard is not None and not shard.takes(sha256, name):
                continue
            if not _safe_name(name):
                # "..%2F..%2Fx.whl" must not become a path outside tmp: not even downloaded.
                dest = tmp / "unsafe-file-name.whl"
                dest.touch()
                yield Located(dest, url, f"the index links a file named {name!r}, which is not a plain "
                                         "file name")
            else:
                dest = tmp / name
                try:
                    got = _download(url, dest, timeout, scratch.limit)
                except WheelError as exc:  # oversized: a finding about this link, not the end of the audit
                    dest.write_bytes(b"")
                    yield Located(dest, url, exc.message)
                else:
                    scratch.observe(tmp)
                    problem = (f"the index says sha256 {sha256}, the served file is {got}"
                               if sha256 and sha256 != got else None)
                    yield Located(dest, url, problem)
            dest.unlink(missing_ok=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ledger_urls(path: Path) -> Iterator[tuple[str, str]]:
    """(URL, sha256) of every wheel the ledger records as published over http(s): the fleet,
    read from the ledger line by line (the first http(s) place of each wheel)."""
    from farm.provenance.ledger import iter_entries

    for _, entry in iter_entries(path):  # the ledger's own keys only: no build info is read
        for place in entry.get("published") or ():
            url = place.get("url", "")
            if url.startswith(("http://", "https://")):
                yield url, entry["sha256"]
                break


def _safe_name(name: str) -> bool:
    return bool(name) and not name.startswith(".") and not any(c in name for c in "/\\\0")


def iter_wheels(where: str, *, timeout: float = 60.0, shard: Shard | None = None,
                scratch: Scratch | None = None) -> Iterator[Located]:
    """Every wheel under a folder (recursively), a single wheel file, or a PEP 503 index URL.

    Index wheels are downloaded one at a time into a private temporary folder and removed after
    use, so a sweep over thousands of assets needs the disk of one.
    """
    if where.startswith(("http://", "https://")):
        yield from _stream(index_wheels(where, timeout=timeout), scratch or Scratch(), timeout, shard)
        return
    path = Path(where)
    if path.is_file() and path.suffix == ".whl":
        if shard is None or shard.takes(None, path.name):
            yield Located(path, str(path))
    elif path.is_dir():
        for wheel in sorted(path.rglob("*.whl")):
            if shard is None or shard.takes(None, wheel.name):
                yield Located(wheel, str(wheel))
    else:
        raise UsageError(f"{where}: not a wheel, a folder or an http(s) index URL",
                         hint="pass a folder of wheels, a .whl file or an index URL")


def fleet_wheels(ledger_path: Path, *, timeout: float = 60.0, shard: Shard | None = None,
                 scratch: Scratch | None = None) -> Iterator[Located]:
    """Every wheel the ledger says was published over http(s), downloaded one at a time."""
    yield from _stream(ledger_urls(ledger_path), scratch or Scratch(), timeout, shard)


# -- audit ----------------------------------------------------------------------------------------
def _facts(located: Located) -> WheelFacts:
    facts = wheel_facts(located.path, location=located.location)
    if located.problem:
        return WheelFacts(facts.filename, facts.location, facts.sha256, facts.size, facts.found,
                          facts.extensions, facts.embedded, problem=located.problem)
    return facts


def _ledger_entry(ledger: LedgerIndex, facts: WheelFacts) -> tuple[LedgerEntry | None, str | None]:
    """The ledger entry with this wheel's bytes (schema-validated), and the sha256 recorded for
    its file name."""
    by_name = ledger.by_filename(facts.filename)
    rec = ledger.by_sha256(facts.sha256)
    entry = ledger.ledger_entry(rec) if rec is not None else None
    return entry, by_name.sha256 if by_name is not None else None


def audit(where: str | Iterable[Located], ledger: LedgerIndex, today: Today | None = None, *,
          progress: Callable[[AuditRow], None] | None = None) -> list[AuditRow]:
    """One row per wheel under ``where`` (or of the :class:`Located` wheels it yields, e.g.
    :func:`iter_wheels` with a shard, or :func:`fleet_wheels`); ``progress`` sees each row as it
    is made. A downloaded wheel is judged before the next one is fetched, then deleted."""
    rows = []
    newest: dict[tuple[Any, ...], Any] | None = None  # cell -> its latest-epoch asserted record, built on first use
    for located in iter_wheels(where) if isinstance(where, str) else where:
        facts = _facts(located)
        entry, name_sha = _ledger_entry(ledger, facts)
        provenance = facts.embedded if facts.embedded is not None else entry.info if entry is not None else None
        today_map = None
        superseded_by = None
        if today is not None and provenance is not None and provenance.provenance == buildinfo.ASSERTED:
            today_map = today(provenance, facts.found)
            if today_map is not None and today_map != dict(provenance.expected or {}):
                if newest is None:
                    newest = _newest_by_cell(ledger)
                superseded_by = _superseder(ledger, newest, provenance, today_map)
        rows.append(judge(facts, entry, today_map, ledger_sha256_for_name=name_sha, superseded_by=superseded_by))
        if progress is not None:
            progress(rows[-1])
    return rows


def _newest_by_cell(ledger: LedgerIndex) -> dict[tuple[Any, ...], Any]:
    newest: dict[tuple[Any, ...], Any] = {}
    for rec in ledger.records:
        if rec.key is None or rec.provenance != buildinfo.ASSERTED:
            continue
        cell, epoch = tuple(rec.key[:-1]), rec.key[-1]
        if cell not in newest or epoch > newest[cell].key[-1]:
            newest[cell] = rec
    return newest


def _superseder(ledger: LedgerIndex, newest: Mapping[tuple[Any, ...], Any], provenance: BuildInfo,
                today_map: Mapping[str, str]) -> str | None:
    """The file name of a published, later-epoch wheel of the same cell built with today's lists."""
    cell = provenance.cell
    key = (provenance.package, provenance.version, cell.cuda, cell.torch, cell.python, cell.platform)
    rec = newest.get(key)
    if rec is None or provenance.build_epoch is None or rec.key[-1] <= provenance.build_epoch:
        return None
    entry = ledger.ledger_entry(rec)
    if not entry.published or dict(entry.info.expected or {}) != dict(today_map):
        return None
    return str(rec.filename)


# -- backfill -------------------------------------------------------------------------------------
_LOCAL_LABEL = re.compile(r"^cu(?P<cuda>\d{3})(?:torch(?P<torch>\d+\.\d+))?$")


def inferred_cell(name: WheelName) -> dict[str, str | None]:
    """What a wheel's name says of its cell; ``None`` for what it does not say."""
    from farm.provenance.postbuild import cell_platform, cell_python

    cuda = torch = None
    m = _LOCAL_LABEL.match(name.local or "")
    if m:
        digits = m["cuda"]
        cuda = f"{digits[:2]}.{digits[2:]}"
        torch = m["torch"] or "none"  # farm's label drops torch for torch-free packages
    try:
        python: str | None = cell_python(name)
    except WheelError:
        python = None
    try:
        platform: str | None = cell_platform(name)
    except WheelError:
        platform = None
    return {"cuda": cuda, "torch": torch, "python": python, "platform": platform}


def inferred_entry(facts: WheelFacts, *, package: str | None = None) -> LedgerEntry:
    """The ledger entry backfill writes: inspection and the name, nothing guessed beyond them."""
    name = WheelName.parse(facts.filename)
    info = buildinfo.inferred_build_info(
        dist=name.dist, version=name.public_version, cell=inferred_cell(name), found=facts.found,
        extensions=facts.extensions, package=package,
    )
    published: tuple[Published, ...] = ()
    if facts.location.startswith(("http://", "https://")):
        published = (Published(urllib.parse.urlsplit(facts.location).netloc, facts.location),)
    return info.ledger_entry(filename=facts.filename, sha256=facts.sha256, size=facts.size, published=published)


@dataclass(frozen=True)
class BackfillResult:
    ledger: Path
    added: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (filename, why)

    def to_json(self) -> dict[str, Any]:
        return {"ledger": str(self.ledger), "added": list(self.added),
                "skipped": [{"filename": f, "reason": r} for f, r in self.skipped]}


def _package_for(config: FarmConfig | None, dist: str) -> str | None:
    if config is None:
        return None
    from packaging.utils import canonicalize_name

    matches = [r.name for r in config.recipes.values() if canonicalize_name(r.dist) == canonicalize_name(dist)]
    return matches[0] if len(matches) == 1 else None


def backfill(where: str, ledger_path: Path, *, config: FarmConfig | None = None) -> BackfillResult:
    """Write ``inferred`` ledger entries for the wheels under ``where`` that have no provenance.

    Entries go through fragments and the ledger's locked merge, like every other ledger write.
    """
    ledger_path = Path(ledger_path)
    ledger = LedgerIndex.load(ledger_path) if ledger_path.exists() else LedgerIndex.empty()
    skipped: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="farm-backfill-") as tmp:
        fragments = Path(tmp)
        for located in iter_wheels(where):
            facts = _facts(located)
            entry, name_sha = _ledger_entry(ledger, facts)
            if facts.problem:
                skipped.append((facts.filename, f"unreadable: {facts.problem}"))
            elif facts.embedded is not None:
                skipped.append((facts.filename, "has embedded provenance"))
            elif entry is not None or name_sha is not None:
                skipped.append((facts.filename, "already in the ledger"))
            else:
                name = WheelName.parse(facts.filename)
                try:
                    write_fragment(inferred_entry(facts, package=_package_for(config, name.dist)), fragments)
                except LedgerError as exc:  # the same file name twice with other bytes
                    skipped.append((facts.filename, str(exc)))
        if not any(fragments.iterdir()):
            return BackfillResult(ledger_path, (), tuple(skipped))
        result = merge_fragments(ledger_path, fragments)
    skipped += [(f, "already in the ledger") for f in result.already]
    return BackfillResult(ledger_path, result.added, tuple(skipped))
