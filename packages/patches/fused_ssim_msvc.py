"""fused-ssim on Windows: keep the Windows SDK's ``small`` macro out of torch's headers.

``rpcndr.h`` (reached through ``windows.h``) defines ``small`` as ``char``; torch 2.10's headers use
``small`` as a name (pytorch/pytorch#173061), so a translation unit that includes
``<torch/extension.h>`` no longer compiles under MSVC. Each of fused-ssim's two units (ssim.cu,
ext.cpp) gets a prelude before its first include: ``windows.h`` and ``rpcndr.h`` once, as torch
would include them (NOMINMAX, WIN32_LEAN_AND_MEAN), then ``#undef small``; their include guards
keep the macro from coming back. The prelude is inside ``#ifdef _WIN32``. Run at the checkout's
root; idempotent (win_amd64 cells: ``platform_patch_script``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit

MARK = "// farm: the Windows SDK's `small` macro"
PRELUDE = f"""{MARK} (rpcndr.h) must not reach torch's headers
#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#include <rpcndr.h>
#undef small
#endif
"""
FIRST = "#include <torch/extension.h>\n"

for unit in ("ssim.cu", "ext.cpp"):
    edit(unit, "fused_ssim", [(FIRST, PRELUDE + FIRST)], MARK)
