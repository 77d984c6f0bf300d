"""farm.toolkit.cudastub: the link-time libcuda stub, from a real cuda.h, linked by a real library."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from farm.builder.plan import SONAME_EXCLUDES
from farm.fsutil import sha256_file
from farm.provenance import probe
from farm.provenance.buildinfo import ToolkitRecord
from farm.toolkit import assemble as tk
from farm.toolkit import cudastub

HEADER = """
#define cuMemAlloc                          cuMemAlloc_v2
#define cuMemcpyHtoD                        __CUDA_API_PTDS(cuMemcpyHtoD_v2)
#define cuStreamQuery                       __CUDA_API_PTSZ(cuStreamQuery)
#define CUDA_VERSION 13000
CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr,
                            size_t bytesize);
CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType);
"""

# calls the driver API as sageattention's sm90 module does (cuTensorMapEncodeTiled) and cuInit
USER = r"""
#include <cuda.h>
int encode(CUtensorMap *m, void *p, const cuuint64_t *dims, const cuuint64_t *strides,
           const cuuint32_t *box, const cuuint32_t *elem) {
    if (cuInit(0) != CUDA_SUCCESS) return -1;
    return (int)cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, p, dims, strides, box, elem,
                                       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                       CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}
"""


def test_the_exported_names_are_declarations_renames_and_per_thread_variants() -> None:
    names = cudastub.driver_functions(HEADER)
    assert names == ("cuInit", "cuMemAlloc", "cuMemAlloc_v2", "cuMemcpyHtoD_v2_ptds", "cuStreamQuery_ptsz",
                     "cuTensorMapEncodeTiled")
    source = cudastub.stub_source(HEADER)
    assert "int cuTensorMapEncodeTiled(void) { return 34; }" in source
    assert source.count("return 34;") == len(names)


def test_a_header_without_driver_functions_is_refused_and_a_toolkit_without_cuda_h_gets_no_stub(tmp_path) -> None:
    with pytest.raises(cudastub.StubError, match="declares no driver API function"):
        cudastub.stub_source("#define CUDA_VERSION 13000\n")
    assert cudastub.build_stub(tmp_path) is None
    assert not (tmp_path / "lib").exists()


def test_without_a_c_compiler_the_install_scripts_step_says_what_to_do(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda.h").write_text(HEADER)
    monkeypatch.setenv("PATH", str(tmp_path / "include"))  # no cc, no gcc
    assert cudastub.main([str(tmp_path)]) == 1
    assert capsys.readouterr().err == ("farm: cannot make the link-time libcuda stub: no C compiler (cc or gcc) on "
                                       "PATH; install gcc\n")
    assert not (tmp_path / cudastub.STUB).exists()


def test_a_stub_the_toolkit_ships_is_left_alone(tmp_path) -> None:
    shipped = tmp_path / cudastub.STUB  # NVIDIA's, from the cuda_cudart archive
    shipped.parent.mkdir(parents=True)
    shipped.write_bytes(b"\x7fELF nvidia")
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda.h").write_text(HEADER)
    assert cudastub.build_stub(tmp_path) == shipped
    assert shipped.read_bytes() == b"\x7fELF nvidia"


def _readelf(path: Path) -> str:
    return subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout


def _link_user(include: Path, tmp: Path, *, env: dict[str, str], lib_dir: Path | None = None) -> Path:
    """A real shared library calling the driver API, linked with ``-Wl,--as-needed -lcuda`` (Ubuntu's
    default): the stub must define what it calls, or the linker drops it from DT_NEEDED."""
    src, out = tmp / "user.c", tmp / "libuser.so"
    src.write_text(USER)
    cmd = ["cc", "-shared", "-fPIC", f"-I{include}", "-Wl,--as-needed", str(src), "-o", str(out)]
    cmd += [f"-L{lib_dir}"] if lib_dir is not None else []
    proc = subprocess.run([*cmd, "-lcuda"], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return out


def _assert_needs_the_driver_only_by_name(lib: Path) -> None:
    dynamic = _readelf(lib)
    assert "Shared library: [libcuda.so.1]" in dynamic
    # what auditwheel repair sees: a NEEDED name the excludes cover, so the stub never enters a wheel
    assert any(fnmatch.fnmatchcase("libcuda.so.1", g) for g in SONAME_EXCLUDES)


def test_a_stub_from_the_real_cuda_h_links_a_driver_api_user(cuda_home: Path, tmp_path: Path) -> None:
    home = tmp_path / "cuda"
    (home / "include").mkdir(parents=True)
    shutil.copy(cuda_home / "include" / "cuda.h", home / "include" / "cuda.h")
    stub = cudastub.build_stub(home)
    assert stub == home / "lib" / "stubs" / "libcuda.so"
    assert "Library soname: [libcuda.so.1]" in _readelf(stub)
    defined = subprocess.run(["nm", "-D", "--defined-only", str(stub)], capture_output=True, text=True,
                             check=True).stdout.split()
    header = (home / "include" / "cuda.h").read_text()
    names = cudastub.driver_functions(header)
    assert {"cuInit", "cuTensorMapEncodeTiled", "cuMemAlloc_v2", "cuMemcpy_ptds", "cuLaunchKernel_ptsz"} <= set(names)
    assert set(names) <= set(defined)
    lib = _link_user(cuda_home / "include", tmp_path, env=dict(os.environ), lib_dir=stub.parent)
    _assert_needs_the_driver_only_by_name(lib)


def test_the_pypi_toolkit_carries_the_stub_on_the_link_path(pypi_toolkit: tk.Toolkit, tmp_path: Path) -> None:
    """Made by the install script (the same one the container runs), recorded in the ready stamp,
    and found through LIBRARY_PATH alone, as the build's environment sets it."""
    stubs = pypi_toolkit.cuda_home / "lib64" / "stubs"
    assert "Library soname: [libcuda.so.1]" in _readelf(stubs / "libcuda.so")
    assert pypi_toolkit.prefix is not None
    stamp = tk.read_stamp(pypi_toolkit.prefix)
    assert stamp is not None
    assert stamp["libcuda_stub"] == sha256_file(stubs / "libcuda.so")
    # the wheel's provenance records it from the stamp; an installed toolkit's stubs are not farm's
    chain = probe.toolchain(cuda_home=None, builder="native", toolkit=pypi_toolkit.record())
    assert isinstance(chain.toolkit, ToolkitRecord)
    assert chain.toolkit.libcuda_stub == stamp["libcuda_stub"]
    assert tk.toolkit_at_home(pypi_toolkit.cuda_home).record()["libcuda_stub"] is None
    env = {**os.environ, "LIBRARY_PATH": str(stubs)}
    lib = _link_user(pypi_toolkit.cuda_home / "include", tmp_path, env=env)
    _assert_needs_the_driver_only_by_name(lib)
