"""Build DPVO's CUDA extensions as dpvo_cuda, with Eigen 3.4.0 from the build environment.

- the distribution ``dpvo`` is published as ``dpvo_cuda`` (its modules keep their names);
- setup.py includes ``thirdparty/eigen-3.4.0``, which the repository does not hold (its README
  downloads it by hand): the include folder becomes the Eigen 3.4.0 headers of the ``cmeel-eigen``
  wheel the recipe installs into the build environment (``build.extra_deps``), found through that
  interpreter's site-packages, and the build stops naming the wheel when they are missing;
- the kernels pass ``tensor.type()`` to the AT_DISPATCH_* macros, which torch 2.8 no longer
  accepts: ``.scalar_type()`` in the dispatch position, as in packages/patches/torchsparse.py.

Run in the checkout's root; idempotent.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rename import rename_distribution

OLD_INCLUDE = "osp.join(ROOT, 'thirdparty/eigen-3.4.0')"
ANCHOR = "ROOT = osp.dirname(osp.abspath(__file__))\n"
EIGEN = """
# farm: Eigen 3.4.0's headers from the cmeel-eigen wheel in the build environment (build.extra_deps)
import sysconfig
EIGEN = osp.join(sysconfig.get_paths()["purelib"], "cmeel.prefix", "include", "eigen3")
if not osp.isfile(osp.join(EIGEN, "Eigen", "Core")):
    raise SystemExit(f"dpvo_cuda: no Eigen headers at {EIGEN}: install cmeel-eigen==3.4.0.* first")
"""

rename_distribution("dpvo", "dpvo_cuda", "dpvo_cuda")

setup = Path("setup.py")
text = setup.read_text()
if OLD_INCLUDE in text and ANCHOR in text:
    text = text.replace(ANCHOR, ANCHOR + EIGEN, 1).replace(OLD_INCLUDE, "EIGEN")
    setup.write_text(text)
    print("dpvo_cuda: Eigen from the build environment's cmeel-eigen")
elif "cmeel.prefix" in text and OLD_INCLUDE not in text:
    print("dpvo_cuda: Eigen already from cmeel-eigen")
else:  # upstream changed: the include folder would be missing
    sys.exit("dpvo_cuda: setup.py no longer includes thirdparty/eigen-3.4.0 after ROOT; review the patch")

DISPATCH_ARG = re.compile(r'\.type\(\)(,\s*")')
sources = [p for p in sorted(Path("dpvo").rglob("*")) if p.suffix in {".cu", ".cuh", ".cpp", ".h"}]
changed = 0
for path in sources:
    patched, n = DISPATCH_ARG.subn(r".scalar_type()\1", path.read_text())
    if n:
        path.write_text(patched)
        changed += n
if changed:
    print(f"dpvo_cuda: {changed} dispatch argument(s) now use .scalar_type()")
elif any('.scalar_type(), "' in p.read_text() for p in sources):
    print("dpvo_cuda: dispatch arguments already patched")
else:
    sys.exit("dpvo_cuda: no AT_DISPATCH .type() argument found under dpvo/; review the patch")
