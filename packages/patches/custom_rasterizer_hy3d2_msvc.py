"""custom_rasterizer on Windows: int64 tensors read as ``int64_t``, not ``long``.

Its kernels read int64 tensors with ``data_ptr<long>()`` (and ``long*`` pointers): on Linux
``long`` is 64 bits and the same type as ``int64_t``; under MSVC it is 32 bits, torch has no
``data_ptr<long>`` (its int64 type is ``long long``), and the extension does not link. Each becomes
``int64_t``, which is what they meant and changes nothing where ``long`` is 64 bits. Written against
the repository's newest snapshot (the pin is not in it): the counts per file are exact, so a tree
that differs stops the build naming the line. Run in hy3dpaint/custom_rasterizer; idempotent
(win_amd64 cells: ``platform_patch_script``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit

MARK = "// farm: int64 tensors as int64_t (long is 32 bits under MSVC)"
FIRST = '#include "rasterizer.h"\n'
KERNELS = "lib/custom_rasterizer_kernel"
# file -> (data_ptr<long>() reads, long* pointers)
COUNTS = {"grid_neighbor.cpp": (8, 6), "rasterizer.cpp": (3, 0), "rasterizer_gpu.cu": (3, 0)}

for name, (reads, pointers) in COUNTS.items():
    edits: list[tuple[str, str] | tuple[str, str, int]] = [(FIRST, f"{MARK}\n{FIRST}"),
                                                           ("data_ptr<long>()", "data_ptr<int64_t>()", reads)]
    if pointers:
        edits.append(("long* ", "int64_t* ", pointers))
    edit(f"{KERNELS}/{name}", "custom_rasterizer_hy3d2", edits, MARK)
