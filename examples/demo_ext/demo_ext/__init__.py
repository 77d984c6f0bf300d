"""demo_ext: run a tiny arch-gated CUDA kernel and report which image the driver chose.

Importing needs no GPU. :func:`run` needs one.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import _C

__version__ = "0.1.0"


@dataclass(frozen=True)
class Result:
    cuda_arch: int  # __CUDA_ARCH__ of the image that ran, e.g. 900
    total: int  # sum of i*i for i < n, computed on the GPU
    expected: int  # the same sum, computed here

    @property
    def ok(self) -> bool:
        return self.total == self.expected


def device_count() -> int:
    """Visible CUDA devices; 0 without a driver or GPU."""
    return _C.device_count()


def run(n: int = 1 << 16) -> Result:
    """Run the kernels on the current GPU. Raises RuntimeError (e.g. no kernel image for the device)."""
    cuda_arch, total = _C.run(n)
    return Result(cuda_arch, total, (n - 1) * n * (2 * n - 1) // 6 if n > 0 else 0)
