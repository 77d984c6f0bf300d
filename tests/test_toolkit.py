"""farm.toolkit: the pins, the request, and a CUDA_HOME from NVIDIA's PyPI wheels that compiles and links."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from farm.cli import main
from farm.errors import ConfigError, ToolError, UsageError
from farm.load.defaults import load_defaults
from farm.model.arch import KNOWN_CUDA_LINES
from farm.toolkit import assemble as tk
from farm.toolkit.check import check_toolkit
from farm.toolkit.components import PYPI_WHEELS, cuda_line
from farm.toolkit.request import request_for
from tests.support import buildroot

KERNEL = r"""
#include <cuda_runtime.h>
__global__ void twice(int* x) { x[threadIdx.x] *= 2; }
extern "C" int launch(int* x) { twice<<<1, 32>>>(x); return (int)cudaGetLastError(); }
"""

DEFAULTS = load_defaults(buildroot.REPO / "_defaults.yml")
TK = DEFAULTS.toolkit


def test_every_configured_line_has_a_pinned_toolkit() -> None:
    assert set(TK.lines) == set(DEFAULTS.cuda_lines)
    for cuda, line in TK.lines.items():
        assert cuda in KNOWN_CUDA_LINES
        assert line.release.startswith(cuda + ".")
        assert {"cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_cuobjdump"} <= set(line.components)
        if cuda.startswith("13."):  # CUDA 13 splits the compiler's front end and crt out of cuda_nvcc
            assert {"cuda_crt", "libnvvm"} <= set(line.components)
        if line.source == "pypi":
            assert set(line.components) | set(TK.torch_components) <= set(line.pypi) <= set(PYPI_WHEELS)
    assert TK.lines["12.8"].release == "12.8.1"
    assert TK.lines["13.0"].release == "13.0.2"
    assert TK.lines["12.8"].manifest_sha256 == "249e28a83008d711d5f72880541c8be6253f6d61608461de4fcb715554a6cf17"
    assert {"libcublas", "libcusparse", "libcusolver", "libcurand", "libcufft", "cuda_nvtx"} <= set(TK.torch_components)


def test_a_torch_cell_gets_the_components_torch_headers_need_and_the_recipe_its_extra() -> None:
    plain = request_for(TK, "13.0")
    torch = request_for(TK, "13.0", torch=True)
    assert "libcusparse" not in plain.components
    assert set(TK.torch_components) <= set(torch.components)
    assert "nvidia-cusparse==12.6.3.3" in torch.pypi
    assert "nvidia-cuda-nvcc==13.0.88" in torch.pypi
    assert plain.key() != torch.key()
    redist = request_for(TK, "12.8", torch=True, extra=("cuda_nvrtc",))
    assert redist.source == "redist"
    assert redist.components[-1] == "cuda_nvrtc"
    assert redist.manifest_url == "https://developer.download.nvidia.com/compute/cuda/redist/redistrib_12.8.1.json"


def test_the_cuda_line_of_a_torch_build_comes_from_its_pinned_runtime_or_toolkit() -> None:
    """The real Requires-Dist of PyPI's torch (Linux x86_64): up to 2.10 it pins the runtime's wheel
    (``nvidia-cuda-runtime-cu12==12.8.90``); from 2.11 on NVIDIA's meta-package
    (``cuda-toolkit[cublas,cudart,...]==13.0.2``), and no runtime wheel at all."""
    real = json.loads((Path(__file__).parent / "data" / "pypi_torch_requires.json").read_text())["requires_dist"]
    assert {version: cuda_line(requires) for version, requires in real.items()} == {
        "2.8.0": "12.8", "2.9.0": "12.8", "2.11.0": "13.0", "2.14.1": "13.0"}
    assert not [r for r in real["2.11.0"] if r.startswith("nvidia-cuda-runtime")]
    assert cuda_line(["nvidia-cuda-runtime-cu13==13.0.96; platform_system == 'Linux'"]) == "13.0"
    assert cuda_line(["nvidia-cuda-runtime==13.2.51"]) == "13.2"
    assert cuda_line(['nvidia-cuda-runtime-cu12 (==12.4.127) ; platform_system == "Linux"']) == "12.4"
    assert cuda_line(["nvidia-cuda-runtime-cu12==13.0.96"]) is None  # the suffix and the pin disagree
    assert cuda_line(["Cuda_Toolkit[cudart]==13.2.0"]) == "13.2"  # the name as packaging canonicalises it
    assert cuda_line(["cuda-toolkit[cudart]<14"]) is None  # no release pinned
    assert cuda_line(['cuda-bindings<14,>=13.0.3; platform_system == "Linux"']) is None  # the bindings' range
    assert cuda_line(["filelock", "not a requirement ((("]) is None


def test_request_bad_inputs() -> None:
    with pytest.raises(UsageError, match="no toolkit is pinned for CUDA '11.8'") as err:
        request_for(TK, "11.8")
    assert "12.8 (12.8.1)" in str(err.value)
    with pytest.raises(UsageError, match="libcublass") as err:
        request_for(TK, "13.0", extra=("libcublass",))
    assert "did you mean 'libcublas'" in str(err.value)
    with pytest.raises(ToolError, match="ptxas only") as exc:  # CUDA 12 wheels hold no nvcc
        request_for(TK, "12.8", source="pypi")
    assert exc.value.exit_code == 3
    with pytest.raises(UsageError, match="Linux only"):
        request_for(TK, "13.0", source="pypi", platform="win_amd64")
    with pytest.raises(UsageError, match="unknown platform"):
        request_for(TK, "13.0", platform="macosx_arm64")
    with pytest.raises(UsageError, match="not a CUDA 13.0 release"):
        request_for(TK, "13.0", release="12.8.1")


def test_windows_cells_of_a_pypi_line_use_the_archives() -> None:
    win = request_for(TK, "13.0", platform="win_amd64")
    assert (win.source, win.platform, win.pypi) == ("redist", "windows-x86_64", ())


def test_a_mirror_is_recorded_not_held_to_nvidias_manifest_pin() -> None:
    pinned = request_for(TK, "12.8")
    mirror = request_for(TK, "12.8", env={"FARM_CUDA_REDIST_URL": "http://127.0.0.1:9/mirror"})
    assert mirror.redist_url == "http://127.0.0.1:9/mirror/"
    assert mirror.manifest_sha256 is None
    assert pinned.manifest_sha256 is not None
    assert mirror.key() != pinned.key()
    flag = request_for(TK, "12.8", redist_url="http://other/", env={"FARM_CUDA_REDIST_URL": "http://env/"})
    assert flag.redist_url == "http://other/"


def test_the_install_script_checks_nvcc_before_the_stamp_and_makes_the_dev_links() -> None:
    request = request_for(TK, "13.0", torch=True)
    script = tk.install_script(request, "/opt/farm/toolkit", python="/opt/python/cp311-cp311/bin/python")
    assert script.startswith("set -eu\n")
    assert "/opt/python/cp311-cp311/bin/python -m pip install --no-deps" in script
    assert "nvidia-cublas==13.1.0.3" in script
    assert 'ln -sfn lib "$H/lib64"' in script
    assert 'ln -s "$n" "$d"' in script
    lines = script.splitlines()
    assert request.key() in lines[1]  # a second run is a no-op
    assert "--version | grep -q 'release 13.0,'" in lines[-2]
    assert tk.STAMP in lines[-1]


def test_dry_run_prints_the_pinned_release_without_network(capsys, monkeypatch) -> None:
    monkeypatch.chdir(buildroot.REPO)
    assert main(["toolkit", "--cuda", "12.8", "--dry-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["release"] == "12.8.1"
    assert data["source"] == "redist"
    assert data["manifest_url"].endswith("/compute/cuda/redist/redistrib_12.8.1.json")
    assert data["components"] == ["cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_cuobjdump"]


def test_an_unknown_platform_exits_2(capsys, monkeypatch) -> None:
    monkeypatch.chdir(buildroot.REPO)
    assert main(["toolkit", "--cuda", "12.8", "--dry-run", "--platform", "macos-arm64"]) == 2
    assert "unknown platform 'macos-arm64'" in capsys.readouterr().err


def test_assembled_toolkit_reports_its_release(pypi_toolkit) -> None:
    assert pypi_toolkit.version == "13.0.88"
    # the development link -lcudart needs, made where the wheel ships only libcudart.so.13
    assert (pypi_toolkit.cuda_home / "lib64" / "libcudart.so").resolve().name == "libcudart.so.13"
    out = subprocess.run([str(pypi_toolkit.nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    assert "V13.0.88" in out
    assert (pypi_toolkit.cuda_home / "lib64").resolve() == (pypi_toolkit.cuda_home / "lib").resolve()


def test_assembled_toolkit_compiles_and_links_a_shared_object(pypi_toolkit, tmp_path) -> None:
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


def test_second_call_is_cached_and_only_verified(pypi_toolkit, monkeypatch) -> None:
    """A cached toolkit is not assembled again; its stamp is a claim (a restored CI cache), so the
    tools run once each to prove it: `nvcc --version` (the stamped release) and `cuobjdump --version`."""
    real_run, ran = subprocess.run, []

    def verify_only(argv: list[str], *args: Any, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        assert list(argv[1:]) == ["--version"], f"a cached toolkit ran {argv!r}"
        ran.append(Path(argv[0]).name)
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", verify_only)
    again = tk.ensure_toolkit(request_for(TK, "13.0"), pypi_toolkit.prefix)
    assert again == pypi_toolkit
    assert ran == ["nvcc", "cuobjdump"]


def test_an_installed_toolkit_is_checked_not_assembled(pypi_toolkit, tmp_path) -> None:
    found = tk.toolkit_at_home(pypi_toolkit.cuda_home)
    assert (found.version, found.cuda, found.nvcc) == ("13.0.88", "13.0", pypi_toolkit.nvcc)
    with pytest.raises(ToolError, match="no bin/nvcc"):
        tk.toolkit_at_home(tmp_path)


def test_cli_prints_cuda_home_and_json(pypi_toolkit, capsys, monkeypatch) -> None:
    monkeypatch.chdir(buildroot.REPO)
    prefix = pypi_toolkit.prefix
    assert main(["toolkit", "--cuda", "13.0", "--prefix", str(prefix)]) == 0
    assert capsys.readouterr().out.strip() == str(pypi_toolkit.cuda_home)
    assert main(["toolkit", "--cuda", "13.0", "--prefix", str(prefix), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {k: data[k] for k in ("cuda", "cuda_home", "nvcc", "cuobjdump", "version", "source", "release")} == {
        "cuda": "13.0", "cuda_home": str(pypi_toolkit.cuda_home), "nvcc": str(pypi_toolkit.nvcc),
        "cuobjdump": str(pypi_toolkit.cuobjdump), "version": "13.0.88", "source": "pypi", "release": "13.0.2"}
    # each component with the version and sha256 of the wheel pip installed (pip's report)
    by_name = {c["name"]: c for c in data["components"]}
    assert list(by_name) == ["cuda_nvcc", "cuda_crt", "libnvvm", "cuda_cudart", "cuda_cccl", "cuda_cuobjdump"]
    assert by_name["cuda_cudart"]["version"] == "13.0.96"
    assert len(by_name["cuda_cudart"]["sha256"]) == 64


def test_a_foreign_prefix_is_refused_untouched(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(buildroot.REPO)
    prefix = tmp_path / "mine"
    prefix.mkdir()
    (prefix / "notes.txt").write_text("keep me")
    assert main(["toolkit", "--cuda", "13.0", "--prefix", str(prefix)]) == 2
    assert "not a toolkit farm assembled" in capsys.readouterr().err
    assert [p.name for p in prefix.iterdir()] == ["notes.txt"]


def test_an_unknown_component_is_bad_input_with_did_you_mean(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(buildroot.REPO)
    assert main(["toolkit", "--cuda", "13.0", "--prefix", str(tmp_path / "tk"), "--component", "cuda_nvtxx"]) == 2
    assert "did you mean 'cuda_nvtx'" in capsys.readouterr().err
    assert not (tmp_path / "tk").exists()


def test_a_file_as_prefix_is_bad_input_and_untouched(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(buildroot.REPO)
    prefix = tmp_path / "afile"
    prefix.write_text("keep me")
    assert main(["toolkit", "--cuda", "13.0", "--prefix", str(prefix)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert prefix.read_text() == "keep me"


def test_a_failed_install_leaves_no_prefix(tmp_path) -> None:
    prefix = tmp_path / "tk"
    broken_python = tmp_path / "python-whose-pip-fails"  # `import pip` works, `-m pip install` fails
    broken_python.write_text('#!/bin/sh\n[ "$1" = -c ] && exit 0\necho "ERROR: no matching distribution" >&2\nexit 1\n')
    broken_python.chmod(0o755)
    with pytest.raises(ToolError, match="no matching distribution"):
        tk.ensure_toolkit(request_for(TK, "13.0"), prefix, python=str(broken_python))
    assert not prefix.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["python-whose-pip-fails"]


@pytest.mark.slow  # pip installs NVIDIA's wheels, as for every PyPI toolkit
def test_no_c_compiler_for_the_stub_is_named_and_not_taken_for_pip(tmp_path, monkeypatch) -> None:
    """The wheels install, then the link-time libcuda stub cannot be compiled: the error says that
    and what to do, and nothing of reaching PyPI; nothing is left in the prefix."""
    tools = tmp_path / "bin"  # what the install script runs, and no C compiler
    tools.mkdir()
    for name in ("sh", "ln", "grep", "mkdir"):
        found = shutil.which(name)
        assert found is not None
        (tools / name).symlink_to(found)
    monkeypatch.setenv("PATH", str(tools))
    prefix = tmp_path / "tk"
    with pytest.raises(ToolError) as err:
        tk.ensure_toolkit(request_for(TK, "13.0"), prefix)
    assert err.value.message == "cannot make the link-time libcuda stub: no C compiler (cc or gcc) on PATH; install gcc"
    assert err.value.hint is None
    assert "pip" not in str(err.value)
    assert not prefix.exists()


def test_an_environment_without_pip_is_named_before_anything_is_written(tmp_path) -> None:
    """A venv made without pip (as uv makes them): the toolkit's wheels cannot be installed, and the
    message says so instead of relaying `No module named pip` as a network problem."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    prefix = tmp_path / "tk"
    with pytest.raises(ToolError) as err:
        tk.ensure_toolkit(request_for(TK, "13.0"), prefix, python=python)
    assert f"{python} has no pip" in err.value.message
    assert "ensurepip" in (err.value.hint or "")
    assert not prefix.exists()


def test_farm_depends_on_the_pip_it_runs() -> None:
    """`python -m pip` runs from farm's own environment, which uv makes without pip: the build
    extra, which every nox session that builds installs, brings it."""

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    assert "pip" in {Requirement(r).name for r in project["optional-dependencies"]["build"]}


def test_a_shared_cudart_link_works_through_the_dev_link(pypi_toolkit, tmp_path) -> None:
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    so = tmp_path / "libk.so"
    subprocess.run([str(pypi_toolkit.nvcc), "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", "-lcudart",
                    "-gencode=arch=compute_80,code=sm_80", str(src), "-o", str(so)],
                   check=True, capture_output=True, text=True)
    needed = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    assert "libcudart.so.13" in needed


# -- the pre-compile check ------------------------------------------------------------------------
def test_the_check_names_the_missing_header_where_it_is_included_and_the_component(pypi_toolkit, tmp_path) -> None:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "ops.cu").write_text("#include <cuda_runtime.h>\n#include <thrust/sort.h>\n"
                                              '\n  #  include <cusparse.h>\n#include "local.h"\n')
    (tmp_path / "csrc" / "local.h").write_text("#include <curand_kernel.h>\n")
    with pytest.raises(ConfigError) as err:
        check_toolkit(pypi_toolkit.cuda_home, request_for(TK, "13.0").components, source_root=tmp_path,
                      recipe_where="packages/x.yml")
    text = str(err.value)
    assert "libcusparse: <cusparse.h> at csrc/ops.cu:4" in text
    assert "libcurand: <curand_kernel.h> at csrc/local.h:1" in text
    assert "add to build.extra_cuda_components: libcurand libcusparse" in text
    assert err.value.exit_code == 2
    assert text.startswith("packages/x.yml")


def test_the_check_passes_what_the_toolkit_has_and_skips_a_vendored_copy(pypi_toolkit, tmp_path) -> None:
    (tmp_path / "ops.cu").write_text('#include <cuda_runtime.h>\n#include <cub/cub.cuh>\n#include "nvrtc.h"\n')
    (tmp_path / "nvrtc.h").write_text("// the project's own\n")
    check_toolkit(pypi_toolkit.cuda_home, request_for(TK, "13.0").components, source_root=tmp_path)


def test_the_check_leaves_out_test_and_example_programs(tmp_path) -> None:
    """flash_attn's sdist carries CUTLASS's unit tests, whose NVRTC test includes <nvrtc.h>, and
    NATTEN's CUTLASS submodule its examples, one of which includes <cuda_profiler_api.h>: no wheel
    build compiles them, so a toolkit without NVRTC or the profiler API passes; the same include in
    the package's own sources is still refused."""
    home = tmp_path / "cuda"
    (home / "include").mkdir(parents=True)
    (home / "lib64").mkdir()
    (home / "lib64" / "libcudart.so").write_bytes(b"")
    src = tmp_path / "src"
    (src / "csrc" / "cutlass" / "test" / "unit" / "nvrtc").mkdir(parents=True)
    (src / "csrc" / "cutlass" / "test" / "unit" / "nvrtc" / "testbed.h").write_text("#include <nvrtc.h>\n")
    (src / "tests").mkdir()
    (src / "tests" / "t.cu").write_text("#include <cusparse.h>\n")
    gqa = src / "third_party" / "cutlass" / "examples" / "93_blackwell_low_latency_gqa"
    gqa.mkdir(parents=True)
    (gqa / "tgv_gqa.cu").write_text("#include <cuda_runtime.h>\n#include <cuda_profiler_api.h>\n")
    check_toolkit(home, (), source_root=src)
    (src / "csrc" / "ops.cu").write_text("#include <nvrtc.h>\n")
    with pytest.raises(ConfigError, match=r"cuda_nvrtc: <nvrtc.h> at csrc/ops.cu:1"):
        check_toolkit(home, (), source_root=src)


def test_the_profiler_api_is_its_own_component_not_cudarts(pypi_toolkit, tmp_path) -> None:
    """NVIDIA ships <cuda_profiler_api.h> as the cuda_profiler_api component (its own archive, its
    own wheel): the assembled toolkit's cudart lacks it, and the check names the component that has it."""
    assert not (pypi_toolkit.cuda_home / "include" / "cuda_profiler_api.h").exists()
    (tmp_path / "ops.cu").write_text("#include <cuda_runtime.h>\n#include <cuda_profiler_api.h>\n")
    with pytest.raises(ConfigError, match=r"cuda_profiler_api: <cuda_profiler_api.h> at ops.cu:2(.|\n)*"
                                          r"add to build.extra_cuda_components: cuda_profiler_api"):
        check_toolkit(pypi_toolkit.cuda_home, request_for(TK, "13.0").components, source_root=tmp_path)


def test_the_check_refuses_a_toolkit_without_the_cudart_dev_link(tmp_path) -> None:
    home = tmp_path / "cuda"
    (home / "lib").mkdir(parents=True)
    (home / "lib" / "libcudart.so.13").write_bytes(b"")
    with pytest.raises(ToolError, match="no lib64/libcudart.so"):
        check_toolkit(home, ())


def test_the_check_refuses_a_toolkit_missing_its_own_component(pypi_toolkit) -> None:
    with pytest.raises(ToolError, match=r"libcusparse \(include/cusparse.h\)"):
        check_toolkit(pypi_toolkit.cuda_home, ("cuda_nvcc", "libcusparse"))


# -- a torch-linked cell's toolkit --------------------------------------------------------------------
# What ATen/cuda/CUDAContextLight.h and its neighbours include: a torch extension's first TU fails
# on the first of these the toolkit lacks.
TORCH_HEADERS_TU = r"""
#include <cuda_runtime_api.h>
#include <cusparse.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <cusolverDn.h>
#include <curand_kernel.h>
#include <cufft.h>
#include <nvtx3/nvToolsExt.h>
__global__ void k(curandStatePhilox4_32_10_t* s) { curand_init(0, threadIdx.x, 0, &s[threadIdx.x]); }
extern "C" int probe() {
    cublasHandle_t b; cusparseHandle_t sp; cusolverDnHandle_t so; cufftHandle f;
    nvtxRangePushA("probe"); nvtxRangePop();
    return (int)cublasCreate(&b) + (int)cusparseCreate(&sp) + (int)cusolverDnCreate(&so) + (int)cufftCreate(&f);
}
"""


@pytest.mark.slow
def test_a_torch_cells_toolkit_compiles_and_links_what_torchs_headers_include(tmp_path_factory, tmp_path) -> None:
    request = request_for(TK, "13.0", torch=True)
    toolkit = tk.ensure_toolkit(request, tk.toolkit_prefix(tmp_path_factory.mktemp("torchtk"), request))
    assert [c.name for c in toolkit.components][-6:] == list(TK.torch_components)
    src = tmp_path / "ops.cu"
    src.write_text(TORCH_HEADERS_TU)
    check_toolkit(toolkit.cuda_home, request.components, source_root=tmp_path)  # nothing missing
    so = tmp_path / "libops.so"
    subprocess.run([str(toolkit.nvcc), "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_80,code=sm_80",
                    str(src), "-o", str(so), "-lcudart", "-lcublas", "-lcusparse", "-lcusolver", "-lcufft"],
                   check=True, capture_output=True, text=True)
    needed = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    for lib in ("libcublas.so.13", "libcusparse.so.12", "libcusolver.so.12", "libcufft.so.12"):
        assert lib in needed  # linked through the development links farm made


def test_the_dev_links_name_the_shortest_versioned_library(tmp_path) -> None:
    """libX.so -> libX.so.N where the wheel ships it; a library shipped only as libX.so.N.M
    (nvidia-cuda-nvrtc's libnvrtc-builtins.so.13.0) gets its link too; an existing one is kept."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("libcudart.so.13", "libcudart.so.13.0.96", "libnvrtc-builtins.so.13.0", "libnvrtc.so.13",
                 "libkept.so.2", "libkept.so"):
        (lib / name).write_text(name)
    subprocess.run(["sh", "-c", tk._DEV_LINKS_SH], env={"H": str(tmp_path), "PATH": os.environ["PATH"]},
                   check=True)
    links = {p.name: str(p.readlink()) for p in lib.iterdir() if p.is_symlink()}
    assert links == {"libcudart.so": "libcudart.so.13", "libnvrtc-builtins.so": "libnvrtc-builtins.so.13.0",
                     "libnvrtc.so": "libnvrtc.so.13"}
    assert (lib / "libkept.so").read_text() == "libkept.so"
