"""setup.py texts that reproduce the lines of a pinned upstream file a patch edits, shared by the
patch tests (tests/test_patches.py runs the patch and reads a name; tests/test_patches_windows.py
reads the compiler flags as on Windows and Linux)."""

from __future__ import annotations

# mmcv 1.7.2's setup.py: the distribution name switch and the C++ standard of its C++ and CUDA files
MMCV = """\
import os
import platform
from packaging.version import parse as parse_version
import torch
NAME = dict(
    name='mmcv' if os.getenv('MMCV_WITH_OPS', '0') == '0' else 'mmcv-full',
)["name"]
def get_extensions():
    if True:
        extra_compile_args = {'cxx': []}
        if platform.system() != 'Windows':
            if parse_version(torch.__version__) <= parse_version('1.12.1'):
                extra_compile_args['cxx'] = ['-std=c++14']
            else:
                extra_compile_args['cxx'] = ['-std=c++17']
        else:
            if parse_version(torch.__version__) <= parse_version('1.12.1'):
                extra_compile_args['cxx'] = ['/std:c++14']
            else:
                extra_compile_args['cxx'] = ['/std:c++17']
        extra_compile_args['nvcc'] = []
        if 'nvcc' in extra_compile_args and platform.system() != 'Windows':
            if parse_version(torch.__version__) <= parse_version('1.12.1'):
                extra_compile_args['nvcc'] += ['-std=c++14']
            else:
                extra_compile_args['nvcc'] += ['-std=c++17']
    return extra_compile_args
"""
