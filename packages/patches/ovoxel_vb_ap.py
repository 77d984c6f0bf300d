"""Publish the O-Voxel of PozzettiAndrea's Trellis.2.drtk as o_voxel_vb_ap: the distribution and
its import package, so it installs beside o_voxel and o_voxel_vb.

Run in the build folder; idempotent (packages/patches/_rename.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rename import rename_package

rename_package("o_voxel", "o_voxel_vb_ap", "ovoxel_vb_ap")
