# Like vLLM 0.27.1: setup.py runs the CMake project, which gives each kernel family its own targets.
import subprocess

from setuptools import setup

subprocess.check_call(["cmake", "-S", ".", "-B", "build"])
setup(name="vllm_like")
