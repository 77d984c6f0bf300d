"""Port torchsparse 2.0's dispatch calls to torch >= 2.8.

Its kernels pass ``tensor.type()`` (a DeprecatedTypeProperties) as the first argument of the
AT_DISPATCH_* macros; torch 2.8 removed its conversion to c10::ScalarType, so the build fails.
``tensor.scalar_type()`` is the spelling every torch since 1.x accepts. Only the dispatch
position (``.type(), "op_name"``) is rewritten. Run in the checkout's root; idempotent.
"""

import pathlib
import re
import sys

DISPATCH_ARG = re.compile(r'\.type\(\)(,\s*")')
files = [p for p in pathlib.Path("torchsparse/backend").rglob("*") if p.suffix in {".cu", ".cuh", ".cpp", ".h"}]
changed = 0
for path in files:
    text = path.read_text()
    patched, n = DISPATCH_ARG.subn(r".scalar_type()\1", text)
    if n:
        path.write_text(patched)
        changed += n
if changed:
    print(f"torchsparse: {changed} dispatch argument(s) now use .scalar_type()")
elif any('.scalar_type(), "' in p.read_text() for p in files):
    print("torchsparse: sources already patched")
else:  # upstream changed: review before building
    sys.exit("torchsparse: no AT_DISPATCH .type() argument found under torchsparse/backend; review the patch")
