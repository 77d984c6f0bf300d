"""``farm inspect PATH... [--reader native|cuobjdump|both]``: the fatbins of shared objects and wheels."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from itertools import chain, count, islice, repeat
from operator import attrgetter
from pathlib import Path

from farm.binary.inspection import (
    Reader,
    SoInspection,
    WheelInspection,
    inspect_file,
    inspect_wheel,
)
from farm.errors import EXIT_DEFECT, EXIT_OK, FarmError, UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="a .so/.pyd file or a wheel")
    parser.add_argument("--reader", choices=[r.value for r in Reader], default=Reader.NATIVE.value,
                        help="native (default, no toolkit needed), cuobjdump, or both (must agree)")
    parser.add_argument("--cuobjdump", metavar="PATH", help="this cuobjdump instead of searching for one")
    parser.add_argument("--stubs", action="store_true",
                        help="also tell nvcc device-link stubs apart (reads small cubins; "
                             "assert and explain always do)")
    parser.add_argument("--json", action="store_true",
                        help="machine-readable output (indented on a terminal, one line into a pipe)")


_COLUMNS = ("#", "section", "offset", "note", "entries")
_SECTION, _OFFSET, _SIGNATURE = attrgetter("section"), attrgetter("offset"), attrgetter("signature")


def _fatbin_lines(insp: SoInspection, indent: str) -> Iterator[str]:
    """The lines of the fatbins' table (at least one fatbin), as :func:`farm.table.format_table`
    lays it out, in a fraction of its time: the widths come from the data (the longest offset is the
    largest), each distinct entry list (a library repeats a few hundred thousands of times) is
    rendered once, and the rows are one %-format each."""
    fatbins = insp.fatbins
    signatures = list(map(_SIGNATURE, fatbins))
    rendered: dict[tuple[object, ...], str] = {}
    for signature in signatures:
        if signature not in rendered:
            rendered[signature] = " ".join(name + ("" if compression == "none" else f"({compression})")
                                           for _, _, _, compression, name in signature)
    names = list(map(rendered.__getitem__, signatures))
    sections, offsets = list(map(_SECTION, fatbins)), list(map(_OFFSET, fatbins))
    runnable = insp.runnable
    loaded = set(map(_OFFSET, runnable)) if len(runnable) < len(fatbins) else None
    if insp.stubs or loaded is not None:
        notes: Iterable[str] = ["stub" if o in insp.stubs else "" if loaded is None or o in loaded else "not loaded"
                                for o in offsets]
        width = max(map(len, notes))
    else:  # every fatbin is loaded and none is a stub (the common case): no note to compute
        notes, width = repeat(""), 0
    widths = [max(len(header), w) for header, w in zip(_COLUMNS, (
        len(str(len(fatbins))), max(map(len, set(sections))), len(f"{max(offsets):#x}"), width,
        max(map(len, rendered.values())),
    ), strict=True)]
    row = indent.replace("%", "%%") + "%-{}d  %-{}s  %#-{}x  %-{}s  %s".format(*widths[:4])
    head = [(indent + "  ".join(h.ljust(w) for h, w in zip(_COLUMNS, widths, strict=True))).rstrip(),
            indent + "  ".join("-" * w for w in widths)]
    # the rows are formatted as they are taken (see _write_lines)
    return chain(head, map(str.rstrip, map(row.__mod__, zip(count(1), sections, offsets, notes, names))))


def _so_lines(insp: SoInspection, indent: str = "") -> Iterator[str]:
    found = insp.found.canonical() if insp.has_device_code else "no device code"
    yield f"{indent}{insp.path}: {found}"
    if insp.reader is not Reader.CUOBJDUMP and insp.fatbins:
        yield from _fatbin_lines(insp, indent + "  ")
    if insp.reader is Reader.CUOBJDUMP and insp.listing:
        yield f"{indent}  cuobjdump: " + " ".join(e.name for e in insp.listing)
    if insp.reader is Reader.BOTH:
        yield f"{indent}  readers: " + ("agree" if insp.agrees else f"DISAGREE: {insp.disagreement}")


def render_so(insp: SoInspection, indent: str = "") -> str:
    return "\n".join(_so_lines(insp, indent))


def _write_lines(lines: Iterator[str], per_piece: int = 256) -> None:
    """``print("\\n".join(lines))`` in pieces: a library's table (175 KB) is never held whole, and
    each piece reuses the memory of the one before."""
    while piece := list(islice(lines, per_piece)):
        sys.stdout.write("\n".join(piece) + "\n")


def render_wheel(w: WheelInspection) -> str:
    lines = [f"{w.path}: {len(w.extensions)} extension(s)"]
    lines += [render_so(s, "  ") for s in w.extensions]
    if w.vendored:
        lines.append("  vendored libraries (*.libs/):")
        lines += [render_so(s, "    ") for s in w.vendored]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    reader = Reader(args.reader)
    tool = Path(args.cuobjdump) if args.cuobjdump else None
    if args.cuobjdump and reader is Reader.NATIVE:  # silently unused, it would look like a cross-check
        raise UsageError("--cuobjdump goes with --reader cuobjdump or --reader both",
                         hint="add --reader both to check the native reader against that cuobjdump")
    results: list[dict[str, object]] = []
    indent = 2 if args.json and sys.stdout.isatty() else None  # indented for a terminal, compact into a pipe
    code = EXIT_OK
    for path in args.paths:
        try:
            # only the output asked for is built: either one takes milliseconds for a large library
            found = (inspect_wheel if path.endswith(".whl") else inspect_file)(
                path, reader, cuobjdump=tool, stubs=args.stubs)
            if args.json:
                results.append({"kind": "wheel" if isinstance(found, WheelInspection) else "file", **found.to_json()})
            elif isinstance(found, WheelInspection):
                print(render_wheel(found))
            else:
                _write_lines(_so_lines(found))
        except FarmError as exc:
            # keep going: one corrupt file must not hide what the others hold
            results.append({"kind": "error", "path": str(path), "error": str(exc), "exit_code": exc.exit_code})
            print(f"farm inspect: error: {exc}", file=sys.stderr)
            code = max(code, exc.exit_code)
            continue
        if not found.agrees:
            code = max(code, EXIT_DEFECT)
    if args.json:
        errors = [r for r in results if r["kind"] == "error"]
        failed = {"ok": False, "error": {  # the shape of every command's error under --json (farm.cli)
            "command": "inspect", "exit_code": code, "message": f"{len(errors)} of {len(results)} path(s) not read",
            "where": None, "fix": None}} if errors else {"ok": code == EXIT_OK}
        print(json.dumps({**failed, "reader": reader.value, "results": results}, indent=indent))
    return code
