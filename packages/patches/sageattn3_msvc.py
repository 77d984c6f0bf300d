"""SageAttention 3 on Windows: MSVC flags for its C++ files.

Both extensions give their C++ files GCC's ``-O3 -std=c++17``, which cl ignores (warning D9002).
On Windows they get ``/O2 /std:c++NN``, NN being ``_FARM_STD`` (17; 20 with torch >= 2.13, which
compiles extensions as C++20 and whose headers need it under MSVC); elsewhere upstream's flags.
Run in sageattention3_blackwell/, after sageattn3.py; idempotent (win_amd64 cells:
``platform_patch_script``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _edit import edit, std_block

MARK = "# farm: MSVC flags"
CXX = '                "cxx": ["-O3", "-std=c++17"],\n'
NEW = f'                "cxx": _FARM_CXX,  {MARK}\n'
DEFINE = (std_block(17)
          + f'_FARM_CXX = ["/O2", f"/std:c++{{_FARM_STD}}"] if os.name == "nt" else ["-O3", "-std=c++17"]  {MARK}\n')
ANCHOR = "import torch\n"

# the C++ flag lists of its two extensions, fp4attn_cuda and fp4quant_cuda
edit("setup.py", "sageattn3", [(ANCHOR, ANCHOR + DEFINE), (CXX, NEW, 2)], MARK)
