"""pathnvcc_ext: a test fixture built by a tool that runs nvcc from PATH; importing needs no GPU."""

from ._C import device_count

__all__ = ["device_count"]
