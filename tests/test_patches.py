"""farm's own patch scripts (packages/patches/): each changes exactly what it says on a setup.py
shaped like the upstream one, is idempotent, and refuses a setup.py it no longer recognises."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from tests.support.setuptrees import MMCV

PATCHES = Path(__file__).resolve().parent.parent / "packages" / "patches"

FUSED_SSIM = textwrap.dedent("""\
    import torch
    fallback_archs = [
        "-gencode=arch=compute_75,code=sm_75",
        "-gencode=arch=compute_89,code=sm_89",
    ]
    nvcc_args = ["-O3"]
    if torch.cuda.is_available():
        nvcc_args.append("-arch=sm_90")
    else:
        nvcc_args.extend(fallback_archs)
    """)

SAGEATTN3 = textwrap.dedent("""\
    import os
    import subprocess
    from pathlib import Path
    import torch
    this_dir = os.path.dirname(os.path.abspath(__file__))
    if True:
        cc_flag = []
        cc_major, cc_minor = torch.cuda.get_device_capability()
        if (cc_major, cc_minor) == (10, 0):
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_100a,code=sm_100a")
        else:
            raise RuntimeError("Unsupported GPU")
        FLAGS = cc_flag
        repo_dir = Path(this_dir)
        cutlass_dir = repo_dir / "csrc" / "cutlass"
        (repo_dir / "csrc").mkdir(parents=True, exist_ok=True)
        if not cutlass_dir.exists():
            subprocess.run(
                ["git", "clone", "--depth", "1", "https://github.com/NVIDIA/cutlass.git", str(cutlass_dir)],
                check=True
            )
    """)

RASTERIZER = textwrap.dedent("""\
    NAME = dict(
        version="0.1",
        name="custom_rasterizer",
    )["name"]
    """)

def run(script: str, folder: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PATCHES / script)], cwd=folder, capture_output=True, text=True,
                          check=False, env=env)


def evaluate(folder: Path, env: dict[str, str], name: str) -> object:
    """Run the patched setup.py's module body with a stand-in torch; return one of its globals."""
    code = (folder / "setup.py").read_text()
    ast.parse(code)
    torch = type(sys)("torch")
    torch.cuda = type(sys)("torch.cuda")  # type: ignore[attr-defined]  # a probe would fail loudly: the patch must not reach it
    namespace: dict[str, object] = {"__file__": str(folder / "setup.py")}
    saved = sys.modules.get("torch")
    sys.modules["torch"] = torch
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            exec(compile(code, "setup.py", "exec"), namespace)  # noqa: S102 (runs the patched setup.py as pip would)
    finally:
        if saved is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = saved
    return namespace[name]


@pytest.mark.parametrize(("script", "text", "env", "name", "expected"), [
    ("fused_ssim.py", FUSED_SSIM, {}, "nvcc_args", ["-O3"]),
    ("mmcv.py", MMCV, {"MMCV_WITH_OPS": "1"}, "NAME", "mmcv"),
    ("custom_rasterizer_hy3d2.py", RASTERIZER, {}, "NAME", "custom_rasterizer_hy3d2"),
])
def test_patch_applies_once_and_does_what_it_says(
    tmp_path: Path, script: str, text: str, env: dict[str, str], name: str, expected: object
) -> None:
    (tmp_path / "setup.py").write_text(text)
    first = run(script, tmp_path)
    assert first.returncode == 0, first.stderr
    patched = (tmp_path / "setup.py").read_text()
    assert patched != text
    second = run(script, tmp_path)
    assert second.returncode == 0
    assert "already patched" in second.stdout
    assert (tmp_path / "setup.py").read_text() == patched
    assert evaluate(tmp_path, env, name) == expected


def _recording_git(folder: Path) -> dict[str, str]:
    """An environment whose ``git`` records its arguments in ``folder/git-called`` (and clones
    nothing): what the setup.py would run shows there."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(f'#!/bin/sh\necho "$@" >> {folder / "git-called"}\n')
    (bin_dir / "git").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_sageattn3_builds_the_lists_targets_with_the_placed_cutlass_and_never_clones(tmp_path: Path) -> None:
    src, tools = tmp_path / "src", tmp_path / "tools"
    src.mkdir()
    tools.mkdir()
    env = {**_recording_git(tools), "TORCH_CUDA_ARCH_LIST": "10.0a;12.0a"}
    # upstream's, on a machine with a Blackwell GPU: clones CUTLASS's default branch during the build
    (src / "setup.py").write_text(SAGEATTN3.replace("cc_major, cc_minor = torch.cuda.get_device_capability()",
                                                    "cc_major, cc_minor = 10, 0"))
    evaluate(src, env, "FLAGS")
    assert "clone --depth 1 https://github.com/NVIDIA/cutlass.git" in (tools / "git-called").read_text()
    (tools / "git-called").unlink()

    (src / "setup.py").write_text(SAGEATTN3)
    first = run("sageattn3.py", src)
    assert first.returncode == 0, first.stderr
    patched = (src / "setup.py").read_text()
    second = run("sageattn3.py", src)
    assert second.returncode == 0
    assert "already patched" in second.stdout
    assert (src / "setup.py").read_text() == patched
    with pytest.raises(RuntimeError, match=r"csrc/cutlass holds no CUTLASS: the recipe places it .*source.vendor"):
        evaluate(src, env, "FLAGS")  # nothing placed: stops, and clones nothing
    header = src / "csrc" / "cutlass" / "include" / "cutlass" / "cutlass.h"
    header.parent.mkdir(parents=True)
    header.write_text("// CUTLASS at the recipe's commit\n")
    assert evaluate(src, env, "FLAGS") == ["-gencode", "arch=compute_100a,code=sm_100a",
                                           "-gencode", "arch=compute_120a,code=sm_120a"]
    assert not (tools / "git-called").exists()


@pytest.mark.parametrize(("drop", "message"), [
    ("    cc_major, cc_minor = torch.cuda.get_device_capability()\n", "no longer has the GPU probe"),
    ("            check=True\n", "setup.py:18: expected 'if not cutlass_dir.exists():'"),
])
def test_sageattn3_refuses_a_setup_py_with_either_block_changed_and_writes_nothing(
        tmp_path: Path, drop: str, message: str) -> None:
    text = SAGEATTN3.replace(drop, "", 1)
    (tmp_path / "setup.py").write_text(text)
    proc = run("sageattn3.py", tmp_path)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "review the patch" in proc.stderr
    assert (tmp_path / "setup.py").read_text() == text


SAGEATTENTION_PYPROJECT = textwrap.dedent("""\
    [build-system]
    requires = [
      "setuptools>=62,<75",
      "wheel>=0.38,<0.44",
      "packaging>=21,<24",
    ]
    build-backend = "setuptools.build_meta"
    """)


def test_sageattention_build_requirements_lose_only_their_upper_bounds(tmp_path: Path) -> None:
    """torch 2.14.1 requires setuptools>=77.0.3: with upstream's setuptools<75 no build environment
    passes build's dependency check; the patched list is met by one that holds torch."""
    (tmp_path / "pyproject.toml").write_text(SAGEATTENTION_PYPROJECT)
    first = run("sageattention_pyproject.py", tmp_path)
    assert first.returncode == 0, first.stderr
    patched = (tmp_path / "pyproject.toml").read_text()
    assert tomllib.loads(patched)["build-system"] == {
        "requires": ["setuptools>=62", "wheel>=0.38", "packaging>=21"], "build-backend": "setuptools.build_meta"}
    again = run("sageattention_pyproject.py", tmp_path)
    assert again.returncode == 0
    assert "already patched" in again.stdout
    assert (tmp_path / "pyproject.toml").read_text() == patched
    moved = SAGEATTENTION_PYPROJECT.replace("<75", "<80")  # upstream changed its bound: review first
    (tmp_path / "pyproject.toml").write_text(moved)
    proc = run("sageattention_pyproject.py", tmp_path)
    assert proc.returncode != 0
    assert "pyproject.toml:3: expected" in proc.stderr
    assert (tmp_path / "pyproject.toml").read_text() == moved


def test_sageattn3_without_a_blackwell_arch_still_refuses(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text(SAGEATTN3)
    assert run("sageattn3.py", tmp_path).returncode == 0
    with pytest.raises(RuntimeError, match="Unsupported GPU"):
        evaluate(tmp_path, {"TORCH_CUDA_ARCH_LIST": "9.0"}, "FLAGS")


@pytest.mark.parametrize("script", ["fused_ssim.py", "sageattn3.py", "mmcv.py", "custom_rasterizer_hy3d2.py",
                                    "pyg_ninja.py"])
def test_patch_refuses_a_setup_py_it_does_not_recognise(tmp_path: Path, script: str) -> None:
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='other')\n")
    proc = run(script, tmp_path)
    assert proc.returncode != 0
    assert "review the patch" in proc.stderr
    assert (tmp_path / "setup.py").read_text() == "from setuptools import setup\nsetup(name='other')\n"


# The end of setup.py in torch_scatter 2.1.2, torch_cluster 1.6.3 and torch_spline_conv 1.2.2 (and
# at the newest snapshot commit of each repository): the same lines.
PYG_SETUP_END = textwrap.dedent("""\
    setup(
        name='torch_scatter',
        ext_modules=get_extensions() if not BUILD_DOCS else [],
        cmdclass={
            'build_ext':
            BuildExtension.with_options(no_python_abi_suffix=True, use_ninja=False)
        },
        packages=find_packages(),
    )
    """)


def _build_ext_options(setup_py: Path) -> dict[str, object]:
    """The keyword arguments setup.py gives ``BuildExtension.with_options``."""
    calls = [node for node in ast.walk(ast.parse(setup_py.read_text())) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr == "with_options"]
    assert len(calls) == 1
    return {kw.arg: ast.literal_eval(kw.value) for kw in calls[0].keywords if kw.arg}


def test_pyg_ninja_lets_torch_build_with_ninja(tmp_path: Path) -> None:
    """Without ``use_ninja=False`` torch's BuildExtension compiles through ninja (its default),
    whose nvcc is ``$PYTORCH_NVCC``: farm's compiler cache and probe launcher. The rest of the
    options stay upstream's."""
    setup_py = tmp_path / "setup.py"
    setup_py.write_text(PYG_SETUP_END)
    assert _build_ext_options(setup_py) == {"no_python_abi_suffix": True, "use_ninja": False}
    first = run("pyg_ninja.py", tmp_path)
    assert first.returncode == 0, first.stderr
    patched = setup_py.read_text()
    assert _build_ext_options(setup_py) == {"no_python_abi_suffix": True}
    second = run("pyg_ninja.py", tmp_path)
    assert second.returncode == 0
    assert "already patched" in second.stdout
    assert setup_py.read_text() == patched


def test_torchsparse_dispatch_arguments_use_scalar_type(tmp_path: Path) -> None:
    kernel = tmp_path / "torchsparse" / "backend" / "voxelize" / "voxelize_cuda.cu"
    kernel.parent.mkdir(parents=True)
    source = ('AT_DISPATCH_FLOATING_TYPES_AND_HALF(\n    inputs.type(), "voxelize_forward_cuda", ([&] {}));\n'
              "bool cuda = inputs.type().is_cuda();\n")
    kernel.write_text(source)
    assert run("torchsparse.py", tmp_path).returncode == 0
    patched = kernel.read_text()
    assert 'inputs.scalar_type(), "voxelize_forward_cuda"' in patched
    assert "inputs.type().is_cuda()" in patched  # only the dispatch position is rewritten
    again = run("torchsparse.py", tmp_path)
    assert again.returncode == 0
    assert "already patched" in again.stdout
    assert kernel.read_text() == patched
    kernel.write_text("int x;\n")
    assert run("torchsparse.py", tmp_path).returncode != 0


# -- the renamed forks: trees shaped like the pinned upstream ones (setup.py, pyproject.toml, package)
OVOXEL_SETUP = textwrap.dedent("""\
    from setuptools import setup
    setup(
        name="o_voxel",
        packages=[
            'o_voxel',
            'o_voxel.convert',
        ],
        ext_modules=[CUDAExtension(name="o_voxel._C", sources=["src/ext.cpp"])],
    )
    """)
PYPROJECT = '[project]\nname = "{name}"\nversion = "0.0.1"\nauthors = [\n    {{ name = "Jianfeng Xiang" }}\n]\n'


def _fork(tmp_path: Path, package: str, setup: str, files: dict[str, str]) -> Path:
    (tmp_path / "setup.py").write_text(setup)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(name=package))
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(("script", "new"), [("ovoxel_vb.py", "o_voxel_vb"), ("ovoxel_vb_ap.py", "o_voxel_vb_ap")])
def test_an_ovoxel_fork_is_renamed_package_and_all(tmp_path: Path, script: str, new: str) -> None:
    _fork(tmp_path, "o_voxel", OVOXEL_SETUP, {
        "o_voxel/__init__.py": "from . import convert\nfrom o_voxel.convert import mesh\n",
        "o_voxel/convert/__init__.py": "import o_voxel._C as _C\nNAME = 'o_voxel_helper'\n",
        "src/ext.cpp": "// o_voxel's bindings: C++ is not touched\n"})
    first = run(script, tmp_path)
    assert first.returncode == 0, first.stderr
    assert not (tmp_path / "o_voxel").exists()
    assert (tmp_path / new / "convert" / "__init__.py").is_file()
    setup = (tmp_path / "setup.py").read_text()
    assert f'name="{new}"' in setup
    assert f"'{new}.convert'" in setup
    assert f'name="{new}._C"' in setup
    assert f'name = "{new}"' in (tmp_path / "pyproject.toml").read_text()
    assert 'name = "Jianfeng Xiang"' in (tmp_path / "pyproject.toml").read_text()  # not a project name
    assert f"from {new}.convert import mesh" in (tmp_path / new / "__init__.py").read_text()
    # a word of its own only: a longer name that merely starts with it is left alone
    assert f"import {new}._C as _C\nNAME = 'o_voxel_helper'" in (tmp_path / new / "convert" / "__init__.py").read_text()
    assert (tmp_path / "src" / "ext.cpp").read_text().startswith("// o_voxel's")
    snapshot = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    second = run(script, tmp_path)
    assert second.returncode == 0
    assert "already renamed" in second.stdout
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == snapshot


def test_flexgemm_vb_renames_its_autotuner_cache_folder_too(tmp_path: Path) -> None:
    setup = 'from setuptools import setup\nsetup(name="flex_gemm", packages=["flex_gemm", "flex_gemm.ops"])\n'
    _fork(tmp_path, "flex_gemm", setup, {
        "flex_gemm/__init__.py": "import os\nCACHE = os.path.expanduser('~/.flex_gemm/autotune_cache.json')\n"})
    assert run("flexgemm_vb.py", tmp_path).returncode == 0
    text = (tmp_path / "flex_gemm_vb" / "__init__.py").read_text()
    assert "'~/.flex_gemm_vb/autotune_cache.json'" in text


def test_cumesh_vb_renames_only_the_distribution(tmp_path: Path) -> None:
    setup = textwrap.dedent("""\
        setup(
            name="cumesh",
            packages=['cumesh'],
            ext_modules=[CUDAExtension(name="cumesh._C", sources=["src/ext.cpp"])],
        )
        """)
    _fork(tmp_path, "cumesh", setup, {"cumesh/__init__.py": "from . import _C\n"})
    assert run("cumesh_vb.py", tmp_path).returncode == 0
    text = (tmp_path / "setup.py").read_text()
    assert 'name="cumesh_vb"' in text
    assert "packages=['cumesh']" in text
    assert 'name="cumesh._C"' in text
    assert 'name = "cumesh_vb"' in (tmp_path / "pyproject.toml").read_text()
    assert (tmp_path / "cumesh" / "__init__.py").is_file()
    again = run("cumesh_vb.py", tmp_path)
    assert again.returncode == 0
    assert "already renamed" in again.stdout


@pytest.mark.parametrize("script", ["cumesh_vb.py", "flexgemm_vb.py", "ovoxel_vb.py", "ovoxel_vb_ap.py"])
def test_a_rename_refuses_a_tree_it_does_not_recognise(tmp_path: Path, script: str) -> None:
    (tmp_path / "setup.py").write_text('setup(name="something_else", packages=["something_else"])\n')
    proc = run(script, tmp_path)
    assert proc.returncode != 0
    assert "review the patch" in proc.stderr


DPVO_SETUP = textwrap.dedent("""\
    import os.path as osp
    from setuptools import setup, find_packages
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    ROOT = osp.dirname(osp.abspath(__file__))

    setup(
        name='dpvo',
        packages=find_packages(),
        ext_modules=[
            CUDAExtension('cuda_ba',
                sources=['dpvo/fastba/ba.cpp'],
                include_dirs=[
                    osp.join(ROOT, 'thirdparty/eigen-3.4.0')]
                ),
            CUDAExtension('lietorch_backends',
                include_dirs=[
                    osp.join(ROOT, 'dpvo/lietorch/include'),
                    osp.join(ROOT, 'thirdparty/eigen-3.4.0')],
                sources=['dpvo/lietorch/src/lietorch.cpp']),
        ])
    """)
DPVO_KERNEL = """\
  AT_DISPATCH_FLOATING_TYPES_AND_HALF(fmap1.type(), "corr_forward_kernel", ([&] {
    if (a.device().type() == torch::DeviceType::CPU) {}
"""


def _dpvo(tmp_path: Path) -> Path:
    (tmp_path / "dpvo").mkdir(parents=True)
    (tmp_path / "setup.py").write_text(DPVO_SETUP)
    (tmp_path / "dpvo" / "altcorr").mkdir()
    (tmp_path / "dpvo" / "altcorr" / "correlation_kernel.cu").write_text(DPVO_KERNEL)
    return tmp_path


def _eval_eigen(folder: Path, purelib: Path) -> tuple[str, list[object]]:
    """Run the patched setup.py's head (up to setup()) with sysconfig's purelib pointed at ``purelib``."""
    head = "\n".join(line for line in (folder / "setup.py").read_text().split("\nsetup(", 1)[0].splitlines()
                     if not line.startswith("from torch"))  # torch is the build environment's, not here
    code = ("import sysconfig, json\n_real = sysconfig.get_paths\n"
            f"sysconfig.get_paths = lambda *a, **k: {{**_real(*a, **k), 'purelib': {str(purelib)!r}}}\n"
            f"__file__ = {str(folder / 'setup.py')!r}\n" + head + "\nprint(EIGEN)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    return proc.stdout.strip(), [proc.returncode, proc.stderr]


def test_dpvo_cuda_takes_eigen_from_the_build_environment(tmp_path: Path) -> None:
    folder = _dpvo(tmp_path / "src")
    first = run("dpvo_cuda.py", folder)
    assert first.returncode == 0, first.stderr
    setup = (folder / "setup.py").read_text()
    assert "name='dpvo_cuda'" in setup
    assert "thirdparty/eigen-3.4.0" not in setup
    assert setup.count("EIGEN]") + setup.count("EIGEN)") >= 2
    # the include folder is the cmeel-eigen wheel's, in the interpreter that runs the build
    site = tmp_path / "site"
    (site / "cmeel.prefix" / "include" / "eigen3" / "Eigen").mkdir(parents=True)
    (site / "cmeel.prefix" / "include" / "eigen3" / "Eigen" / "Core").write_text("// Eigen\n")
    found, _ = _eval_eigen(folder, site)
    assert found == str(site / "cmeel.prefix" / "include" / "eigen3")
    _, (rc, err) = _eval_eigen(folder, tmp_path / "no-site")
    assert rc != 0
    assert "install cmeel-eigen==3.4.0.* first" in str(err)
    kernel = (folder / "dpvo" / "altcorr" / "correlation_kernel.cu").read_text()
    assert 'fmap1.scalar_type(), "corr_forward_kernel"' in kernel
    assert "a.device().type() == torch::DeviceType::CPU" in kernel  # not a dispatch argument
    snapshot = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    again = run("dpvo_cuda.py", folder)
    assert again.returncode == 0
    assert "already" in again.stdout
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == snapshot


def test_dpvo_cuda_refuses_a_setup_without_the_eigen_folder(tmp_path: Path) -> None:
    folder = _dpvo(tmp_path)
    (folder / "setup.py").write_text(DPVO_SETUP.replace("thirdparty/eigen-3.4.0", "third_party/eigen"))
    proc = run("dpvo_cuda.py", folder)
    assert proc.returncode != 0
    assert "review the patch" in proc.stderr


NUNCHAKU = textwrap.dedent("""\
    if True:
        version = "1.2.1"
        torch_major_minor_version = "2.8"
        cuda_version = "12.8"
        if "dev" in version:
            version = version + "20260101"
        # Version format: 1.2.0+cu12.4torch2.4
        version = f"{version}+cu{cuda_version}torch{torch_major_minor_version}"

        ROOT_DIR = "."
    """)


def test_nunchaku_keeps_the_version_as_released(tmp_path: Path) -> None:
    """Its setup.py appends +cuXX.YtorchM.m itself; farm's stamp writes the cell's label."""
    (tmp_path / "setup.py").write_text(NUNCHAKU)
    first = run("nunchaku.py", tmp_path)
    assert first.returncode == 0, first.stderr
    patched = (tmp_path / "setup.py").read_text()
    namespace: dict[str, object] = {}
    exec(compile(patched, "setup.py", "exec"), namespace)  # noqa: S102 (the patched setup.py's own lines)
    assert namespace["version"] == "1.2.1"
    assert patched.count("\n") == NUNCHAKU.count("\n") - 1  # the two lines became the one comment
    again = run("nunchaku.py", tmp_path)
    assert "already patched" in again.stdout
    assert (tmp_path / "setup.py").read_text() == patched
    (tmp_path / "setup.py").write_text(NUNCHAKU.replace("torch{torch_major_minor_version}", "pt{torch_major_minor_version}"))
    proc = run("nunchaku.py", tmp_path)
    assert proc.returncode != 0
    assert "setup.py:7:" in proc.stderr  # the comment line matches; the assignment below it moved
    assert "review the patch" in proc.stderr


PYG_LIB_CMAKE = textwrap.dedent("""\
    cmake_minimum_required(VERSION 3.18)
    project(pyg)
    set(CMAKE_CXX_STANDARD 17)
    message(STATUS "pyg C++ standard: ${CMAKE_CXX_STANDARD}")
    option(WITH_CUDA "Enable CUDA support" OFF)
    add_library(${PROJECT_NAME} SHARED pyg.cpp)

    find_package(Torch REQUIRED)
    message("-- TORCH_LIBRARIES: ${TORCH_LIBRARIES}")
    target_link_libraries(${PROJECT_NAME} PRIVATE ${TORCH_LIBRARIES})
    """)

PYG_LIB_SETUP = textwrap.dedent("""\
    import os
    import torch
    def build_extension(extdir="/x"):
        if True:
            WITH_CUDA = True

            cmake_args = [
                '-DBUILD_TEST=OFF',
                '-DBUILD_BENCHMARK=OFF',
                f'-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}',
            ]
        return cmake_args
    """)

# torch 2.4-2.6's Caffe2/public/cuda.cmake, reduced to the lines that fail on CUDA >= 12.5: its
# nvtoolsext target links CUDA::nvToolsExt, which CMake's FindCUDAToolkit defines only where the
# toolkit ships NVTX 2 (CUDA::nvtx3, the header-only NVTX 3, is there instead).
TORCH_CONFIG = textwrap.dedent("""\
    add_library(torch::nvtoolsext INTERFACE IMPORTED)
    set_property(TARGET torch::nvtoolsext PROPERTY INTERFACE_LINK_LIBRARIES CUDA::nvToolsExt)
    set(TORCH_LIBRARIES torch::nvtoolsext)
    set(Torch_FOUND TRUE)
    """)


def _configure(folder: Path, cuda_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (folder / "pyg.cpp").write_text("int pyg() { return 0; }\n")
    (folder / "torch").mkdir(exist_ok=True)
    (folder / "torch" / "TorchConfig.cmake").write_text(TORCH_CONFIG)
    # CUDA::nvtx3 as FindCUDAToolkit defines it for a toolkit with nvtx3/ headers (CUDA >= 12.5)
    (folder / "nvtx3.cmake").write_text("add_library(CUDA::nvtx3 INTERFACE IMPORTED)\n")
    return subprocess.run(["cmake", "-S", str(folder), "-B", str(folder / "build"), "-DWITH_CUDA=ON",
                           f"-DTorch_DIR={folder / 'torch'}", f"-DCUDAToolkit_ROOT={cuda_home}",
                           f"-DCMAKE_PROJECT_INCLUDE={folder / 'nvtx3.cmake'}", *args],
                          capture_output=True, text=True, check=False)


def test_pyg_lib_gives_torchs_cmake_config_its_nvtx_target(tmp_path: Path, cuda_home: Path) -> None:
    """CMake configures pyg-lib's CMakeLists.txt against a torch config that links CUDA::nvToolsExt:
    the generate step fails without the patch and succeeds with it."""
    (tmp_path / "CMakeLists.txt").write_text(PYG_LIB_CMAKE)
    (tmp_path / "setup.py").write_text(PYG_LIB_SETUP)
    broken = _configure(tmp_path, cuda_home)
    assert broken.returncode != 0
    assert "CUDA::nvToolsExt" in broken.stderr
    shutil.rmtree(tmp_path / "build")
    first = run("pyg_lib.py", tmp_path)
    assert first.returncode == 0, first.stderr
    patched = (tmp_path / "CMakeLists.txt").read_text()
    assert patched.index("add_library(CUDA::nvToolsExt INTERFACE IMPORTED)") < patched.index("find_package(Torch")
    fixed = _configure(tmp_path, cuda_home)
    assert fixed.returncode == 0, fixed.stderr
    assert "pyg C++ standard: 17" in fixed.stdout  # a CMake run without setup.py's standard: upstream's
    shutil.rmtree(tmp_path / "build")
    raised = _configure(tmp_path, cuda_home, "-DFARM_CXX_STANDARD=20")
    assert "pyg C++ standard: 20" in raised.stdout, raised.stderr
    again = run("pyg_lib.py", tmp_path)
    assert again.stdout.count("already patched") == 3, again.stdout  # both CMakeLists edits and setup.py
    assert (tmp_path / "CMakeLists.txt").read_text() == patched


def test_pyg_lib_refuses_a_cmakelists_without_find_package_torch(tmp_path: Path) -> None:
    moved = PYG_LIB_CMAKE.replace("find_package(Torch REQUIRED)", "find_package(Torch)")
    (tmp_path / "CMakeLists.txt").write_text(moved)
    proc = run("pyg_lib.py", tmp_path)
    assert proc.returncode != 0
    assert "CMakeLists.txt:8:" in proc.stderr
    assert (tmp_path / "CMakeLists.txt").read_text() == moved


@pytest.mark.parametrize(("torch", "std"), [("2.13.0", 17), ("2.14.1", 20)])
def test_pyg_lib_passes_cmake_the_standard_torch_needs(tmp_path: Path, torch: str, std: int) -> None:
    (tmp_path / "CMakeLists.txt").write_text(PYG_LIB_CMAKE)
    (tmp_path / "setup.py").write_text(PYG_LIB_SETUP)
    assert run("pyg_lib.py", tmp_path).returncode == 0
    code = ("import sys, types\ntorch = types.ModuleType('torch')\n"
            f"torch.__version__ = {torch!r}\n"
            "torch.utils = types.SimpleNamespace(cmake_prefix_path='/t')\nsys.modules['torch'] = torch\n"
            + (tmp_path / "setup.py").read_text() + "\nprint(build_extension())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert f"'-DFARM_CXX_STANDARD={std}'" in proc.stdout


CUMM_COMMON = textwrap.dedent("""\
    import os
    import subprocess
    from pathlib import Path

    def cuda_include_lib():
        try:
            nvcc_path = subprocess.check_output(["which", "nvcc"]).decode("utf-8").strip()
            lib = Path(nvcc_path).parent.parent / "lib"
            include = Path(nvcc_path).parent.parent / "targets/x86_64-linux/include"
            if lib.exists() and include.exists():
                return [include], lib
        except Exception:
            pass
        linux_cuda_root = Path("/usr/local/cuda")
        return [linux_cuda_root / "include"], linux_cuda_root / "lib64"
    """)
CUMM_SETUP = textwrap.dedent("""\
    import os
    from pathlib import Path
    cudadevrt = Path("/usr/local/cuda/lib64/libcudadevrt.a")
    """)


def _cumm(folder: Path) -> Path:
    (folder / "cumm").mkdir(parents=True)
    (folder / "cumm" / "common.py").write_text(CUMM_COMMON)
    (folder / "setup.py").write_text(CUMM_SETUP)
    return folder


def test_cumm_takes_the_cells_toolkit_from_cuda_home(tmp_path: Path) -> None:
    """farm's toolkit (nvcc on PATH, lib/ beside it, no targets/ folder) must win over the host's
    /usr/local/cuda, in cumm's compile flags and in the libcudadevrt.a setup.py copies."""
    folder = _cumm(tmp_path / "src")
    first = run("cumm.py", folder)
    assert first.returncode == 0, first.stderr
    home = tmp_path / "toolkit"
    (home / "bin").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (home / "bin" / "nvcc").chmod(0o755)
    env = {"PATH": f"{home / 'bin'}:/usr/bin:/bin", "CUDA_HOME": str(home)}
    code = (f"import sys; sys.path.insert(0, {str(folder)!r}); from cumm.common import cuda_include_lib; "
            "print(cuda_include_lib())")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert found.stdout.strip() == f"([{(home / 'include')!r}], {(home / 'lib64')!r})"
    assert evaluate(folder, {"CUDA_HOME": str(home)}, "cudadevrt") == home / "lib64" / "libcudadevrt.a"
    snapshot = {p: p.read_bytes() for p in folder.rglob("*.py")}
    again = run("cumm.py", folder)
    assert again.returncode == 0
    assert again.stdout.count("already patched") == 2
    assert {p: p.read_bytes() for p in folder.rglob("*.py")} == snapshot


def test_cumm_refuses_a_common_py_it_does_not_recognise(tmp_path: Path) -> None:
    folder = _cumm(tmp_path)
    (folder / "cumm" / "common.py").write_text(CUMM_COMMON.replace('"/usr/local/cuda"', '"/opt/cuda"'))
    proc = run("cumm.py", folder)
    assert proc.returncode != 0
    assert "review the patch" in proc.stderr
    assert (folder / "setup.py").read_text() == CUMM_SETUP
