"""Remove pointnet2_ops' own TORCH_CUDA_ARCH_LIST assignment so the farm's list is built.

Run in the checkout's build folder (pointnet2_ops_lib); idempotent.
"""

import pathlib
import re

setup = pathlib.Path("setup.py")
text = setup.read_text()
patched = re.sub(r'^[ \t]*os\.environ\["TORCH_CUDA_ARCH_LIST"\]\s*=.*$\n?', "", text, flags=re.MULTILINE)
if patched != text:
    setup.write_text(patched)
    print("pointnet2_ops: removed the TORCH_CUDA_ARCH_LIST assignment from setup.py")
else:
    print("pointnet2_ops: setup.py already patched")
