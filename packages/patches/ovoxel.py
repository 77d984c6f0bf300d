"""O-Voxel (TRELLIS.2's o-voxel/ and its forks): MSVC flags, and C++20 where torch's headers need it.

Its setup.py gives the C++ files GCC's ``-O3 -std=c++NN`` (17 upstream, 20 in visualbruno's fork),
which cl ignores (warning D9002), and nvcc ``-std=c++NN``. The standard becomes ``_FARM_STD``
(``_edit.std_block``: the package's NN, 20 where torch needs it: torch 2.14's ATen.h refuses
C++17, torch 2.13's headers too under MSVC, and nvcc keeps the last ``-std`` it is given); on
Windows the C++ files get MSVC's ``/O2 /std:c++MM``.

Upstream's src/io/svo.cpp also shapes two tensors with ``{vec.size()}``: a ``size_t`` narrowed to
``int64_t`` in a braced list, which GCC accepts and MSVC refuses (C2398). Those become
``static_cast<int64_t>(...)``; the forks cast already (``(int64_t)``), and are left as they are.

Upstream's pyproject.toml lists cumesh and flex_gemm as git URLs (``cumesh @ git+https://...``):
a wheel whose metadata names a direct URL cannot be uploaded to PyPI, and pip would build them
from GitHub's newest commit. They are dropped; the recipe's requires_dist pins farm's own wheels of
the same cell instead. The forks list no such dependency.
Run in o-voxel/, after the fork's rename patch; idempotent.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: MSVC flags"
text = Path("setup.py").read_text(encoding="utf-8") if Path("setup.py").is_file() else ""
found = re.search(r'"cxx": \["-O3", "-std=c\+\+(\d+)"\]', text)
own = int(found[1]) if found else 17  # without the anchor, edit() names the line that changed
CXX = f'                "cxx": ["-O3", "-std=c++{own}"],\n'
NVCC = f'                "nvcc": ["-O3","-std=c++{own}"] + cc_flag,\n'

edit("setup.py", "o_voxel", [
    ("import os\n", "import os\n" + std_block(own)),
    (CXX, ('                "cxx": ["/O2", f"/std:c++{_FARM_STD}"] if os.name == "nt" '
           f'else ["-O3", f"-std=c++{{_FARM_STD}}"],  {MARK}\n')),
    (NVCC, f'                "nvcc": ["-O3", f"-std=c++{{_FARM_STD}}"] + cc_flag,  {MARK}\n'),
], MARK)

NARROW = "// farm: no size_t narrowing in a braced list (MSVC C2398)"
svo = Path("src/io/svo.cpp").read_text(encoding="utf-8") if Path("src/io/svo.cpp").is_file() else ""
if "{(int64_t)svo.size()}" in svo and "{(int64_t)codes.size()}" in svo:
    print("o_voxel: src/io/svo.cpp casts its sizes already")
else:
    edit("src/io/svo.cpp", "o_voxel", [
        ("torch::from_blob(svo.data(), {svo.size()}, torch::kUInt8).clone();\n",
         f"torch::from_blob(svo.data(), {{static_cast<int64_t>(svo.size())}}, torch::kUInt8).clone();  {NARROW}\n"),
        ("torch::from_blob(codes.data(), {codes.size()}, torch::kInt32).clone();\n",
         f"torch::from_blob(codes.data(), {{static_cast<int64_t>(codes.size())}}, torch::kInt32).clone();  {NARROW}\n"),
    ], NARROW)

GIT_DEPS = ('    "cumesh @ git+https://github.com/JeffreyXiang/CuMesh.git",\n'
            '    "flex_gemm @ git+https://github.com/JeffreyXiang/FlexGEMM.git",\n')
DEPS = "# farm: cumesh and flex_gemm are the recipe's requires_dist (farm's wheels of the cell)"
pyproject = Path("pyproject.toml").read_text(encoding="utf-8") if Path("pyproject.toml").is_file() else ""
if "@ git+" not in pyproject and DEPS not in pyproject:
    print("o_voxel: pyproject.toml names no git-URL dependency")
else:
    edit("pyproject.toml", "o_voxel", [
        (GIT_DEPS, f"    {DEPS}\n"),
    ], DEPS)
