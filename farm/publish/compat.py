"""Compatibility pages of the static index: which GPUs each wheel runs on, and how to install it.

Written beside the PEP 503 tree (which they never change)::

    compat/find.html                      one page: filter by GPU, driver, package, version, CUDA,
                                          torch, Python, platform; the wheel that runs, and its commands
    compat/<channel>/<project>.html       per channel and project: each wheel x every GPU
    compat/wheels.json                    the same records for tools (``farm doctor --index-url``)
    compat/compat.css, install.js, find.js   the pages' style and scripts (farm/publish/static/)

Every fact on them comes from a wheel's provenance (``_build_info.json``, read from the stored
wheel, whose sha256 the ledger vouches for) and farm's models: the image each GPU runs (SASS, PTX
JIT, none, by :func:`farm.model.driver.pick_worst` over the extensions' asserted lists), whether
the GPU's machine runs the wheel's platform and CUDA line at all (:mod:`farm.model.devices`), and
the minimum driver. Nothing is read from file names; a wheel without provenance is listed as such.
The GPUs are every capability a CUDA line of the support tables builds for.

The install commands are :mod:`farm.model.install`'s: each farm wheel by URL and sha256, no index.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from farm.errors import FarmError
from farm.model import devices as gpus
from farm.model.arch import ArchList
from farm.model.driver import Device, ImageKind, pick_worst, stub_risk
from farm.model.drivers import minimum_driver, requirements, table
from farm.model.install import CATALOG, CATALOG_VERSION, FIND_PAGE, PAGE_DIR, torch_step
from farm.provenance.buildinfo import BUILD_INFO_NAME, Attestation, BuildInfo
from farm.publish.attestation import verify_command
from farm.publish.wheelmeta import read_member

if TYPE_CHECKING:
    from farm.publish.index import IndexFile

STATIC = Path(__file__).with_name("static")
ASSETS = ("compat.css", "install.js", "find.js")


@dataclass(frozen=True)
class CompatWheel:
    file: IndexFile
    info: BuildInfo | None  # None: the wheel carries no farm provenance
    problem: str | None = None  # why its provenance could not be read
    requires: tuple[str, ...] = ()  # the Requires-Dist lines of its METADATA
    attestation: Attestation | None = None  # the ledger's record of its signed build provenance


def _requires(metadata: bytes | None) -> tuple[str, ...]:
    if metadata is None:
        return ()
    return tuple(str(r) for r in BytesHeaderParser().parsebytes(metadata).get_all("Requires-Dist") or ())


def provenance(files_dir: Path, files: Iterable[IndexFile],
               attested: Callable[[str], Attestation | None] | None = None) -> list[CompatWheel]:
    """Each stored wheel's provenance and requirements, read from the wheel and its PEP 658
    metadata file (linked wheels are not stored here), and the ledger's attestation of it."""
    out = []
    for f in sorted(files, key=lambda f: f.filename):
        if f.url is not None:
            continue
        path = Path(files_dir) / f.filename
        meta = path.with_name(f.filename + ".metadata")
        try:
            requires = _requires(meta.read_bytes() if meta.is_file() else read_member(path, "METADATA"))
            data = read_member(path, BUILD_INFO_NAME)
            info = BuildInfo.from_json(data, where=str(path)) if data is not None else None
            out.append(CompatWheel(f, info, None if data is not None else f"no {BUILD_INFO_NAME}", requires,
                                   attested(f.filename) if attested is not None else None))
        except FarmError as exc:
            out.append(CompatWheel(f, None, exc.message))
    return out


# --------------------------------------------------------------------------------------------
# Pure core: provenance -> records -> pages
# --------------------------------------------------------------------------------------------
def _device_verdicts(units: list[ArchList], info: BuildInfo, isa: str | None) -> dict[str, dict[str, Any]]:
    """Each GPU the wheel runs on (a GPU absent from the result runs none of it)."""
    cell = info.cell
    out = {}
    for d in gpus.targetable():
        if gpus.blocked(d, cell.platform, cell.cuda):
            continue
        choice = pick_worst(units, d)
        if choice.kind is ImageKind.NONE:
            continue
        need = minimum_driver(requirements(cell.cuda, isa, has_ptx=choice.kind is ImageKind.PTX_JIT,
                                           platform=cell.platform))
        out[str(d)] = {"kind": choice.kind.value, "image": choice.target.name if choice.target else None,
                       "cuda_arch": choice.cuda_arch, "stub_risk": stub_risk(choice),
                       "driver": need.shown if need else None}
    return out


def record(w: CompatWheel) -> dict[str, Any]:
    """One wheel as the pages show it (the pages' JSON and wheels.json carry exactly this)."""
    f, info = w.file, w.info
    rec: dict[str, Any] = {
        "filename": f.filename, "project": f.project, "version": f.version, "channel": f.home,
        "requires_python": f.requires_python, "provenance": info.provenance if info else None,
        "problem": w.problem, "url": f.location, "sha256": f.sha256,
        "requires": list(w.requires), "pins": [], "unresolved": [],
        # its signed build provenance (docs/attestations.md): where, and the command that checks it
        "attestation": {**w.attestation.to_dict(), "verify": verify_command(f.filename, w.attestation)}
        if w.attestation is not None else None,
    }
    if info is None:
        return rec
    cell = info.cell
    if any(not isinstance(archs, ArchList) for archs in info.archs.found.values()):
        rec["problem"] = "its provenance records an arch list that does not parse"
        return rec
    units = [archs for archs in info.archs.found.values() if isinstance(archs, ArchList) and archs]
    if not units:  # an inferred record that could not say, or no device code: no verdict to show
        rec["problem"] = "its provenance records no device code"
        return rec
    nvcc = info.toolchain.nvcc if info.toolchain else None
    isa = table().ptx_isa(nvcc) if nvcc else None
    runtime = minimum_driver(requirements(cell.cuda, None, has_ptx=False, platform=cell.platform))
    rec.update(cuda=cell.cuda, torch=cell.torch, python=cell.python, platform=cell.platform,
               found=sorted({t for u in units for t in u.canonical().split(";")}), ptx_isa=isa,
               driver=runtime.shown if runtime else None, devices=_device_verdicts(units, info, isa))
    rec["torch_step"] = torch_step(cell.cuda, cell.torch)
    return rec


def _installs_beside(dep: str, wheel: str) -> bool:
    """Whether wheel file ``dep`` installs where wheel file ``wheel`` does (its platform, a
    Python tag and ABI that Python serves: the same, abi3 of an older or equal CPython, or py3)."""
    need, have = parse_wheel_filename(wheel)[3], parse_wheel_filename(dep)[3]
    for n in need:
        for h in have:
            if h.platform not in (n.platform, "any"):
                continue
            if (h.interpreter, h.abi) == (n.interpreter, n.abi):
                return True
            if (h.abi == "abi3" and h.interpreter[:3] == n.interpreter[:3] == "cp3"
                    and int(h.interpreter[3:] or 0) <= int(n.interpreter[3:] or 0)):
                return True
            if h.abi == "none" and h.interpreter in ("py3", n.interpreter):
                return True
    return False


def resolve_pins(recs: Sequence[dict[str, Any]]) -> None:
    """Fill each record's ``pins``: every farm wheel its requirements name, transitively, found in
    the record's own channel (a farm project is never looked up on another index); a requirement
    of a farm project the channel cannot satisfy goes to ``unresolved``, and the wheel is never
    recommended."""
    by_channel: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in recs:
        if rec["channel"]:
            by_channel.setdefault((rec["channel"], rec["project"]), []).append(rec)
    for rec in recs:
        pins: dict[str, dict[str, Any]] = {}
        todo, seen = [rec], {rec["filename"]}
        while todo:
            current = todo.pop()
            for line in current["requires"]:
                try:
                    req = Requirement(line)
                except InvalidRequirement:
                    continue
                if req.marker is not None and "extra" in str(req.marker):
                    continue  # an extra's requirement: the command installs none
                name = canonicalize_name(req.name)
                candidates = by_channel.get((rec["channel"], name))
                if not candidates:
                    continue  # not a farm project of this channel: the user's own index serves it
                fits = [c for c in candidates if req.specifier.contains(c["version"], prereleases=True)
                        and _installs_beside(c["filename"], rec["filename"])]
                if not fits:
                    rec["unresolved"].append(line)
                    continue
                best = max(fits, key=lambda c: c["filename"])
                if best["filename"] not in seen:
                    seen.add(best["filename"])
                    pins[best["filename"]] = {k: best[k] for k in ("project", "filename", "url", "sha256")}
                    todo.append(best)
        rec["pins"] = list(pins.values())


def _gpu_table() -> list[dict[str, Any]]:
    """Every GPU the pages offer, oldest first, with what they say of it when no wheel runs there."""
    out = []
    for d in gpus.targetable():
        tie = gpus.tie(d)
        out.append({
            "gpu": str(d), "label": gpus.label(d), "lines": list(gpus.lines_for(d)),
            "tie": None if tie is None else {"system": tie.system, "platform": tie.platform,
                                             "first_cuda": tie.first_cuda, "why": tie.why,
                                             "driver": tie.driver, "instead": tie.instead},
        })
    return out


def _head(title: str, up: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<title>{html.escape(title)}</title>\n<link rel="stylesheet" href="{up}compat.css">\n</head>\n')


def _data(doc: object) -> str:
    # inside <script>: no "</script>" or "<!--" can appear in JSON text with "<" escaped
    text = json.dumps(doc, indent=1, sort_keys=True).replace("<", "\\u003c").replace(">", "\\u003e")
    return f'<script id="farm-wheels" type="application/json">{text}</script>\n'


_KIND_TEXT = {"sass": "SASS", "ptx-jit": "JIT"}


def _chip(rec: Mapping[str, Any], info: Mapping[str, Any]) -> str:
    gpu = info["gpu"]
    dev = rec["devices"].get(gpu)
    if dev is None:
        blocked = gpus.blocked(Device.parse(gpu), rec["platform"], rec["cuda"])
        title = blocked or "no image: cudaErrorNoKernelImageForDevice"
        return f'<span class="chip none" title="{html.escape(info["label"] + ": " + title)}">{gpu} none</span>'
    text = f"{gpu} {_KIND_TEXT[dev['kind']]} {dev['image']}" + (" (stub risk)" if dev["stub_risk"] else "")
    return (f'<span class="chip {dev["kind"]}" title="{html.escape(info["label"])}, driver &gt;= '
            f'{html.escape(dev["driver"] or "?")}">{html.escape(text)}</span>')


def _attested(rec: Mapping[str, Any]) -> str:
    signed = rec.get("attestation")
    if not signed:
        return '<p class="attested">not attested</p>'
    return (f'<p class="attested"><a href="{html.escape(signed["url"])}">attested</a>: '
            f'<code>{html.escape(signed["verify"])}</code></p>')


def _wheel_card(rec: Mapping[str, Any], table_: Sequence[Mapping[str, Any]]) -> str:
    name = html.escape(rec["filename"])
    if "devices" not in rec:
        return (f'<section class="wheel"><h3>{name}</h3><p>no farm provenance '
                f'({html.escape(rec["problem"] or "")}): farm says nothing of where it runs</p>\n'
                f'{_attested(rec)}</section>')
    facts = " · ".join(html.escape(str(x)) for x in (
        f"CUDA {rec['cuda']}", f"torch {rec['torch']}", rec["python"], rec["platform"],
        f"driver >= {rec['driver'] or '?'}"))
    chips = "".join(_chip(rec, info) for info in table_)
    return (f'<section class="wheel" data-filename="{name}"><h3>{name}</h3><p>{facts}</p>\n'
            f'<p class="chips">{chips}</p>\n{_attested(rec)}\n<div class="install"></div></section>')


def project_page(channel: str, project: str, recs: list[dict[str, Any]]) -> bytes:
    up = "../" * (channel.count("/") + 1)  # to compat/
    table_ = _gpu_table()
    cards = "\n".join(_wheel_card(rec, table_) for rec in recs)
    body = (f'<body data-root="{up}../">\n<main>\n<p><a href="{up}find.html">Find a wheel for your GPU</a> · '
            f'<a href="{up}../index.html">index</a></p>\n'
            f"<h1>{html.escape(project)} in {html.escape(channel)}</h1>\n"
            "<p>SASS: runs as built. JIT: the driver compiles PTX at the first launch (once, then cached); "
            "stub risk: code gated above the PTX's arch is compiled out. none: no image for that GPU, or its "
            "machine does not run this platform or CUDA line (hover for why). The driver is the minimum for "
            "the CUDA runtime, and for the PTX where a GPU JITs.</p>\n"
            f"{cards}\n</main>\n{_data({'wheels': recs})}"
            f'<script src="{up}install.js"></script>\n</body>\n</html>\n')
    return (_head(f"{project} ({channel}): GPU compatibility", up) + body).encode()


_FILTERS = (("gpu", "GPU"), ("package", "package"), ("version", "version"), ("cuda", "CUDA"), ("torch", "torch"),
            ("python", "Python"), ("platform", "platform"))


def find_page(recs: list[dict[str, Any]]) -> bytes:
    selects = "".join(f'<label>{label} <select id="{k}"><option value="">any</option></select></label>'
                      for k, label in _FILTERS)
    driver = '<label>driver <input id="driver" size="10" placeholder="e.g. 550.54"></label>'
    links = "".join(f'<li><a href="{html.escape(rec["channel"])}/{html.escape(rec["project"])}.html">'
                    f'{html.escape(rec["project"])} in {html.escape(rec["channel"])}</a></li>'
                    for rec in {(r["channel"], r["project"]): r for r in recs if r["channel"]}.values())
    body = ('<body data-root="../">\n<main>\n<p><a href="../index.html">index</a></p>\n'
            "<h1>Find a wheel for your GPU</h1>\n"
            "<p>From each wheel's asserted targets and NVIDIA's driver tables. Your GPU's number: "
            "<code>nvidia-smi --query-gpu=name,compute_cap --format=csv</code>; check an installed "
            "environment with <code>farm doctor</code>.</p>\n"
            f'<form id="filters">{selects}{driver}</form>\n'
            '<div id="best"><p id="verdict"></p><div id="commands"></div></div>\n'
            '<p id="count"></p>\n<table id="wheels">\n<thead><tr><th>package</th><th>version</th><th>CUDA</th>'
            "<th>torch</th><th>Python</th><th>platform</th><th>on this GPU</th><th>minimum driver</th>"
            "<th>install</th></tr></thead>\n"
            '<tbody id="rows"></tbody>\n</table>\n'
            f"<h2>Per project</h2>\n<ul>{links}</ul>\n</main>\n"
            f"{_data({'gpus': _gpu_table(), 'wheels': recs})}"
            '<script src="install.js"></script>\n<script src="find.js"></script>\n</body>\n</html>\n')
    return (_head("Find a wheel for your GPU", "") + body).encode()


def render(wheels: Iterable[CompatWheel]) -> dict[str, bytes]:
    """Every compatibility page (relative path -> bytes)."""
    recs = [record(w) for w in wheels]
    resolve_pins(recs)
    by_page: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in recs:
        if rec["channel"]:
            by_page.setdefault((rec["channel"], rec["project"]), []).append(rec)
    pages = {f"{PAGE_DIR}/{ch}/{project}.html": project_page(ch, project, rs)
             for (ch, project), rs in sorted(by_page.items())}
    pages[FIND_PAGE] = find_page(recs)
    doc = {"schema_version": CATALOG_VERSION, "wheels": recs}
    pages[CATALOG] = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
    pages.update({f"{PAGE_DIR}/{name}": (STATIC / name).read_bytes() for name in ASSETS})
    return pages


# --------------------------------------------------------------------------------------------
# I/O shell
# --------------------------------------------------------------------------------------------
def prune(root: Path, keep: Iterable[str]) -> None:
    """Remove compatibility pages a regeneration no longer writes (a project or channel gone)."""
    keep = set(keep)
    base = Path(root) / PAGE_DIR
    if not base.is_dir():
        return
    for page in sorted(p for p in base.rglob("*") if p.is_file()):
        if page.relative_to(root).as_posix() not in keep:
            page.unlink()
    for folder in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(folder.iterdir()):
            folder.rmdir()
