"""Build SageAttention 3 for the farm's list instead of the build machine's GPU, with the CUTLASS
the recipe pins instead of one cloned during the build.

Its setup.py asks torch for the visible GPU's capability and emits one ``-gencode`` for it
(sm_100a or sm_120a), raising on anything else, so it cannot build on a runner without a GPU.
This replaces that probe with the cell's TORCH_CUDA_ARCH_LIST: 10.0 -> sm_100a, 12.0 -> sm_120a
(its FP4 kernels need the arch-specific targets).

It also clones CUTLASS's default branch (``git clone --depth 1``, no tag or commit) into
``csrc/cutlass`` when that folder is absent: the network during the build, and another CUTLASS
each time upstream's branch moves. The recipe places CUTLASS there at a pinned commit
(``source.vendor``), and this makes setup.py stop, naming the folder, when CUTLASS is not there
instead of cloning it. Run in sageattention3_blackwell/; idempotent; all or nothing.
"""

import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _edit import edit

MARK = "# farm: targets from TORCH_CUDA_ARCH_LIST"
REPLACEMENT = f"""    {MARK} (10.0 -> sm_100a, 12.0 -> sm_120a), not the build machine's GPU
    for _arch in os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(" ", ";").split(";"):
        _sm = {{"10.0": "100a", "12.0": "120a"}}.get(_arch.replace("+PTX", "").rstrip("a"))
        if _sm:
            cc_flag += ["-gencode", f"arch=compute_{{_sm}},code=sm_{{_sm}}"]
    if not cc_flag:
        raise RuntimeError("Unsupported GPU")
"""

CLONE_MARK = "# farm: CUTLASS placed by the recipe (source.vendor), never cloned"
CLONE = """    if not cutlass_dir.exists():
        subprocess.run(
            ["git", "clone", "--depth", "1", "https://github.com/NVIDIA/cutlass.git", str(cutlass_dir)],
            check=True
        )
"""
NO_CLONE = f"""    {CLONE_MARK}
    if not (cutlass_dir / "include" / "cutlass" / "cutlass.h").is_file():
        raise RuntimeError(f"{{cutlass_dir}} holds no CUTLASS: the recipe places it at its pinned commit "
                           "(source.vendor); the build never clones it")
"""

setup = pathlib.Path("setup.py")
probe = re.compile(r"^    cc_major, cc_minor = torch\.cuda\.get_device_capability\(\)\n.*?"
                   r"^        raise RuntimeError\(\"Unsupported GPU\"\)\n", re.MULTILINE | re.DOTALL)
text = setup.read_text() if setup.is_file() else ""
if MARK not in text and not probe.search(text):  # checked before anything is written
    sys.exit("sageattn3: setup.py no longer has the GPU probe this patch replaces; review the patch")
edit("setup.py", "sageattn3", [(CLONE, NO_CLONE)], CLONE_MARK)
text = setup.read_text()
patched, n = probe.subn(lambda _: REPLACEMENT, text, count=1)
if n:
    setup.write_text(patched)
    print("sageattn3: setup.py builds TORCH_CUDA_ARCH_LIST's Blackwell targets now")
else:
    print("sageattn3: setup.py already patched")
