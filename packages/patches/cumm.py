"""Build cumm (and, through its installed wheel, spconv) against the cell's toolkit, not the host's.

cumm finds its CUDA headers and libraries in ``cumm/common.py``: the conda layout beside the nvcc on
PATH, else a fixed ``/usr/local/cuda``. farm's toolkit has neither layout, so the compile would
take the headers of whatever toolkit the host has in ``/usr/local/cuda`` (or fail on a missing
``curand.h``), and setup.py would copy that toolkit's ``libcudadevrt.a`` into the wheel. Both now
take ``CUDA_HOME`` (which farm always sets) first. The wheel's own ``cumm/common.py`` carries the
change, so spconv, which compiles through it, builds against the cell's toolkit too.
Run in the checkout's root; idempotent.
"""

import pathlib
import sys

COMMON_OLD = 'linux_cuda_root = Path("/usr/local/cuda")'
COMMON_NEW = 'linux_cuda_root = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")  # farm: the cell\'s toolkit'
SETUP_OLD = 'cudadevrt = Path("/usr/local/cuda/lib64/libcudadevrt.a")'
SETUP_NEW = ('cudadevrt = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda") / "lib64" / "libcudadevrt.a"'
             '  # farm: the cell\'s toolkit')
# The conda-layout probe (bin/../targets/x86_64-linux/include beside bin/../lib) comes first in
# common.py; it must keep failing on farm's toolkit, or it would win over CUDA_HOME: check it does.
CONDA_PROBE = 'include = Path(nvcc_path).parent.parent / "targets/x86_64-linux/include"'


def patch(path: pathlib.Path, old: str, new: str) -> None:
    text = path.read_text()
    if new in text:
        print(f"cumm: {path} already patched")
        return
    if text.count(old) != 1:  # upstream changed: building anyway would take the host's toolkit
        sys.exit(f"cumm: {path} no longer has exactly one {old!r}; review the patch")
    path.write_text(text.replace(old, new))
    print(f"cumm: {path} takes CUDA_HOME first now")


common = pathlib.Path("cumm/common.py")
if CONDA_PROBE not in common.read_text():
    sys.exit(f"cumm: {common} no longer probes the conda layout as this patch expects; review the patch")
patch(common, COMMON_OLD, COMMON_NEW)
patch(pathlib.Path("setup.py"), SETUP_OLD, SETUP_NEW)
