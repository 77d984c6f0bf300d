"""Publish visualbruno's CuMesh fork under the distribution name cumesh_vb, beside upstream's
cumesh (the modules keep their names: `import cumesh`).

Run in the build folder; idempotent (packages/patches/_rename.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rename import rename_distribution

rename_distribution("cumesh", "cumesh_vb", "cumesh_vb")
