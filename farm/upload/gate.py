"""The upload gate: every wheel of a batch is checked before anything is sent.

For each wheel: its embedded ``_build_info.json`` says ``asserted`` and ``passed``; its file name
agrees with the cell that provenance describes; a ledger entry or fragment holds this exact
sha256 (and the same file name and found targets); a fresh native inspection finds exactly the
recorded targets. One refused wheel refuses the whole batch: a partial upload leaves an index
that offers some cells and not others, which is worse than none.

:func:`judge` is the pure core (facts in, refusals out); :func:`run_gate` gathers the facts.
"""

from __future__ import annotations

import enum
import json
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)

from ..arch import ArchList
from ..buildinfo import BUILD_INFO_NAME, sha256_file
from ..errors import FarmError
from ..ledger import FRAGMENT_SUFFIX, LedgerIndex, read_fragment


class Check(str, enum.Enum):
    READABLE = "readable"
    STAMPED = "stamped"
    ASSERTED = "asserted"
    NAME = "name"
    LEDGER = "ledger"
    INSPECTION = "inspection"


@dataclass(frozen=True)
class Refusal:
    wheel: str
    check: Check
    message: str
    fix: str

    def line(self) -> str:
        return f"{self.wheel}: {self.check.value}: {self.message}; fix: {self.fix}"

    def to_json(self) -> dict[str, str]:
        return {"wheel": self.wheel, "check": self.check.value, "message": self.message, "fix": self.fix}


@dataclass(frozen=True)
class GatedWheel:
    """A wheel that passed: its facts, and the ledger entry (or fragment) that vouches for it."""

    path: Path
    filename: str
    sha256: str
    size: int
    build_info: Mapping[str, Any]
    entry: Mapping[str, Any]
    entry_source: str  # "ledger" or "fragment"


@dataclass(frozen=True)
class GateResult:
    passed: tuple[GatedWheel, ...]
    refused: tuple[Refusal, ...]

    @property
    def ok(self) -> bool:
        return not self.refused

    def lines(self) -> list[str]:
        return [r.line() for r in self.refused]


# --------------------------------------------------------------------------------------------
# Pure core
# --------------------------------------------------------------------------------------------
_FIX_POSTBUILD = "run `farm postbuild WHEEL --out DIR` on the built wheel and upload its output"
_FIX_REBUILD = "rebuild the cell (`farm build`); a wheel changed after postbuild is never uploaded"


def local_label(cell: Mapping[str, Any]) -> str:
    """``cu128torch2.8``, or ``cu128`` for a package that does not link torch."""
    cuda = f"cu{str(cell.get('cuda', '')).replace('.', '')}"
    torch = cell.get("torch")
    return cuda if torch in (None, "none") else f"{cuda}torch{torch}"


def _platform_matches(cell_platform: str, wheel_platform: str) -> bool:
    if wheel_platform == cell_platform:
        return True
    # linux_x86_64 is published as manylinux_2_28_x86_64 / musllinux_1_2_x86_64 after repair.
    if cell_platform.startswith("linux_"):
        arch = cell_platform[len("linux_"):]
        return wheel_platform.endswith("_" + arch) and wheel_platform.startswith(("manylinux", "musllinux"))
    return False


def name_problems(filename: str, info: Mapping[str, Any]) -> list[str]:
    """Where the file name disagrees with the cell its provenance describes (empty: agrees)."""
    try:
        name, version, build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        return [f"not a valid wheel file name ({exc})"]
    cell = info.get("cell") or {}
    problems: list[str] = []
    dist = info.get("dist") or ""
    if canonicalize_name(dist) != name:
        problems.append(f"project {name} but provenance says {dist!r}")
    if version.public != str(info.get("version")):
        problems.append(f"version {version.public} but provenance says {info.get('version')!r}")
    want = local_label(cell)
    if (version.local or "") != want:
        problems.append(f"local label {version.local or '(none)'} but the cell is {want}")
    epoch = info.get("build_epoch") or 0
    have = build[0] if build else 0
    if have != epoch:
        problems.append(f"build tag {have or '(none)'} but build_epoch is {epoch}")
    python = cell.get("python")
    if python == "abi3":
        if not any(t.abi == "abi3" for t in tags):
            problems.append("no abi3 tag but the cell is abi3")
    elif python and not any(t.interpreter == python for t in tags):
        problems.append(f"python tag {'.'.join(sorted({t.interpreter for t in tags}))} but the cell is {python}")
    plat = cell.get("platform")
    if plat and not any(_platform_matches(plat, t.platform) for t in tags):
        problems.append(f"platform {'.'.join(sorted({t.platform for t in tags}))} but the cell is {plat}")
    return problems


def _archs(text: str | None) -> frozenset[str]:
    if not text:
        return frozenset()
    return frozenset(ArchList.parse(text).names())


def found_difference(recorded: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """Per extension, how the fresh inspection differs from the recorded ``found`` (empty: equal)."""
    out: list[str] = []
    for so in sorted(set(recorded) | set(now)):
        if so not in now:
            out.append(f"{so} is recorded but not in the wheel")
            continue
        if so not in recorded:
            out.append(f"{so} is in the wheel but not recorded")
            continue
        want, have = _archs(recorded[so]), _archs(now[so])
        if want != have:
            missing = ";".join(sorted(want - have)) or "-"
            extra = ";".join(sorted(have - want)) or "-"
            out.append(f"{so}: missing {missing}, extra {extra}")
    return out


def judge(
    filename: str,
    sha256: str,
    info: Mapping[str, Any] | None,
    entry: Mapping[str, Any] | None,
    same_name_sha256: str | None,
    found_now: Mapping[str, str] | None,
    inspection_error: str | None = None,
) -> list[Refusal]:
    """Every reason to refuse one wheel, from facts already gathered.

    ``entry``: the ledger entry or fragment with this sha256 (None: none has it).
    ``same_name_sha256``: the sha256 another entry records for this file name, if any.
    """
    def refuse(check: Check, message: str, fix: str) -> Refusal:
        return Refusal(filename, check, message, fix)

    if info is None:
        return [refuse(Check.STAMPED, f"no .dist-info/{BUILD_INFO_NAME}: the wheel was never asserted",
                       _FIX_POSTBUILD)]
    out: list[Refusal] = []
    provenance = info.get("provenance")
    result = (info.get("assertion") or {}).get("result")
    if provenance != "asserted" or result != "passed":
        out.append(refuse(Check.ASSERTED,
                          f"provenance is {provenance!r} and the assertion {result!r}; only asserted, "
                          "passed wheels are published",
                          "rebuild with `farm build` so the post-build assertion runs and passes"))
    problems = name_problems(filename, info)
    if problems:
        out.append(refuse(Check.NAME, "file name does not match its provenance: " + "; ".join(problems),
                          "upload the file postbuild wrote, unrenamed; a wheel of another cell is never "
                          "relabelled by hand"))
    if entry is None:
        if same_name_sha256 is not None:
            out.append(refuse(Check.LEDGER,
                              f"the ledger records {filename} with sha256 {same_name_sha256}, this file "
                              f"has {sha256}: it changed after postbuild", _FIX_REBUILD))
        else:
            out.append(refuse(Check.LEDGER, f"no ledger entry or fragment has sha256 {sha256}",
                              "upload the fragment postbuild wrote beside the wheel "
                              f"(<wheel>{FRAGMENT_SUFFIX}), or run `farm postbuild` again"))
    else:
        if entry.get("filename") != filename:
            out.append(refuse(Check.LEDGER,
                              f"sha256 {sha256} is recorded for {entry.get('filename')!r}, not this name",
                              "upload the file under the name postbuild gave it"))
        keys = ("cell", "build_epoch", "found", "version", "dist")
        differ = [k for k in keys if entry.get(k) != info.get(k)]
        if differ:
            out.append(refuse(Check.LEDGER,
                              f"the ledger entry and the embedded provenance differ in {', '.join(differ)} "
                              "(a wheel from another cell?)", _FIX_REBUILD))
    if inspection_error is not None:
        out.append(refuse(Check.INSPECTION, f"re-inspection failed: {inspection_error}", _FIX_REBUILD))
    elif found_now is not None:
        diff = found_difference(info.get("found") or {}, found_now)
        if diff:
            out.append(refuse(Check.INSPECTION,
                              "re-inspection differs from the recorded targets: " + "; ".join(diff),
                              _FIX_REBUILD))
    return out


# --------------------------------------------------------------------------------------------
# I/O shell
# --------------------------------------------------------------------------------------------
def read_build_info(path: Path) -> dict[str, Any] | None:
    """The wheel's ``.dist-info/_build_info.json`` (None when it has none)."""
    from .wheelmeta import read_member

    data = read_member(path, BUILD_INFO_NAME)
    if data is None:
        return None
    try:
        info = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FarmError(f"{BUILD_INFO_NAME} is not JSON: {exc}", where=path.name) from None
    if not isinstance(info, dict):
        raise FarmError(f"{BUILD_INFO_NAME} is not a JSON object", where=path.name)
    return info


def native_found(path: Path) -> dict[str, str]:
    """Per extension in the wheel, the canonical target list the native reader finds now."""
    from ..inspection import inspect_wheel

    report = inspect_wheel(path, reader="native")
    return {so.path: so.found.canonical() for so in report.extensions}


@dataclass(frozen=True)
class Vouchers:
    """Where the gate looks for a wheel's ledger entry: the committed ledger and new fragments."""

    ledger: LedgerIndex
    fragments: Mapping[str, Mapping[str, Any]]  # sha256 -> entry

    @classmethod
    def load(cls, ledger_path: Path | None, fragment_dirs: Iterable[Path]) -> Vouchers:
        exists = ledger_path is not None and ledger_path.exists()
        index = LedgerIndex.load(ledger_path) if exists else LedgerIndex.empty()  # type: ignore[arg-type]
        fragments: dict[str, Mapping[str, Any]] = {}
        for directory in fragment_dirs:
            if directory.is_dir():
                for frag in sorted(directory.glob(f"*{FRAGMENT_SUFFIX}")):
                    entry, rec = read_fragment(frag)
                    fragments.setdefault(rec.sha256, entry)
        return cls(index, fragments)

    def by_sha256(self, sha256: str) -> tuple[Mapping[str, Any] | None, str]:
        """The entry with this sha256 and where it came from: the ledger first (it holds what
        was already published), else a fragment of this batch."""
        rec = self.ledger.by_sha256(sha256)
        if rec is not None:
            return self.ledger.entry(rec), "ledger"
        if sha256 in self.fragments:
            return self.fragments[sha256], "fragment"
        return None, ""

    def by_filename(self, filename: str) -> Mapping[str, Any] | None:
        rec = self.ledger.by_filename(filename)
        if rec is not None:
            return self.ledger.entry(rec)
        for entry in self.fragments.values():
            if entry.get("filename") == filename:
                return entry
        return None

    def sha256_of_name(self, filename: str) -> str | None:
        entry = self.by_filename(filename)
        return str(entry.get("sha256")) if entry is not None else None


def run_gate(
    wheels: Iterable[Path],
    vouchers: Vouchers,
    *,
    inspect: Callable[[Path], Mapping[str, str]] = native_found,
) -> GateResult:
    """Check every wheel; nothing is sent by the caller unless ``result.ok``."""
    passed: list[GatedWheel] = []
    refused: list[Refusal] = []
    for path in sorted(Path(p) for p in wheels):
        name = path.name
        try:
            sha = sha256_file(path)
            size = path.stat().st_size
            info = read_build_info(path)
        except (OSError, zipfile.BadZipFile, FarmError, ValueError) as exc:
            refused.append(Refusal(name, Check.READABLE, f"cannot read the wheel: {exc}", _FIX_REBUILD))
            continue
        entry, source = vouchers.by_sha256(sha)
        other = vouchers.sha256_of_name(name) if entry is None else None
        found_now: Mapping[str, str] | None = None
        error: str | None = None
        if info is not None:
            try:
                found_now = inspect(path)
            except (FarmError, OSError, zipfile.BadZipFile, ValueError) as exc:
                error = str(exc).splitlines()[0]
        problems = judge(name, sha, info, entry, other, found_now, error)
        if problems:
            refused.extend(problems)
        else:
            assert entry is not None and info is not None
            passed.append(GatedWheel(path, name, sha, size, info, entry, source))
    return GateResult(tuple(passed), tuple(refused))
