"""``farm inspect PATH... [--reader native|cuobjdump|both]``: the fatbins of shared objects and wheels."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from farm.binary.inspection import (
    Reader,
    SoInspection,
    WheelInspection,
    inspect_file,
    inspect_wheel,
)
from farm.errors import EXIT_DEFECT, EXIT_OK, FarmError, UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    # plain strings: pathlib is left unimported on the listing's path (a wheel imports it)
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


def _names(insp: SoInspection) -> dict[int, str]:
    """Each distinct entry list rendered once (a library repeats a few hundred thousands of times),
    found by identity: read_fatbins shares one signature tuple per distinct list, and hashing the
    nested tuple would cost more than rendering it."""
    names: dict[int, str] = {}
    for f in insp.fatbins:
        if id(f.signature) not in names:
            names[id(f.signature)] = " ".join(name + ("" if compression == "none" else f"({compression})")
                                             for _, _, _, compression, name in f.signature)
    return names


def _note(insp: SoInspection, offset: int, loaded: set[int]) -> str:
    return "stub" if offset in insp.stubs else "" if offset in loaded else "not loaded"


def _fatbin_table(insp: SoInspection, indent: str) -> str:
    """The fatbins (at least one) as :func:`farm.table.format_table` lays out a table, in half its
    time: the widths come from the data (the longest offset is the largest), then each of a
    library's thousands of rows is one %-format of the fatbin's own fields."""
    fatbins = insp.fatbins
    loaded = {f.offset for f in insp.runnable}
    names = _names(insp)
    notes = [_note(insp, f.offset, loaded) for f in fatbins]
    widths = [max(len(header), width) for header, width in zip(_COLUMNS, (
        len(str(len(fatbins))), max(map(len, {f.section for f in fatbins})),
        len(f"{max(f.offset for f in fatbins):#x}"), max(map(len, set(notes))), max(map(len, names.values())),
    ), strict=True)]
    row = indent.replace("%", "%%") + "%-{}d  %-{}s  %#-{}x  %-{}s  %s".format(*widths[:4])
    lines = [(indent + "  ".join(h.ljust(w) for h, w in zip(_COLUMNS, widths, strict=True))).rstrip(),
             indent + "  ".join("-" * w for w in widths)]
    lines += [(row % (index, f.section, f.offset, note, names[id(f.signature)])).rstrip()
              for index, (f, note) in enumerate(zip(fatbins, notes, strict=True), 1)]
    return "\n".join(lines)


def render_so(insp: SoInspection, indent: str = "") -> str:
    found = insp.found.canonical() if insp.has_device_code else "no device code"
    lines = [f"{indent}{insp.path}: {found}"]
    if insp.reader is not Reader.CUOBJDUMP and insp.fatbins:
        lines.append(_fatbin_table(insp, indent + "  "))
    if insp.reader is Reader.CUOBJDUMP and insp.listing:
        lines.append(f"{indent}  cuobjdump: " + " ".join(e.name for e in insp.listing))
    if insp.reader is Reader.BOTH:
        lines.append(f"{indent}  readers: " + ("agree" if insp.agrees else f"DISAGREE: {insp.disagreement}"))
    return "\n".join(lines)


def render_wheel(w: WheelInspection) -> str:
    lines = [f"{w.path}: {len(w.extensions)} extension(s)"]
    lines += [render_so(s, "  ") for s in w.extensions]
    if w.vendored:
        lines.append("  vendored libraries (*.libs/):")
        lines += [render_so(s, "    ") for s in w.vendored]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    reader = Reader(args.reader)
    tool = None
    if args.cuobjdump:
        from pathlib import Path

        tool = Path(args.cuobjdump)
    if args.cuobjdump and reader is Reader.NATIVE:  # silently unused, it would look like a cross-check
        raise UsageError("--cuobjdump goes with --reader cuobjdump or --reader both",
                         hint="add --reader both to check the native reader against that cuobjdump")
    results: list[dict[str, object]] = []
    # indented for a terminal; compact into a pipe or file, where the fatbins of each file are
    # encoded on their own (SoInspection.fatbins_json_text) and spliced into the document
    indent = 2 if args.json and sys.stdout.isatty() else None
    spliced: dict[str, Callable[[], str]] = {}
    code = EXIT_OK
    for path in args.paths:
        try:
            # only the output asked for is built: either one takes milliseconds for a large library
            if os.path.splitext(path)[1] == ".whl":
                w = inspect_wheel(path, reader, cuobjdump=tool, stubs=args.stubs)
                if args.json:
                    results.append({"kind": "wheel", **w.to_json()})
                else:
                    print(render_wheel(w))
                agrees = w.agrees
            else:
                s = inspect_file(path, reader, cuobjdump=tool, stubs=args.stubs)
                if args.json and not indent:
                    placeholder = f"\0fatbins {len(spliced)}\0"  # no path or name holds a NUL
                    spliced[placeholder] = s.fatbins_json_text
                    results.append({"kind": "file", **s.to_json(fatbins=placeholder)})
                elif args.json:
                    results.append({"kind": "file", **s.to_json()})
                else:
                    print(render_so(s))
                agrees = s.agrees
        except FarmError as exc:
            # keep going: one corrupt file must not hide what the others hold
            results.append({"kind": "error", "path": str(path), "error": str(exc), "exit_code": exc.exit_code})
            if not args.json:
                print(f"farm inspect: error: {exc}", file=sys.stderr)
            code = max(code, exc.exit_code)
            continue
        if not agrees:
            code = max(code, EXIT_DEFECT)
    if args.json:
        import json

        text = json.dumps({"reader": reader.value, "results": results}, indent=indent)
        for placeholder, fatbins in spliced.items():
            text = text.replace(json.dumps(placeholder), fatbins(), 1)
        print(text)
    return code
