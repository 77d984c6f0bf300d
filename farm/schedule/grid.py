"""The grid against upstream: which (CUDA, torch, Python, platform) PyTorch ships, read from its
published wheel index, and what ``_defaults.yml`` lacks (the public farm's "upstream torch watcher").

PyTorch publishes one PEP 503 index per CUDA line (``https://download.pytorch.org/whl/cu130``);
its ``torch/`` page lists every wheel: ``torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl``.
:func:`parse_page` reads a page into :class:`Shipped` wheels (pure); :func:`read_index` fetches one;
:func:`propose` compares with the grid: new rows, newer patch releases, Pythons a row lacks, and
phantoms (cells a row implies that upstream does not ship on a platform).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urljoin

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from farm.errors import NetworkError, SourceError
from farm.model.config import Defaults, Phantom
from farm.netutil import IndexPage, read_page

# wheel platform tag suffix -> farm platform
_PLATFORM_SUFFIX = {"_x86_64": "linux_x86_64", "_aarch64": "linux_aarch64"}


@dataclass(frozen=True, order=True)
class Shipped:
    """One upstream torch wheel: its CUDA line, version and (Python, platform)."""

    cuda: str  # "13.0"
    torch: Version
    python: str  # "3.11"
    platform: str  # farm's: linux_x86_64 | linux_aarch64 | win_amd64


def _platform(tag: str) -> str | None:
    if tag == "win_amd64":
        return "win_amd64"
    if tag.startswith(("manylinux", "linux")):
        for suffix, plat in _PLATFORM_SUFFIX.items():
            if tag.endswith(suffix):
                return plat
    return None


def shipped(page: IndexPage, cuda: str) -> list[Shipped]:
    """The CUDA ``cuda`` torch wheels a ``torch/`` project page lists. Wheels of another local label
    (``+cpu``, another ``+cuXYZ``), free-threaded or abi3 builds, and names that do not parse are
    not cells of this line and are left out."""
    cu = "cu" + cuda.replace(".", "")
    out = set()
    for file in page.files:
        if not file.filename.endswith(".whl"):
            continue
        try:
            dist, version, _, tags = parse_wheel_filename(file.filename)
        except InvalidWheelFilename:
            continue
        if dist != "torch" or version.local != cu or version.is_prerelease or version.is_devrelease:
            continue
        for tag in tags:
            if not (tag.interpreter.startswith("cp") and tag.abi == tag.interpreter):  # cp313t, abi3: not a cell
                continue
            plat = _platform(tag.platform)
            if plat is None:
                continue
            digits = tag.interpreter[2:]
            out.add(Shipped(cuda, Version(version.public), f"{digits[0]}.{digits[1:]}", plat))
    return sorted(out)


def page_url(index: str, cuda: str) -> str:
    """The ``torch/`` page of a CUDA line's index (``{cu}`` in ``index`` becomes ``cu130``)."""
    base = index.replace("{cu}", "cu" + cuda.replace(".", ""))
    return urljoin(base if base.endswith("/") else base + "/", "torch/")


def read_index(index: str, cuda: str, *, timeout: float = 60) -> list[Shipped]:
    """Fetch and parse the ``torch/`` page of ``index`` for CUDA line ``cuda``."""
    url = page_url(index, cuda)
    try:
        page = read_page(url, timeout=timeout)
    except NetworkError as exc:
        raise SourceError(f"cannot read PyTorch's index page {url} ({exc.message})",
                          hint="check the network, or pass --index URL of a mirror in PyTorch's layout") from None
    except ValueError as exc:
        raise SourceError(f"{url} is not a PEP 503/691 project page: {exc}") from None
    return shipped(page, cuda)


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
    out: dict[str, str | None] = {}
    for cuda in cuda_lines:
        index = override or defaults.torch_index.get(cuda)
        out[cuda] = None if index in (None, "pip") else index
    return out
