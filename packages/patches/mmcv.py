"""Keep the distribution name `mmcv` for mmcv 1.7.2 built with its CUDA ops.

setup.py names the distribution `mmcv-full` whenever MMCV_WITH_OPS=1 (the recipe sets it so the
ops are compiled); the name PyPI's 1.x builds with ops use, and the public farm publishes, is
`mmcv`. Run in the checkout's root; idempotent.
"""

import pathlib
import sys

OLD = "name='mmcv' if os.getenv('MMCV_WITH_OPS', '0') == '0' else 'mmcv-full',"
NEW = "name='mmcv',  # farm: the name with ops too"

setup = pathlib.Path("setup.py")
text = setup.read_text()
if OLD in text:
    setup.write_text(text.replace(OLD, NEW, 1))
    print("mmcv: the distribution keeps the name mmcv with ops")
elif NEW in text:
    print("mmcv: setup.py already patched")
else:  # upstream changed: the wheel would come out under another name
    sys.exit("mmcv: setup.py no longer has the name switch this patch replaces; review the patch")
