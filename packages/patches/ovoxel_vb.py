"""Publish the O-Voxel of visualbruno's TRELLIS.2 fork as o_voxel_vb: the distribution and its
import package, so it installs beside o_voxel.

Run in the build folder; idempotent (packages/patches/_rename.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rename import rename_package

rename_package("o_voxel", "o_voxel_vb", "ovoxel_vb")
