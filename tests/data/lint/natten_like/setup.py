# Builds through its own CMake project, with its own arch variable (NATTEN-like).
import os
import subprocess
from os import path

from setuptools import setup

this_dir = path.dirname(path.abspath(__file__))


def build_libnatten(build_dir):
    cmake_lists_dir = path.join(this_dir, "csrc")
    archs = os.environ.get("NATTEN_CUDA_ARCH", "")
    subprocess.check_call(["cmake", cmake_lists_dir, f"-DNATTEN_CUDA_ARCH_LIST={archs}"], cwd=build_dir)
    subprocess.check_call(["cmake", "--build", build_dir])


setup(name="natten_like", version="0.1")
