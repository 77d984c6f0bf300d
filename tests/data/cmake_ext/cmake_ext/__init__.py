"""cmake_ext: a test fixture built by CMake; importing needs no GPU."""

from ._C import device_count

__all__ = ["device_count"]
