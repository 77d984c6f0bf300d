"""Compatibility pages of the static index: which GPUs each wheel runs on, and how to install it.

Two kinds of page, written beside the PEP 503 tree (which they never change)::

    compat/find.html                      one page: filter by GPU, CUDA, torch, Python, platform;
                                          the matching wheels and the pip / uv command of the best
    compat/<channel>/<project>.html       per channel and project: each wheel x GPU generation
    compat/wheels.json                    the same records for tools (``farm doctor --index-url``)

Every fact on them comes from a wheel's provenance (``_build_info.json``, read from the stored
wheel, whose sha256 the ledger vouches for) and farm's driver model: the image each GPU runs (SASS,
PTX JIT, none, by :func:`farm.model.driver.pick_worst` over the extensions' asserted lists) and the
minimum driver (the CUDA runtime, and the PTX ISA where a GPU JITs). Nothing is read from file
names; a wheel without provenance is listed as such, with no GPU column filled.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from farm.errors import FarmError
from farm.model.arch import ArchList
from farm.model.driver import DEVICE_EXAMPLES, GENERATIONS, KNOWN_DEVICES, ImageKind, pick_worst, stub_risk
from farm.model.drivers import minimum_driver, requirements, table
from farm.provenance.buildinfo import BUILD_INFO_NAME, BuildInfo
from farm.publish.wheelmeta import read_member

if TYPE_CHECKING:
    from farm.publish.index import IndexFile

PAGE_DIR = "compat"
FIND_PAGE = f"{PAGE_DIR}/find.html"
CATALOG = f"{PAGE_DIR}/wheels.json"  # the records of the pages, for tools (farm doctor --index-url)
CATALOG_VERSION = 1


@dataclass(frozen=True)
class CompatWheel:
    file: IndexFile
    info: BuildInfo | None  # None: the wheel carries no farm provenance
    problem: str | None = None  # why its provenance could not be read


def provenance(files_dir: Path, files: Iterable[IndexFile]) -> list[CompatWheel]:
    """Each stored wheel's provenance, read from the wheel itself (linked wheels are not stored here)."""
    out = []
    for f in sorted(files, key=lambda f: f.filename):
        if f.url is not None:
            continue
        path = Path(files_dir) / f.filename
        try:
            data = read_member(path, BUILD_INFO_NAME)
            info = BuildInfo.from_json(data, where=str(path)) if data is not None else None
            out.append(CompatWheel(f, info, None if data is not None else f"no {BUILD_INFO_NAME}"))
        except FarmError as exc:
            out.append(CompatWheel(f, None, exc.message))
    return out


# --------------------------------------------------------------------------------------------
# Pure core: provenance -> records -> pages
# --------------------------------------------------------------------------------------------
def record(w: CompatWheel) -> dict[str, Any]:
    """One wheel as the pages show it (the find page's JSON carries exactly this)."""
    f, info = w.file, w.info
    rec: dict[str, Any] = {
        "filename": f.filename, "project": f.project, "version": f.version, "channel": f.home,
        "requires_python": f.requires_python, "provenance": info.provenance if info else None,
        "problem": w.problem,
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
    devices = {}
    for d in KNOWN_DEVICES:
        choice = pick_worst(units, d)
        need = minimum_driver(requirements(cell.cuda, isa, has_ptx=choice.kind is ImageKind.PTX_JIT,
                                           platform=cell.platform))
        devices[str(d)] = {
            "kind": choice.kind.value, "image": choice.target.name if choice.target else None,
            "cuda_arch": choice.cuda_arch, "stub_risk": stub_risk(choice),
            "driver": need.shown if need and choice.kind is not ImageKind.NONE else None,
        }
    rec.update(cuda=cell.cuda, torch=cell.torch, python=cell.python, platform=cell.platform,
               found=sorted({t for u in units for t in u.canonical().split(";")}), ptx_isa=isa,
               driver=runtime.shown if runtime else None, devices=devices)
    return rec


def _spec(rec: Mapping[str, Any]) -> str:
    return f"{rec['project']}=={rec['version']}"


def commands(rec: Mapping[str, Any], root: str) -> tuple[str, str]:
    """The exact pip and uv commands for a wheel, from the index at ``root`` (a URL ending in ``/``)."""
    url = f"{root}{rec['channel']}/"
    return (f"pip install --index-url {url} '{_spec(rec)}'", f"uv pip install --index-url {url} '{_spec(rec)}'")


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.25em .5em;font-size:.9em}
th{background:#f4f4f4}td.sass{background:#d9f2d9}td.ptx-jit{background:#fff3cd}td.none{background:#f8d7da}
code{background:#f4f4f4;padding:.1em .3em;display:inline-block;margin:.1em 0}label{margin-right:1em}
#best{margin:1em 0;padding:.5em;border:1px solid #ccc}"""

# Fills each command from the address the page is served at: the same page works on any host.
_FILL = """<script>
(function(){var root=new URL(document.body.dataset.root,location.href).href;
document.querySelectorAll('code[data-channel]').forEach(function(c){
c.textContent=c.dataset.tool+' install --index-url '+root+c.dataset.channel+'/ \\''+c.dataset.spec+'\\'';});})();
</script>"""


def _head(title: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n")


def _cell(dev: Mapping[str, Any]) -> str:
    kind = dev["kind"]
    text = {"sass": "SASS", "ptx-jit": "JIT", "none": "none"}[kind]
    image = f" {dev['image']}" if dev["image"] else ""
    risk = " (stub risk)" if dev["stub_risk"] else ""
    return f'<td class="{kind}">{text}{html.escape(image)}{risk}</td>'


def _code(tool: str, rec: Mapping[str, Any]) -> str:
    spec = _spec(rec)
    return (f'<code data-tool="{tool}" data-channel="{html.escape(rec["channel"] or "")}" '
            f'data-spec="{html.escape(spec)}">{tool} install --index-url &lt;index&gt;/'
            f'{html.escape(rec["channel"] or "")}/ \'{html.escape(spec)}\'</code>')


def _generation_headers() -> str:
    return "".join(f'<th title="{html.escape(DEVICE_EXAMPLES.get(d, ""))}">{d}<br>{html.escape(GENERATIONS[d])}</th>'
                   for d in KNOWN_DEVICES)


def project_page(channel: str, project: str, recs: list[dict[str, Any]]) -> bytes:
    up = "../" * (channel.count("/") + 2)
    rows = []
    for rec in recs:
        if "devices" not in rec:
            gpus = f'<td colspan="{len(KNOWN_DEVICES)}">no farm provenance ({html.escape(rec["problem"] or "")})</td>'
            driver = "<td>-</td>"
        else:
            gpus = "".join(_cell(rec["devices"][str(d)]) for d in KNOWN_DEVICES)
            jit = sorted({v["driver"] for v in rec["devices"].values() if v["kind"] == "ptx-jit" and v["driver"]})
            driver = f"<td>&gt;= {html.escape(rec['driver'] or '?')}" + (
                f"<br>JIT: &gt;= {html.escape(jit[-1])}" if jit and jit[-1] != rec["driver"] else "") + "</td>"
        rows.append(f"<tr><td>{html.escape(rec['filename'])}</td>{gpus}{driver}"
                    f"<td>{_code('pip', rec)}<br>{_code('uv pip', rec)}</td></tr>")
    body = (f'<body data-root="{up}">\n<h1>{html.escape(project)} in {html.escape(channel)}</h1>\n'
            "<p>SASS: runs as built. JIT: the driver compiles PTX on first launch (once, then cached); "
            "stub risk: code gated above the PTX's arch is compiled out. none: "
            "<code>no kernel image is available</code>. Minimum driver: the CUDA runtime's, and the PTX "
            f'ISA\'s where a GPU JITs. <a href="{"../" * (channel.count("/") + 1)}find.html">'
            "Find a wheel by GPU</a></p>\n<table>\n<thead><tr><th>wheel</th>"
            f"{_generation_headers()}<th>minimum driver</th><th>install</th></tr></thead>\n"
            "<tbody>\n" + "\n".join(rows) + "\n</tbody>\n</table>\n" + _FILL + "\n</body>\n</html>\n")
    return (_head(f"{project} ({channel}): GPU compatibility") + body).encode()


FIND_JS = Path(__file__).with_name("static") / "find.js"


def _json_for_script(doc: object) -> str:
    # inside <script>: no "</script>" or "<!--" can appear in JSON text with "<" escaped
    return json.dumps(doc, indent=1, sort_keys=True).replace("<", "\\u003c").replace(">", "\\u003e")


def find_page(recs: list[dict[str, Any]]) -> bytes:
    gpus = {str(d): f"{GENERATIONS[d]} ({DEVICE_EXAMPLES.get(d, '')})" for d in KNOWN_DEVICES}
    doc = {"gpus": gpus, "wheels": recs}
    selects = "".join(f'<label>{label} <select id="{k}"><option value="">any</option></select></label>'
                      for k, label in (("gpu", "GPU"), ("cuda", "CUDA"), ("torch", "torch"),
                                       ("python", "Python"), ("platform", "platform")))
    links = "".join(f'<li><a href="{html.escape(rec["channel"])}/{html.escape(rec["project"])}.html">'
                    f'{html.escape(rec["project"])} in {html.escape(rec["channel"])}</a></li>'
                    for rec in {(r["channel"], r["project"]): r for r in recs if r["channel"]}.values())
    body = ('<body data-root="../">\n<h1>Find a wheel for your GPU</h1>\n'
            "<p>From each wheel's asserted targets and NVIDIA's driver tables. "
            "Check an installed environment with <code>farm doctor</code>.</p>\n"
            f"<form>{selects}</form>\n"
            '<div id="best"><div id="verdict"></div><code id="pip"></code><br><code id="uv"></code></div>\n'
            '<p id="count"></p>\n<table>\n<thead><tr><th>project</th><th>version</th><th>channel</th>'
            "<th>Python</th><th>platform</th><th>on this GPU</th><th>minimum driver</th><th>install</th></tr></thead>\n"
            '<tbody id="rows"></tbody>\n</table>\n'
            f"<h2>Per project</h2>\n<ul>{links}</ul>\n"
            f'<script id="farm-wheels" type="application/json">{_json_for_script(doc)}</script>\n'
            '<script src="find.js"></script>\n</body>\n</html>\n')
    return (_head("Find a wheel for your GPU") + body).encode()


def render(wheels: Iterable[CompatWheel]) -> dict[str, bytes]:
    """Every compatibility page (relative path -> bytes)."""
    recs = [record(w) for w in wheels]
    by_page: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in recs:
        if rec["channel"]:
            by_page.setdefault((rec["channel"], rec["project"]), []).append(rec)
    pages = {f"{PAGE_DIR}/{ch}/{project}.html": project_page(ch, project, rs)
             for (ch, project), rs in sorted(by_page.items())}
    pages[FIND_PAGE] = find_page(recs)
    doc = {"schema_version": CATALOG_VERSION, "wheels": recs}
    pages[CATALOG] = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
    pages[f"{PAGE_DIR}/find.js"] = FIND_JS.read_bytes()
    return pages


# --------------------------------------------------------------------------------------------
# I/O shell
# --------------------------------------------------------------------------------------------
def pages(files_dir: Path, files: Iterable[IndexFile]) -> dict[str, bytes]:
    """The compatibility pages of the wheels stored in ``files_dir``."""
    return render(provenance(files_dir, files))


def prune(root: Path, keep: Iterable[str]) -> list[str]:
    """Remove compatibility pages a regeneration no longer writes (a project or channel gone)."""
    keep = set(keep)
    removed: list[str] = []
    base = Path(root) / PAGE_DIR
    if not base.is_dir():
        return removed
    for page in sorted(p for p in base.rglob("*") if p.is_file()):
        rel = page.relative_to(root).as_posix()
        if rel not in keep:
            page.unlink()
            removed.append(rel)
    for folder in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(folder.iterdir()):
            folder.rmdir()
    return removed
