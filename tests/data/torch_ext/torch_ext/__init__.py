"""scale(x, a) = a * x and square_sum(x) = sum(x * x), on CUDA float32 tensors."""

import torch  # noqa: F401  (loads libtorch, which _C links)

from torch_ext._C import scale, square_sum

__all__ = ["scale", "square_sum"]
