"""The pre-compile check: every header and library a build will need is in the toolkit, before
the first nvcc starts (a missing ``cusparse.h`` otherwise fails 20 minutes into a torch build).

Three things are checked: each component of the toolkit is really there (its marker file); the
development link the linker needs for ``-lcudart``; and every ``#include <...>`` of a CUDA library
header in the source tree resolves in the toolkit. A miss names the header or library, where it is
included (file:line) and the component to add to the recipe's ``build.extra_cuda_components``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from farm.errors import ConfigError, ToolError
from farm.toolkit import components as comps

_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]', re.MULTILINE)
_SOURCES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".hxx", ".inl")
_SKIP_DIRS = {".git", ".hg", "build", "dist", "__pycache__", ".tox", ".nox", ".venv", "node_modules",
              # test and example programs, the project's or a vendored library's (flash_attn's
              # sdist carries CUTLASS's unit tests, which include <nvrtc.h>; NATTEN's and torchao's
              # CUTLASS submodule its examples, one of which includes <cuda_profiler_api.h>): built
              # by their own targets, never by a wheel's build; a wheel's TU that did include one
              # would still fail at its compile, naming the header
              "test", "tests", "unittest", "unittests", "example", "examples"}
MAX_FILE = 4 << 20  # larger "sources" are generated data, not headers a person includes


@dataclass(frozen=True)
class Include:
    header: str
    component: str
    where: str  # file:line, relative to the source root


def _includes(root: Path) -> Iterator[Include]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        for name in filenames:
            if not name.endswith(_SOURCES):
                continue
            path = Path(dirpath) / name
            try:
                if path.stat().st_size > MAX_FILE:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            for m in _INCLUDE.finditer(data):
                header = m.group(1).decode("utf-8", "replace").strip()
                component = comps.component_of_header(header)
                # a header the tree carries itself (a vendored cub, a local "cuda.h") is not the toolkit's
                if component is None or (path.parent / header).exists() or (root / header).exists():
                    continue
                line = data.count(b"\n", 0, m.start()) + 1
                yield Include(header, component, f"{path.relative_to(root).as_posix()}:{line}")


def _marker_present(home: Path, marker: str, windows: bool) -> bool:
    return any((home / alt).exists() or (windows and alt.startswith("bin/") and (home / (alt + ".exe")).exists())
               for alt in marker.split("|"))


def check_toolkit(
    home: Path,
    components: Sequence[str],
    *,
    source_root: Path | None = None,
    recipe_where: str = "the recipe",
    windows: bool = False,
) -> None:
    """Refuse before compiling when the toolkit at ``home`` lacks what the build will need.

    ``components`` is what the toolkit was assembled with (empty for an installed toolkit: then
    only the includes and the link are checked). Raises :class:`ToolError` (exit 3) for a
    component that is missing from its own toolkit, :class:`ConfigError` (exit 2, the recipe must
    name the component) for an include the toolkit cannot satisfy.
    """
    broken = [f"{c} ({comps.MARKERS[c].split('|')[0]})" for c in components
              if c in comps.MARKERS and not _marker_present(home, comps.MARKERS[c], windows)]
    if broken:
        raise ToolError(f"the toolkit at {home} lacks files of its own components: {', '.join(broken)}",
                        hint="remove the cached toolkit and assemble it again (farm toolkit)")
    if not windows and not any((home / d / "libcudart.so").exists() for d in ("lib64", "lib")):
        raise ToolError(f"the toolkit at {home} has no lib64/libcudart.so: `-lcudart` cannot link",
                        hint="add the development link (libcudart.so -> libcudart.so.N) or reassemble the "
                             "toolkit with farm toolkit, which makes it")
    if source_root is None:
        return
    missing: dict[str, list[Include]] = {}
    for inc in _includes(Path(source_root)):
        if not ((home / "include" / inc.header).exists() or (home / "include" / "cccl" / inc.header).exists()):
            missing.setdefault(inc.component, []).append(inc)
    if missing:
        lines = []
        for component, incs in sorted(missing.items()):
            shown = ", ".join(f"<{i.header}> at {i.where}" for i in incs[:3])
            more = f" and {len(incs) - 3} more" if len(incs) > 3 else ""
            lines.append(f"{component}: {shown}{more}")
        raise ConfigError(
            "the source includes CUDA headers the toolkit does not have:\n  " + "\n  ".join(lines),
            where=recipe_where,
            hint=f"add to build.extra_cuda_components: {' '.join(sorted(missing))}",
        )
