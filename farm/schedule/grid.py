"""The grid against upstream: which (CUDA, torch, Python, platform) PyTorch ships, read from its
published wheel index, and what ``_defaults.yml`` lacks (the public farm's "upstream torch watcher").

PyTorch publishes one PEP 503 index per CUDA line (``https://download.pytorch.org/whl/cu130``);
its ``torch/`` page lists every wheel: ``torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl``.
PyPI's torch wheels carry no local label (``torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl``):
their CUDA line shows only in their requirements (``nvidia-cuda-runtime-cu12==12.8.90`` up to torch
2.10, ``cuda-toolkit[cudart,...]==13.0.2`` from 2.11 on), read from the core metadata the index
serves beside each wheel (PEP 658, ``<wheel>.metadata``).

:func:`shipped` reads a page into :class:`Shipped` wheels (pure, given the CUDA lines of the
unlabelled wheels); :func:`~farm.toolkit.components.cuda_line` reads a line from requirements
(pure); :func:`read_index`
fetches a page and the metadata it needs, and refuses to read nothing: a page with no wheel of the
line is an error that says what it held, never "the grid is complete". :func:`propose` compares
with the grid: new rows, newer patch releases, Pythons a row lacks, and phantoms (cells a row
implies that upstream does not ship on a platform).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from email.policy import compat32
from urllib.parse import urljoin

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from farm.errors import NetworkError, SourceError
from farm.model.config import Defaults, Phantom
from farm.netutil import IndexPage, LinkedFile, fetch_bytes, read_page
from farm.toolkit.components import cuda_line

# wheel platform tag suffix -> farm platform
_PLATFORM_SUFFIX = {"_x86_64": "linux_x86_64", "_aarch64": "linux_aarch64"}


@dataclass(frozen=True, order=True)
class Shipped:
    """One upstream torch wheel: its CUDA line, version and (Python, platform)."""

    cuda: str  # "13.0"
    torch: Version
    python: str  # "3.11"
    platform: str  # farm's: linux_x86_64 | linux_aarch64 | win_amd64


def farm_platform(tag: str) -> str | None:
    """farm's platform of a wheel's platform tag (``manylinux_2_28_x86_64`` -> ``linux_x86_64``), else None."""
    if tag == "win_amd64":
        return "win_amd64"
    if tag.startswith(("manylinux", "linux")):
        return next((plat for suffix, plat in _PLATFORM_SUFFIX.items() if tag.endswith(suffix)), None)
    return None


def _torch_wheel(filename: str) -> tuple[Version, frozenset[Tag]] | None:
    """(version, tags) of a torch release wheel's name, else None (another project, an sdist, a
    pre-release or dev build, a name that does not parse)."""
    if not filename.endswith(".whl"):
        return None
    try:
        dist, version, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    if dist != "torch" or version.is_prerelease or version.is_devrelease:
        return None
    return version, tags


def requirements(metadata: bytes) -> list[str]:
    """The ``Requires-Dist`` lines of a core metadata file (``METADATA``, email header format)."""
    message = BytesHeaderParser(policy=compat32).parsebytes(metadata)
    return [str(value) for value in message.get_all("Requires-Dist") or ()]


def unlabelled(page: IndexPage) -> dict[tuple[str, str], LinkedFile | None]:
    """The unlabelled torch wheels of a page (PyPI's), one per (version, farm platform): the one
    whose metadata tells that build's CUDA line (None where the index serves no metadata)."""
    out: dict[tuple[str, str], LinkedFile | None] = {}
    for file in page.files:
        wheel = _torch_wheel(file.filename)
        if wheel is None or wheel[0].local is not None:
            continue
        for tag in wheel[1]:
            plat = farm_platform(tag.platform)
            if plat is not None and out.get((str(wheel[0]), plat)) is None:
                out[(str(wheel[0]), plat)] = file if file.metadata else None
    return out


def shipped(page: IndexPage, cuda: str, lines: Mapping[tuple[str, str], str | None] | None = None) -> list[Shipped]:
    """The CUDA ``cuda`` torch wheels a ``torch/`` project page lists: those labelled ``+cuXYZ``
    for the line, and unlabelled ones whose (version, platform) ``lines`` maps to it. Wheels of
    another label (``+cpu``, another ``+cuXYZ``), free-threaded or abi3 builds, and names that do
    not parse are not cells of this line and are left out."""
    cu = "cu" + cuda.replace(".", "")
    lines = lines or {}
    out = set()
    for file in page.files:
        wheel = _torch_wheel(file.filename)
        if wheel is None:
            continue
        version, tags = wheel
        for tag in tags:
            if not (tag.interpreter.startswith("cp") and tag.abi == tag.interpreter):  # cp313t, abi3: not a cell
                continue
            plat = farm_platform(tag.platform)
            if plat is None:
                continue
            if version.local != cu and not (version.local is None and lines.get((str(version), plat)) == cuda):
                continue
            digits = tag.interpreter[2:]
            out.add(Shipped(cuda, Version(version.public), f"{digits[0]}.{digits[1:]}", plat))
    return sorted(out)


def page_url(index: str, cuda: str) -> str:
    """The ``torch/`` page of a CUDA line's index (``{cu}`` in ``index`` becomes ``cu130``)."""
    base = index.replace("{cu}", "cu" + cuda.replace(".", ""))
    return urljoin(base if base.endswith("/") else base + "/", "torch/")


MAX_METADATA = 1 << 20  # torch's METADATA is ~10 KB
MAX_METADATA_FILES = 400  # PyPI lists ~50 torch releases on 2 Linux platforms


def _read_lines(page: IndexPage, *, timeout: float) -> tuple[dict[tuple[str, str], str | None], int]:
    """The CUDA line of each unlabelled (version, platform), from one wheel's metadata each; and
    how many had no metadata to read."""
    lines: dict[tuple[str, str], str | None] = {}
    unread = 0
    for key, file in sorted(unlabelled(page).items())[:MAX_METADATA_FILES]:
        if file is None:
            unread += 1
            continue
        url = file.url + ".metadata"
        try:
            body, _final, _type = fetch_bytes(url, max_bytes=MAX_METADATA, timeout=timeout)
        except NetworkError as exc:
            raise SourceError(f"cannot read {file.filename}'s metadata at {url} ({exc.message})",
                              hint="check the network, or pass --index URL of a mirror") from None
        lines[key] = cuda_line(requirements(body))
    return lines, unread


def read_index(index: str, cuda: str, *, timeout: float = 60) -> list[Shipped]:
    """Fetch and parse the ``torch/`` page of ``index`` for CUDA line ``cuda`` (and the metadata of
    its unlabelled wheels); a page with no wheel of the line is a :class:`SourceError` saying what
    the page held."""
    url = page_url(index, cuda)
    try:
        page = read_page(url, timeout=timeout)
    except NetworkError as exc:
        raise SourceError(f"cannot read PyTorch's index page {url} ({exc.message})",
                          hint="check the network, or pass --index URL of a mirror in PyTorch's layout") from None
    except ValueError as exc:
        raise SourceError(f"{url} is not a PEP 503/691 project page: {exc}") from None
    lines, unread = _read_lines(page, timeout=timeout)
    found = shipped(page, cuda, lines)
    if not found:
        raise SourceError(f"read no CUDA {cuda} torch wheel from {url}: {_held(page, lines, unread)}",
                          hint="an empty answer is not a complete grid: check --index (PyTorch's per-line "
                               "index, {cu} for the line, or a PEP 658 index such as PyPI's simple API)")
    return found


def _held(page: IndexPage, lines: Mapping[tuple[str, str], str | None], unread: int) -> str:
    """What a page held, for the message when none of it was a wheel of the line."""
    wheels = [w for w in (_torch_wheel(f.filename) for f in page.files) if w is not None]
    labels = sorted({str(v.local) for v, _ in wheels if v.local is not None})
    flavours = sorted({line or "none (CPU)" for line in lines.values()})
    parts = [f"{len(page.files)} file(s), {len(wheels)} torch release wheel(s)"]
    if labels:
        parts.append(f"labelled {', '.join(labels)}")
    if lines:
        parts.append(f"unlabelled builds whose requirements name CUDA {', '.join(flavours)}")
    if unread:
        parts.append(f"{unread} unlabelled build(s) without metadata (PEP 658) to tell their CUDA line")
    return "; ".join(parts)


@dataclass(frozen=True)
class RowProposal:
    cuda: str
    torch: str  # full version
    pythons: tuple[str, ...]
    why: str  # new | newer release | more pythons

    def yaml(self) -> str:
        pys = ", ".join(f"'{p}'" for p in self.pythons)
        return f"  - {{cuda: '{self.cuda}', torch: '{self.torch}', python: [{pys}]}}"


@dataclass(frozen=True)
class Proposals:
    rows: tuple[RowProposal, ...] = ()
    phantoms: tuple[Phantom, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def __bool__(self) -> bool:
        return bool(self.rows or self.phantoms)

    def to_json(self) -> dict[str, object]:
        return {
            "rows": [{"cuda": r.cuda, "torch": r.torch, "python": list(r.pythons), "why": r.why} for r in self.rows],
            "phantoms": [{"cuda": p.cuda, "torch": p.torch, "python": p.python, "platform": p.platform}
                         for p in self.phantoms],
            "notes": list(self.notes),
        }

    def render(self) -> str:
        if not self:
            return "\n".join([*self.notes, "the grid has every (CUDA, torch, Python) upstream ships"])
        lines = list(self.notes)
        if self.rows:
            lines.append("# grid rows to add or update in _defaults.yml:")
            lines += [f"{r.yaml()}   # {r.why}" for r in self.rows]
        if self.phantoms:
            lines.append("# phantoms to add (upstream ships no wheel for these cells):")
            lines += [f"  - {{cuda: '{p.cuda}', torch: '{p.torch}', python: '{p.python}', platform: {p.platform}}}"
                      for p in self.phantoms]
        return "\n".join(lines)


def _minor(v: Version) -> str:
    return f"{v.major}.{v.minor}"


def propose(defaults: Defaults, shipped: Iterable[Shipped], cuda_lines: Iterable[str]) -> Proposals:
    """What the grid lacks against ``shipped`` on ``cuda_lines``. A torch minor older than the
    line's oldest grid row is history, not a proposal; Pythons outside the configured range are
    left out; phantoms are proposed on the platforms the farm builds (aarch64 only on lines with an
    aarch64 policy row, since others build no aarch64 cells)."""
    by_key: dict[tuple[str, str], list[Shipped]] = {}
    for s in shipped:
        by_key.setdefault((s.cuda, _minor(s.torch)), []).append(s)
    rows = {(r.cuda, r.torch_minor): r for r in defaults.grid}
    lo, hi = Version(defaults.python_min), Version(defaults.python_max)
    row_props: list[RowProposal] = []
    phantoms: list[Phantom] = []
    for cuda in cuda_lines:
        own = [Version(r.torch) for r in defaults.grid if r.cuda == cuda]
        oldest = min(own) if own else None
        for (line, minor), wheels in sorted(by_key.items(), key=lambda kv: (kv[0][0], Version(kv[0][1]))):
            if line != cuda or (oldest is not None and Version(minor) < Version(_minor(oldest))):
                continue
            latest = max(w.torch for w in wheels)
            current = [w for w in wheels if w.torch == latest]
            pythons = tuple(sorted({w.python for w in current if lo <= Version(w.python) <= hi}, key=Version))
            if not pythons:
                continue
            row = rows.get((cuda, minor))
            if row is None:
                row_props.append(RowProposal(cuda, str(latest), pythons, "new"))
                grid_pythons: tuple[str, ...] = pythons
            else:
                merged = tuple(sorted(set(row.pythons) | set(pythons), key=Version))
                why = []
                if Version(row.torch) < latest:
                    why.append(f"newer release than {row.torch}")
                if merged != tuple(sorted(row.pythons, key=Version)):
                    why.append("more pythons: " + ", ".join(p for p in merged if p not in row.pythons))
                if why:
                    row_props.append(RowProposal(cuda, str(max(latest, Version(row.torch))), merged, "; ".join(why)))
                grid_pythons = merged
            have = {(w.python, w.platform) for w in current}
            for py in grid_pythons:
                for plat in defaults.platforms:
                    if plat == "linux_aarch64" and cuda not in defaults.policy.rows.get("aarch64", {}):
                        continue
                    phantom = Phantom(cuda, minor, py, plat)
                    if (py, plat) not in have and phantom not in defaults.phantoms:
                        phantoms.append(phantom)
    return Proposals(tuple(row_props), tuple(phantoms))


def indexes_for(defaults: Defaults, cuda_lines: Iterable[str], override: str | None) -> Mapping[str, str | None]:
    """The index to read per CUDA line: ``override`` (``{cu}`` templated), else the line's
    ``torch_index`` (None where that is ``pip``: pip's configuration lists no per-line page)."""
    indexes = {cuda: override or defaults.torch_index.get(cuda) for cuda in cuda_lines}
    return {cuda: None if index in (None, "pip") else index for cuda, index in indexes.items()}
