"""farm: build orchestration for a CUDA wheel farm.

The GPU arch list of every wheel is a checked fact: resolved per cell, linted against the
sources, asserted against the built binaries, and recorded as provenance.
"""

__version__ = "0.1.0"
# The distribution name (pyproject.toml): what `pip install` takes. PyPI's `farm` is an unrelated project.
DISTRIBUTION = "cuda-wheel-farm"
