"""Which translation units of a package reach Python.h: those cannot share compiled objects across
the Pythons of a (CUDA, torch) row; the rest (kernel files that include only c10/ATen/CUDA/CUTLASS
headers) compile once per row with the compiler cache.

    python benchmarks/report_python_h.py SOURCE... [--pythons 6] [--json]

A SOURCE is a source tree, or a git repository (bare or not: its HEAD is read). For each unit
(``.cu``, ``.cpp``, ``.cc``, ``.cxx`` outside test, benchmark, example and docs folders), the
``#include`` graph is followed through the tree's own headers (quoted includes relative to the
including file, then any header of the tree with that path suffix); an include of a header that
pulls Python (``Python.h``, pybind11, ``torch/extension.h``, ``torch/python.h``, ``torch/csrc/...``,
and ``torch/torch.h``, which includes ``torch/extension.h`` in an extension's build) marks the
unit. Conditional includes count as included: the report errs towards "not shareable".
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

UNITS = (".cu", ".cpp", ".cc", ".cxx")
HEADERS = (".h", ".hpp", ".cuh", ".hxx", ".inl", ".inc", ".hh")
SKIP = frozenset({"test", "tests", "testing", "benchmark", "benchmarks", "bench", "example", "examples", "docs",
                  "doc", ".git", "tools", "scripts"})
PYTHON = re.compile(r"^(Python\.h|pybind11/.*|torch/extension\.h|torch/python\.h|torch/csrc/.*|torch/torch\.h)$")
INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.MULTILINE)


@dataclass(frozen=True)
class Tree:
    name: str
    files: Mapping[str, bytes]  # posix path -> contents, sources and headers only


def _wanted(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return path.endswith(UNITS + HEADERS) and not any(p.lower() in SKIP for p in parts[:-1])


def read_tree(source: Path) -> Tree:
    """A folder, or a git repository's HEAD (read with git, no checkout)."""
    if ((source / "objects").is_dir() and (source / "HEAD").is_file()) or (source / ".git").exists():
        listing = subprocess.run(["git", "-C", str(source), "ls-tree", "-r", "--name-only", "HEAD"],
                                 capture_output=True, text=True, check=True).stdout.splitlines()
        paths = [p for p in listing if _wanted(p)]
        batch = subprocess.run(["git", "-C", str(source), "cat-file", "--batch"], capture_output=True, check=True,
                               input="".join(f"HEAD:{p}\n" for p in paths).encode()).stdout
        files, pos = {}, 0
        for path in paths:
            header_end = batch.index(b"\n", pos)
            fields = batch[pos:header_end].split()
            if fields[-1] == b"missing":
                pos = header_end + 1
                continue
            size = int(fields[2])
            files[path] = batch[header_end + 1:header_end + 1 + size]
            pos = header_end + 1 + size + 1
        name = source.parent.name if source.name == "repo" else source.name
        return Tree(name, files)
    files = {p.relative_to(source).as_posix(): p.read_bytes() for p in sorted(source.rglob("*"))
             if p.is_file() and _wanted(p.relative_to(source).as_posix())}
    return Tree(source.name, files)


def _includes(text: bytes) -> list[tuple[bool, str]]:
    return [(m[1] == b'"', m[2].decode("utf-8", "replace").strip()) for m in INCLUDE.finditer(text)]


def python_units(tree: Tree) -> dict[str, bool]:
    """Each unit -> whether it reaches a Python header."""
    by_suffix: dict[str, list[str]] = {}
    for path in tree.files:
        parts = PurePosixPath(path).parts
        for i in range(len(parts)):
            by_suffix.setdefault("/".join(parts[i:]), []).append(path)
    memo: dict[str, bool] = {}

    def resolve(including: str, quoted: bool, name: str) -> str | None:
        if quoted:
            near = (PurePosixPath(including).parent / name).as_posix()
            parts: list[str] = []
            for part in near.split("/"):
                if part == "..":
                    if parts:
                        parts.pop()
                elif part != ".":
                    parts.append(part)
            near = "/".join(parts)
            if near in tree.files:
                return near
        found = by_suffix.get(name.lstrip("./"))
        return min(found, key=len) if found else None

    def reaches(path: str, stack: frozenset[str]) -> bool:
        if path in memo:
            return memo[path]
        hit = False
        for quoted, name in _includes(tree.files[path]):
            if PYTHON.match(name):
                hit = True
                break
            target = resolve(path, quoted, name)
            if target is not None and target not in stack and reaches(target, stack | {target}):
                hit = True
                break
        memo[path] = hit
        return hit

    return {p: reaches(p, frozenset({p})) for p in sorted(tree.files) if p.endswith(UNITS)}


def summary(tree: Tree) -> dict[str, object]:
    units = python_units(tree)
    cu = {p: v for p, v in units.items() if p.endswith(".cu")}
    return {"package": tree.name, "units": len(units), "units_python": sum(units.values()),
            "cu_units": len(cu), "cu_python": sum(cu.values()),
            "cu_shared_fraction": round(1 - sum(cu.values()) / len(cu), 4) if cu else None,
            "python_cu": sorted(p for p, v in cu.items() if v)[:20]}


def render(rows: Iterable[dict[str, object]], pythons: int) -> str:
    saved_head = f"saved/{pythons} Py"
    lines = [(f"{'package':28}{'units':>7}{'-> Python.h':>13}{'.cu':>7}{'-> Python.h':>13}{'.cu shared':>12}"
             f"{saved_head:>13}")]
    for r in rows:
        shared = r["cu_shared_fraction"]
        saved = "-" if not isinstance(shared, float) else f"{shared * (pythons - 1) / pythons:.1%}"
        lines.append(f"{r['package']!s:28}{r['units']!s:>7}{r['units_python']!s:>13}{r['cu_units']!s:>7}"
                     f"{r['cu_python']!s:>13}{'-' if shared is None else f'{shared:.1%}':>12}{saved:>13}")
    lines.append("'.cu shared': the kernel files whose objects one build serves to every Python of its row;")
    lines.append(f"'saved/{pythons} Py': the share of a row's kernel-file compiles its {pythons} Pythons skip "
                 "(each file weighted alike)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", type=Path, metavar="SOURCE")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pythons", type=int, default=6, help="Pythons per (CUDA, torch) row (default: 6)")
    args = parser.parse_args()
    rows = []
    for source in args.sources:
        if not source.exists():
            print(f"report_python_h: {source}: no such folder", file=sys.stderr)
            return 2
        rows.append(summary(read_tree(source)))
    print(json.dumps(rows, indent=1) if args.json else render(rows, max(1, args.pythons)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
