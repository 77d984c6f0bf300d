"""farm.toolkit.assemble: a CUDA_HOME from NVIDIA's PyPI wheels that compiles and links."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from farm.cli import main
from farm.errors import ToolError, UsageError
from farm.model.arch import KNOWN_CUDA_LINES

from . import buildroot

pypi_toolkit = buildroot.pypi_toolkit  # the session fixture, shared with the other build tests

KERNEL = r"""
#include <cuda_runtime.h>
__global__ void twice(int* x) { x[threadIdx.x] *= 2; }
extern "C" int launch(int* x) { twice<<<1, 32>>>(x); return (int)cudaGetLastError(); }
"""


def test_every_pinned_line_is_a_known_cuda_line_and_pins_everything_a_build_needs():
    for cuda, spec in tk.TOOLKITS.items():
        assert cuda in KNOWN_CUDA_LINES
        names = {r.split("==")[0] for r in spec.requirements}
        assert {"nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-nvvm",
                "nvidia-cuda-cccl", "nvidia-cuda-cuobjdump"} <= names
        assert all(re.fullmatch(r"[a-z0-9-]+==[0-9.]+", r) for r in spec.requirements)
        assert spec.nvcc_version.startswith(cuda + ".")


def test_cuda12_lines_are_refused_with_the_reason():
    with pytest.raises(ToolError, match="ptxas only") as exc:
        tk.spec_for("12.8")
    assert exc.value.exit_code == 3


def test_an_unknown_line_is_bad_input_naming_the_known_ones():
    with pytest.raises(UsageError, match="13.0"):
        tk.spec_for("11.8")


def test_the_key_changes_with_the_pins_and_the_extra_wheels():
    spec = tk.spec_for("13.0")
    assert spec.key() == spec.key()
    assert spec.key() != spec.key(("nvidia-nvtx==13.0.85",))
    assert spec.key() != tk.spec_for("13.2").key()


def test_the_install_script_is_one_script_for_host_and_container():
    script = tk.install_script("13.0", "/opt/farm/toolkit", python="/opt/python/cp311-cp311/bin/python")
    assert script.startswith("set -eu\n")
    assert "/opt/python/cp311-cp311/bin/python -m pip install --no-deps" in script
    assert "nvidia-cuda-nvcc==13.0.88" in script
    assert "ln -sfn lib /opt/farm/toolkit/site/nvidia/cu13/lib64" in script
    # the guard that makes a second run a no-op names the installation's key
    assert tk.spec_for("13.0").key() in script.splitlines()[1]


def test_assembled_toolkit_reports_its_release(pypi_toolkit):
    assert pypi_toolkit.version == "13.0.88"
    out = subprocess.run([str(pypi_toolkit.nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    assert "V13.0.88" in out
    assert (pypi_toolkit.cuda_home / "lib64").resolve() == (pypi_toolkit.cuda_home / "lib").resolve()


def test_assembled_toolkit_compiles_and_links_a_shared_object(pypi_toolkit, tmp_path):
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    so = tmp_path / "libk.so"
    subprocess.run(
        [str(pypi_toolkit.nvcc), "-shared", "-Xcompiler", "-fPIC", "-cudart", "static",
         "-gencode=arch=compute_80,code=sm_80", str(src), "-o", str(so)],
        check=True, capture_output=True, text=True,
    )
    listing = subprocess.run([str(pypi_toolkit.cuobjdump), "--list-elf", str(so)],
                             capture_output=True, text=True, check=True).stdout
    assert "sm_80.cubin" in listing
    # cudart is linked in, not needed at run time
    needed = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    assert "libcudart" not in needed


def test_second_call_is_cached_and_runs_nothing(pypi_toolkit, monkeypatch):
    prefix = pypi_toolkit.cuda_home.parents[2]  # <prefix>/site/nvidia/cu13

    def no_tools(*args, **kwargs):
        raise AssertionError(f"a cached toolkit ran {args[0]!r}")

    monkeypatch.setattr(subprocess, "run", no_tools)
    again = tk.ensure_toolkit("13.0", prefix)
    assert again == pypi_toolkit


def test_an_installed_toolkit_is_checked_not_assembled(pypi_toolkit, tmp_path):
    found = tk.toolkit_at_home(pypi_toolkit.cuda_home)
    assert (found.version, found.cuda, found.nvcc) == ("13.0.88", "13.0", pypi_toolkit.nvcc)
    with pytest.raises(ToolError, match="no bin/nvcc"):
        tk.toolkit_at_home(tmp_path)


def test_cli_prints_cuda_home_and_json(pypi_toolkit, capsys):
    prefix = pypi_toolkit.cuda_home.parents[2]
    assert main(["toolkit", "--cuda", "13.0", "--prefix", str(prefix)]) == 0
    assert capsys.readouterr().out.strip() == str(pypi_toolkit.cuda_home)
    assert main(["toolkit", "--cuda", "13.0", "--prefix", str(prefix), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == {"cuda": "13.0", "cuda_home": str(pypi_toolkit.cuda_home), "nvcc": str(pypi_toolkit.nvcc),
                    "cuobjdump": str(pypi_toolkit.cuobjdump), "version": "13.0.88"}


def test_a_foreign_prefix_is_refused_untouched(tmp_path, capsys):
    prefix = tmp_path / "mine"
    prefix.mkdir()
    (prefix / "notes.txt").write_text("keep me")
    assert main(["toolkit", "--cuda", "13.0", "--prefix", str(prefix)]) == 2
    assert "not a toolkit farm assembled" in capsys.readouterr().err
    assert [p.name for p in prefix.iterdir()] == ["notes.txt"]


def test_an_unpinned_extra_wheel_is_bad_input(tmp_path, capsys):
    assert main(["toolkit", "--cuda", "13.0", "--prefix", str(tmp_path / "tk"), "--extra", "nvidia-nvtx"]) == 2
    assert "not a pinned wheel" in capsys.readouterr().err
    assert not (tmp_path / "tk").exists()


def test_a_file_as_prefix_is_bad_input_and_untouched(tmp_path, capsys):
    prefix = tmp_path / "afile"
    prefix.write_text("keep me")
    assert main(["toolkit", "--cuda", "13.0", "--prefix", str(prefix)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert prefix.read_text() == "keep me"


def test_a_failed_install_leaves_no_prefix(tmp_path):
    prefix = tmp_path / "tk"
    broken_python = tmp_path / "python-without-pip"
    broken_python.write_text("#!/bin/sh\necho 'No module named pip' >&2\nexit 1\n")
    broken_python.chmod(0o755)
    with pytest.raises(ToolError, match="No module named pip"):
        tk.ensure_toolkit("13.0", prefix, python=str(broken_python))
    assert not prefix.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["python-without-pip"]
