"""Publish Hunyuan3D-2.1's custom_rasterizer under the distribution name custom_rasterizer_hy3d2.

`custom_rasterizer` is too generic a name for an index, and both Hunyuan3D releases claim it; only
the distribution is renamed (the modules keep their names, so imports do not change). Run in
hy3dpaint/custom_rasterizer; idempotent.
"""

import pathlib
import sys

OLD = 'name="custom_rasterizer",'
NEW = 'name="custom_rasterizer_hy3d2",'

setup = pathlib.Path("setup.py")
text = setup.read_text()
if OLD in text:
    setup.write_text(text.replace(OLD, NEW, 1))
    print("custom_rasterizer_hy3d2: distribution renamed")
elif NEW in text:
    print("custom_rasterizer_hy3d2: setup.py already patched")
else:  # upstream changed: the wheel would come out under another name
    sys.exit("custom_rasterizer_hy3d2: setup.py no longer names the distribution custom_rasterizer; review the patch")
