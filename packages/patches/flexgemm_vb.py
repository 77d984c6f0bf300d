"""Publish visualbruno's FlexGEMM fork as flex_gemm_vb: the distribution and its import package
(and its autotuner cache folder ~/.flex_gemm_vb), so it installs beside flex_gemm.

Run in the build folder; idempotent (packages/patches/_rename.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rename import rename_package

rename_package("flex_gemm", "flex_gemm_vb", "flexgemm_vb")
