"""Build SageAttention 3 for the farm's list instead of the build machine's GPU.

Its setup.py asks torch for the visible GPU's capability and emits one ``-gencode`` for it
(sm_100a or sm_120a), raising on anything else, so it cannot build on a runner without a GPU.
This replaces that probe with the cell's TORCH_CUDA_ARCH_LIST: 10.0 -> sm_100a, 12.0 -> sm_120a
(its FP4 kernels need the arch-specific targets). Run in sageattention3_blackwell/; idempotent.
"""

import pathlib
import re
import sys

MARK = "# farm: targets from TORCH_CUDA_ARCH_LIST"
REPLACEMENT = f"""    {MARK} (10.0 -> sm_100a, 12.0 -> sm_120a), not the build machine's GPU
    for _arch in os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(" ", ";").split(";"):
        _sm = {{"10.0": "100a", "12.0": "120a"}}.get(_arch.replace("+PTX", "").rstrip("a"))
        if _sm:
            cc_flag += ["-gencode", f"arch=compute_{{_sm}},code=sm_{{_sm}}"]
    if not cc_flag:
        raise RuntimeError("Unsupported GPU")
"""

setup = pathlib.Path("setup.py")
text = setup.read_text()
probe = re.compile(r"^    cc_major, cc_minor = torch\.cuda\.get_device_capability\(\)\n.*?"
                   r"^        raise RuntimeError\(\"Unsupported GPU\"\)\n", re.MULTILINE | re.DOTALL)
patched, n = probe.subn(lambda _: REPLACEMENT, text, count=1)
if n:
    setup.write_text(patched)
    print("sageattn3: setup.py builds TORCH_CUDA_ARCH_LIST's Blackwell targets now")
elif MARK in text:
    print("sageattn3: setup.py already patched")
else:  # upstream changed: review before building
    sys.exit("sageattn3: setup.py no longer has the GPU probe this patch replaces; review the patch")
