"""farm's patches for MSVC and for the C++ standard torch's headers need, on trees that reproduce
the exact lines of each pinned upstream file they edit. Windows-only ones (``*_msvc.py``) are a
recipe's ``platform_patch_script`` for win_amd64 cells; the others run on every cell and keep the
Linux build as upstream wrote it except where torch needs C++20 (torch 2.14's ATen.h refuses
C++17; torch 2.13's headers need C++20 under MSVC).

Each one: the anchored lines change as the patch says, a second run changes nothing, and a tree
whose anchor moved is refused with ``file:line`` of the nearest line and nothing written. What a
patched setup.py then gives the compiler is read by running it in a subprocess with a stand-in
torch (only ``__version__``) and ``os.name`` / ``platform.system()`` set as on Windows or Linux.
No Windows host is needed: MSVC's side is the flags and sources the build is handed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from tests.support.setuptrees import MMCV

PATCHES = Path(__file__).resolve().parent.parent / "packages" / "patches"


def run(script: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PATCHES / script)], cwd=folder, capture_output=True, text=True,
                          check=False)


def tree(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def snapshot(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def flags(folder: Path, names: list[str], *, torch: str, windows: bool, setup: str = "setup.py") -> dict[str, object]:
    """The patched setup.py's globals ``names`` (JSON), run as on Windows or Linux with a stand-in
    torch: its ``__version__`` and the names setup.py imports from torch.utils.cpp_extension."""
    prelude = textwrap.dedent(f"""\
        import json, os, platform, sys, types
        torch = types.ModuleType("torch")
        torch.__version__ = {torch!r}
        torch.utils = types.ModuleType("torch.utils")
        torch.utils.cpp_extension = types.ModuleType("torch.utils.cpp_extension")
        torch.utils.cpp_extension.BuildExtension = torch.utils.cpp_extension.CUDAExtension = object
        sys.modules.update({{"torch": torch, "torch.utils": torch.utils,
                            "torch.utils.cpp_extension": torch.utils.cpp_extension}})
        os.name = {"nt" if windows else "posix"!r}
        platform.system = lambda: {"Windows" if windows else "Linux"!r}
        sys.platform = {"win32" if windows else "linux"!r}
        """)
    code = prelude + (folder / setup).read_text() + f"\nprint(json.dumps({{n: globals()[n] for n in {names!r}}}))\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=folder)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def applies_once(script: str, folder: Path) -> dict[Path, bytes]:
    """Run the patch twice: the first changes the tree, the second nothing; the patched tree."""
    before = snapshot(folder)
    first = run(script, folder)
    assert first.returncode == 0, first.stderr
    after = snapshot(folder)
    assert after != before
    second = run(script, folder)
    assert second.returncode == 0, second.stderr
    assert "already patched" in second.stdout or "already" in second.stdout
    assert snapshot(folder) == after
    return after


def refuses(script: str, folder: Path, where: str) -> str:
    """The patch on a tree whose anchor moved: exit non-zero, ``where`` (file:line) named, nothing written."""
    before = snapshot(folder)
    proc = run(script, folder)
    assert proc.returncode != 0
    assert f"{where}:" in proc.stderr, proc.stderr
    assert "review the patch" in proc.stderr
    assert snapshot(folder) == before
    return proc.stderr


# -- fused-ssim: the Windows SDK's `small` macro ------------------------------------------------
SSIM_CU = "#include <torch/extension.h>\n#include <cooperative_groups.h>\n#include <algorithm>\n"
EXT_CPP = '#include <torch/extension.h>\n#include "ssim.h"\n'

# The Windows SDK's documented behaviour, reduced to what matters: windows.h brings rpcndr.h, which
# defines `small` as `char` once (include guard); torch >= 2.10's headers use `small` as a name.
FAKE_SDK = {
    "rpcndr.h": "#ifndef __RPCNDR_H__\n#define __RPCNDR_H__\n#define small char\n#endif\n",
    "windows.h": "#ifndef _WINDOWS_\n#define _WINDOWS_\n#include <rpcndr.h>\n#endif\n",
    "torch/extension.h": "#ifdef _WIN32\n#include <windows.h>\n#endif\nstruct Limits { bool small; };\n",
    "cooperative_groups.h": "", "algorithm": "", "ssim.h": "",
}


def _syntax_ok(unit: Path, include: Path, *defines: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["g++", "-fsyntax-only", "-x", "c++", *defines, f"-I{include}", str(unit)],
                          capture_output=True, text=True, check=False)


def test_fused_ssim_keeps_the_small_macro_out_of_torchs_headers(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"ssim.cu": SSIM_CU, "ext.cpp": EXT_CPP})
    sdk = tree(tmp_path / "sdk", FAKE_SDK)
    # unpatched, as MSVC sees it: torch's `bool small;` becomes `bool char;`
    assert _syntax_ok(src / "ext.cpp", sdk, "-D_WIN32").returncode != 0
    patched = applies_once("fused_ssim_msvc.py", src)
    for unit in ("ssim.cu", "ext.cpp"):
        text = patched[src / unit].decode()
        head, first_include = text.split("#include <torch/extension.h>", 1)[0], text.index("#include <torch/")
        assert "#ifdef _WIN32" in head
        assert "#undef small" in head
        assert "#include <rpcndr.h>" in head
        assert text.index("#undef small") < first_include
        assert text.endswith((SSIM_CU if unit == "ssim.cu" else EXT_CPP).split("\n", 1)[1])  # the rest as it was
        proc = _syntax_ok(src / unit, sdk, "-D_WIN32")
        assert proc.returncode == 0, proc.stderr  # the macro is gone before torch's header, and stays gone
        assert _syntax_ok(src / unit, sdk).returncode == 0  # off Windows the prelude is not compiled


def test_fused_ssim_refuses_a_unit_without_the_torch_include(tmp_path: Path) -> None:
    src = tree(tmp_path, {"ssim.cu": "#include <torch/all.h>\n", "ext.cpp": EXT_CPP})
    refuses("fused_ssim_msvc.py", src, "ssim.cu:1")


# -- drtk: /MT and /GR- ----------------------------------------------------------------------------
DRTK = """\
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
debug = False
cxx_args = {
        "linux": ["-std=c++17", "-Wall"]
    ,
    "win32": (
            ["/MT", "/GR-", "/EHsc", '/D "NOMINMAX"']
            + (
                ["/Od", '/D "_DEBUG"']
                if debug
                else ["/O2", "/fp:fast", "/GL", '/D "NDEBUG"']
            )
    ),
}
"""


def test_drtk_builds_with_torchs_runtime_and_rtti(tmp_path: Path) -> None:
    src = tree(tmp_path, {"setup.py": DRTK})
    applies_once("drtk.py", src)
    got = flags(src, ["cxx_args"], torch="2.8.0", windows=True)["cxx_args"]
    assert got == {"linux": ["-std=c++17", "-Wall"],
                   "win32": ["/EHsc", '/D "NOMINMAX"', "/O2", "/fp:fast", "/GL", '/D "NDEBUG"']}
    # torch 2.14's ATen.h refuses C++17 on every compiler
    assert flags(src, ["cxx_args"], torch="2.14.1", windows=False)["cxx_args"]["linux"] == ["-std=c++20", "-Wall"]  # type: ignore[index]
    (src / "setup.py").write_text(DRTK.replace('["/MT", "/GR-", "/EHsc"', '["/MD", "/EHsc"'))
    refuses("drtk.py", src, "setup.py:7")


# -- the C++ standard: C++20 on Windows with torch >= 2.13 -------------------------------------------
CUBVH = """\
import os
IS_WINDOWS = os.name == "nt"
cpp_standard = 17
base_nvcc_flags = ["-O3", f"-std=c++{cpp_standard}"]
if IS_WINDOWS:
    base_cflags = ["/O2", f"/std:c++{cpp_standard}"]
    base_nvcc_flags += [f"-Xcompiler=/std:c++{cpp_standard}"]
"""


@pytest.mark.parametrize(("torch", "windows", "std"), [
    ("2.13.0+cu130", True, 20), ("2.14.1", True, 20), ("2.12.1+cu126", True, 17), ("2.14.1", False, 20),
    ("2.13.0", False, 17)])
def test_cubvh_compiles_cpp20_where_torch_needs_it(tmp_path: Path, torch: str, windows: bool, std: int) -> None:
    src = tree(tmp_path, {"setup.py": CUBVH})
    applies_once("cubvh.py", src)
    got = flags(src, ["cpp_standard", "base_nvcc_flags"], torch=torch, windows=windows)
    assert got["cpp_standard"] == std
    assert f"-std=c++{std}" in got["base_nvcc_flags"]  # type: ignore[operator]


def test_cubvh_refuses_another_standard_line(tmp_path: Path) -> None:
    src = tree(tmp_path, {"setup.py": CUBVH.replace("cpp_standard = 17", "cpp_standard = 20")})
    refuses("cubvh.py", src, "setup.py:3")


CUMESH = """\
import os
import platform

IS_WINDOWS = platform.system() == "Windows"
cxx_flags = []
nvcc_flags = []
if IS_WINDOWS:
    cxx_flags += [
        "/O2",
        "/std:c++17",
        "/EHsc",
    ]
    nvcc_flags += [
        "-O3",
        "-std=c++17",
        "--expt-relaxed-constexpr",
        "--extended-lambda",
        "-Xcompiler=/std:c++17",
    ]
else:
    cxx_flags += [
        "-O3",
        "-std=c++17"
    ]
    nvcc_flags += [
        "-O3",
        "-std=c++17"
    ]
"""


def test_cumesh_raises_its_msvc_standard_with_torch_2_13(tmp_path: Path) -> None:
    src = tree(tmp_path, {"setup.py": CUMESH})
    applies_once("cumesh.py", src)
    new = flags(src, ["cxx_flags", "nvcc_flags"], torch="2.13.0", windows=True)
    assert new == {"cxx_flags": ["/O2", "/std:c++20", "/EHsc"],
                   "nvcc_flags": ["-O3", "-std=c++20", "--expt-relaxed-constexpr", "--extended-lambda",
                                  "-Xcompiler=/std:c++20"]}
    old = flags(src, ["cxx_flags", "nvcc_flags"], torch="2.11.0", windows=True)
    assert old["cxx_flags"] == ["/O2", "/std:c++17", "/EHsc"]
    assert flags(src, ["cxx_flags", "nvcc_flags"], torch="2.13.0", windows=False) == {
        "cxx_flags": ["-O3", "-std=c++17"], "nvcc_flags": ["-O3", "-std=c++17"]}
    assert flags(src, ["cxx_flags", "nvcc_flags"], torch="2.14.1", windows=False) == {
        "cxx_flags": ["-O3", "-std=c++20"], "nvcc_flags": ["-O3", "-std=c++20"]}


def test_cumesh_refuses_a_setup_without_its_windows_branch(tmp_path: Path) -> None:
    src = tree(tmp_path, {"setup.py": CUMESH.replace('        "/std:c++17",\n', '        "/std:c++20",\n')})
    refuses("cumesh.py", src, "setup.py:10")


PYTORCH3D = """\
import os
def get_extensions():
    extra_compile_args = {"cxx": ["-std=c++17"]}
    if True:
        nvcc_args = ["-DCUDA_HAS_FP16=1"]
        if os.name != "nt":
            nvcc_args.append("-std=c++17")
        extra_compile_args["nvcc"] = nvcc_args
    return extra_compile_args
ARGS = get_extensions()
"""


@pytest.mark.parametrize(("torch", "windows", "cxx", "nvcc_std"), [
    ("2.10.0", True, ["/std:c++17"], []), ("2.13.0", True, ["/std:c++20"], []),
    ("2.13.0", False, ["-std=c++17"], ["-std=c++17"]), ("2.14.1", False, ["-std=c++20"], ["-std=c++20"])])
def test_pytorch3d_spells_its_standard_for_msvc(tmp_path: Path, torch: str, windows: bool, cxx: list[str],
                                               nvcc_std: list[str]) -> None:
    src = tree(tmp_path, {"setup.py": PYTORCH3D})
    applies_once("pytorch3d.py", src)
    assert flags(src, ["ARGS"], torch=torch, windows=windows) == {
        "ARGS": {"cxx": cxx, "nvcc": ["-DCUDA_HAS_FP16=1", *nvcc_std]}}


GSPLAT = """\
import os
def get_extensions():
    extra_compile_args = {"cxx": ["-O3"]}
    if not os.name == "nt":  # Not on Windows:
        extra_compile_args["cxx"] += ["-Wno-sign-compare"]
    nvcc_flags = []
    nvcc_flags += ["-O3", "--use_fast_math", "-std=c++17"]
    extra_compile_args["nvcc"] = nvcc_flags
    return extra_compile_args
ARGS = get_extensions()
"""


def test_gsplat_optimises_with_msvcs_flag(tmp_path: Path) -> None:
    src = tree(tmp_path, {"setup.py": GSPLAT})
    applies_once("gsplat.py", src)
    assert flags(src, ["ARGS"], torch="2.14.1", windows=True) == {
        "ARGS": {"cxx": ["/O2"], "nvcc": ["-O3", "--use_fast_math", "-std=c++20"]}}
    assert flags(src, ["ARGS"], torch="2.14.1", windows=False) == {
        "ARGS": {"cxx": ["-O3", "-Wno-sign-compare"], "nvcc": ["-O3", "--use_fast_math", "-std=c++20"]}}
    assert flags(src, ["ARGS"], torch="2.13.0", windows=False) == {
        "ARGS": {"cxx": ["-O3", "-Wno-sign-compare"], "nvcc": ["-O3", "--use_fast_math", "-std=c++17"]}}
    (src / "setup.py").write_text(GSPLAT.replace('"--use_fast_math", "-std=c++17"', '"-std=c++17"'))
    refuses("gsplat.py", src, "setup.py:7")


FLASH_ATTN = """\
import os, sys
def get_extensions():
    nvcc_flags = [
    "-O3",
    "-std=c++17",
    "--use_fast_math",
    ]

    compiler_c17_flag=["-O3", "-std=c++17"]
    # Add Windows-specific flags
    if sys.platform == "win32" and os.getenv('DISTUTILS_USE_SDK') == '1':
        nvcc_flags.extend(["-Xcompiler", "/Zc:__cplusplus"])
        compiler_c17_flag=["-O2", "/std:c++17", "/Zc:__cplusplus"]
    return {"cxx": compiler_c17_flag, "nvcc": nvcc_flags}
ARGS = get_extensions()
"""


def test_flash_attn_compiles_at_the_standard_torch_needs(tmp_path: Path) -> None:
    src = tree(tmp_path, {"setup.py": FLASH_ATTN})
    applies_once("flash_attn.py", src)
    assert flags(src, ["ARGS"], torch="2.14.1", windows=False) == {
        "ARGS": {"cxx": ["-O3", "-std=c++20"], "nvcc": ["-O3", "-std=c++20", "--use_fast_math"]}}
    assert flags(src, ["ARGS"], torch="2.13.0", windows=False) == {
        "ARGS": {"cxx": ["-O3", "-std=c++17"], "nvcc": ["-O3", "-std=c++17", "--use_fast_math"]}}
    (src / "setup.py").write_text(FLASH_ATTN.replace('compiler_c17_flag=["-O3", "-std=c++17"]', 'cxx=["-O3"]'))
    refuses("flash_attn.py", src, "setup.py:13")


SAGEATTENTION = """\
import os
if True:
    CXX_FLAGS = ["-g", "-O3", "-fopenmp", "-lgomp", "-std=c++17", "-DENABLE_BF16"]
    NVCC_FLAGS = [
        "-O3",
        "-std=c++17",
        "--use_fast_math",
    ]

    # Append flags from env if provided
    cxx_append = os.getenv("CXX_APPEND_FLAGS", "").strip()
"""


def test_sageattention_gives_msvc_its_own_flags(tmp_path: Path) -> None:
    src = tree(tmp_path, {"setup.py": SAGEATTENTION})
    applies_once("sageattention_flags.py", src)
    assert flags(src, ["CXX_FLAGS", "NVCC_FLAGS"], torch="2.9.1", windows=True) == {
        "CXX_FLAGS": ["/O2", "/openmp", "/std:c++17", "/DENABLE_BF16"],
        "NVCC_FLAGS": ["-O3", "-std=c++17", "--use_fast_math"]}
    assert flags(src, ["NVCC_FLAGS"], torch="2.13.0", windows=True) == {
        "NVCC_FLAGS": ["-O3", "-std=c++20", "--use_fast_math"]}
    assert flags(src, ["CXX_FLAGS"], torch="2.13.0", windows=False) == {
        "CXX_FLAGS": ["-g", "-O3", "-fopenmp", "-lgomp", "-std=c++17", "-DENABLE_BF16"]}
    assert flags(src, ["CXX_FLAGS", "NVCC_FLAGS"], torch="2.14.1", windows=False) == {
        "CXX_FLAGS": ["-g", "-O3", "-fopenmp", "-lgomp", "-std=c++20", "-DENABLE_BF16"],
        "NVCC_FLAGS": ["-O3", "-std=c++20", "--use_fast_math"]}


SAGEATTN3 = """\
import os

import torch
FP4ATTN = {
                "cxx": ["-O3", "-std=c++17"],
}
FP4QUANT = {
                "cxx": ["-O3", "-std=c++17"],
}
"""


def test_sageattn3_gives_both_extensions_msvc_flags(tmp_path: Path) -> None:
    src = tree(tmp_path, {"setup.py": SAGEATTN3})
    applies_once("sageattn3_msvc.py", src)
    assert flags(src, ["FP4ATTN", "FP4QUANT"], torch="2.11.0", windows=True) == {
        "FP4ATTN": {"cxx": ["/O2", "/std:c++17"]}, "FP4QUANT": {"cxx": ["/O2", "/std:c++17"]}}
    assert flags(src, ["FP4ATTN"], torch="2.11.0", windows=False) == {"FP4ATTN": {"cxx": ["-O3", "-std=c++17"]}}
    # one extension's flags changed upstream: refused, naming where the one left is
    tree(src, {"setup.py": SAGEATTN3.replace('"-O3", "-std=c++17"],\n}\nFP4QUANT', '"-O2"],\n}\nFP4QUANT', 1)})
    assert "appears 1 time(s), the patch expects 2" in refuses("sageattn3_msvc.py", src, "setup.py:8")


NATTEN = """\
import sys
IS_WINDOWS = sys.platform == "win32"
cmake_args = ["-DNATTEN_IS_WINDOWS=1"]
if True:
            if IS_WINDOWS:
                python_path = sys.executable
                cmake_args.append("-G Ninja")
                cmake_args.append("-DCMAKE_BUILD_TYPE=Release")
"""


@pytest.mark.parametrize(("torch", "windows", "extra"), [
    ("2.13.0", True, ["-DCXX_STD=20", "-G Ninja", "-DCMAKE_BUILD_TYPE=Release"]),
    ("2.10.0", True, ["-DCXX_STD=17", "-G Ninja", "-DCMAKE_BUILD_TYPE=Release"]),
    ("2.13.0", False, ["-DCXX_STD=17"]), ("2.14.1", False, ["-DCXX_STD=20"])])
def test_natten_tells_its_cmake_the_standard(tmp_path: Path, torch: str, windows: bool, extra: list[str]) -> None:
    src = tree(tmp_path, {"setup.py": NATTEN})
    applies_once("natten.py", src)
    assert flags(src, ["cmake_args"], torch=torch, windows=windows) == {"cmake_args": ["-DNATTEN_IS_WINDOWS=1", *extra]}


@pytest.mark.parametrize(("torch", "windows", "args"), [
    ("2.12.1", False, {"cxx": ["-std=c++17"], "nvcc": ["-std=c++17"]}),
    ("2.14.1", False, {"cxx": ["-std=c++20"], "nvcc": ["-std=c++20"]}),
    ("2.12.1", True, {"cxx": ["/std:c++17"], "nvcc": []}),
    ("2.13.0", True, {"cxx": ["/std:c++20"], "nvcc": []})])
def test_mmcv_compiles_cpp20_where_torch_needs_it(tmp_path: Path, torch: str, windows: bool,
                                                  args: dict[str, list[str]]) -> None:
    """Both its C++ and its CUDA files: torch 2.14's ATen.h refuses C++17 in either (the CUDA block was
    missed at first and found by the probe of a torch 2.14 cell)."""
    src = tree(tmp_path, {"setup.py": MMCV + "ARGS = get_extensions()\n"})
    applies_once("mmcv.py", src)
    assert flags(src, ["NAME", "ARGS"], torch=torch, windows=windows) == {"NAME": "mmcv", "ARGS": args}


FLEXGEMM = """\
import os
import platform
cc_flag = ["--use_fast_math"]
cxx11_abi = "1"
if platform.system() == "Windows":
    extra_compile_args = {
        "cxx": ["/O2", "/std:c++17", "/EHsc", "/openmp", "/permissive-", "/Zc:__cplusplus"],
        "nvcc": ["-O3", "-std=c++17", "-Xcompiler=/std:c++17", "-Xcompiler=/EHsc", "-Xcompiler=/permissive-", \
"-Xcompiler=/Zc:__cplusplus"] + cc_flag,
    }
else:
    extra_compile_args = {
        "cxx": ["-O3", "-std=c++17", "-fopenmp", f"-D_GLIBCXX_USE_CXX11_ABI={cxx11_abi}"],
        "nvcc": ["-O3", "-std=c++17"] + cc_flag,
    }
""".replace("\\\n", "")


@pytest.mark.parametrize(("torch", "windows", "std"), [("2.13.0", True, 20), ("2.12.1", True, 17),
                                                       ("2.13.0", False, 17), ("2.14.1", False, 20)])
def test_flexgemm_compiles_cpp20_where_torch_needs_it(tmp_path: Path, torch: str, windows: bool, std: int) -> None:
    src = tree(tmp_path, {"setup.py": FLEXGEMM})
    applies_once("flexgemm.py", src)
    args = flags(src, ["extra_compile_args"], torch=torch, windows=windows)["extra_compile_args"]
    assert isinstance(args, dict)
    if windows:
        assert args["cxx"] == ["/O2", f"/std:c++{std}", "/EHsc", "/openmp", "/permissive-", "/Zc:__cplusplus"]
        assert args["nvcc"][:3] == ["-O3", f"-std=c++{std}", f"-Xcompiler=/std:c++{std}"]
    else:
        assert args == {"cxx": ["-O3", f"-std=c++{std}", "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=1"],
                        "nvcc": ["-O3", f"-std=c++{std}", "--use_fast_math"]}


# custom_rasterizer's kernels as the repository has them: data_ptr<long>() reads, long* pointers
RASTER_FIRST = '#include "rasterizer.h"\n'
RASTERIZER = {
    "lib/custom_rasterizer_kernel/grid_neighbor.cpp": RASTER_FIRST + "#include <fstream>\n" + "".join(
        f"        long* nptr{i} = grid_neighbors[i].data_ptr<long>();\n" for i in range(6))
        + "        dptr = grid_oddcorners[i].data_ptr<long>();\n" * 2,
    "lib/custom_rasterizer_kernel/rasterizer.cpp": RASTER_FIRST
        + "    auto z_min = torch::ones({height, width}, INT64_options) * (long)maxint;\n"
        + "        (INT64*)z_min.data_ptr<long>(), width, height);\n" * 3,
    "lib/custom_rasterizer_kernel/rasterizer_gpu.cu": RASTER_FIRST
        + "            (INT64*)z_min.data_ptr<long>(), occlusion_truncation);\n" * 3,
}


def test_custom_rasterizer_reads_int64_tensors_as_int64_t(tmp_path: Path) -> None:
    src = tree(tmp_path, RASTERIZER)
    patched = applies_once("custom_rasterizer_hy3d2_msvc.py", src)
    for name, upstream in RASTERIZER.items():
        text = patched[src / name].decode()
        assert "data_ptr<long>" not in text
        assert "long* " not in text
        assert text.count("data_ptr<int64_t>()") == upstream.count("data_ptr<long>()")
    assert "* (long)maxint" in patched[src / "lib/custom_rasterizer_kernel/rasterizer.cpp"].decode()  # a scalar


def test_custom_rasterizer_refuses_kernels_with_other_counts(tmp_path: Path) -> None:
    """The counts are exact: a tree with one more read than the patch knows is refused, whole."""
    files = dict(RASTERIZER)
    files["lib/custom_rasterizer_kernel/rasterizer.cpp"] += "        x = t.data_ptr<long>();\n"
    src = tree(tmp_path, files)
    run("custom_rasterizer_hy3d2_msvc.py", src)  # grid_neighbor.cpp is patched; rasterizer.cpp refused
    proc = run("custom_rasterizer_hy3d2_msvc.py", src)
    assert proc.returncode != 0
    assert "rasterizer.cpp:3,4,5,6:" in proc.stderr
    assert "appears 4 time(s), the patch expects 3" in proc.stderr
    assert "farm" not in (src / "lib/custom_rasterizer_kernel/rasterizer.cpp").read_text()


# -- o_voxel (TRELLIS.2's o-voxel/ and the two forks) -----------------------------------------------
OVOXEL = """\
import os

cc_flag = []
ARGS = dict(
            extra_compile_args={{
                "cxx": ["-O3", "-std=c++{std}"],
                "nvcc": ["-O3","-std=c++{std}"] + cc_flag,
            }}
)
"""
SVO_UPSTREAM = """\
    torch::Tensor svo_tensor = torch::from_blob(svo.data(), {svo.size()}, torch::kUInt8).clone();
    torch::Tensor codes_tensor = torch::from_blob(codes.data(), {codes.size()}, torch::kInt32).clone();
"""
SVO_FORK = SVO_UPSTREAM.replace("{svo.size()}", "{(int64_t)svo.size()}").replace("{codes.size()}",
                                                                                 "{(int64_t)codes.size()}")


def test_ovoxel_upstream_gets_msvc_flags_and_no_narrowing(tmp_path: Path) -> None:
    src = tree(tmp_path, {"setup.py": OVOXEL.format(std=17), "src/io/svo.cpp": SVO_UPSTREAM})
    patched = applies_once("ovoxel.py", src)
    svo = patched[src / "src" / "io" / "svo.cpp"].decode()
    assert "{static_cast<int64_t>(svo.size())}" in svo
    assert "{static_cast<int64_t>(codes.size())}" in svo
    assert flags(src, ["ARGS"], torch="2.13.0", windows=True) == {"ARGS": {"extra_compile_args": {
        "cxx": ["/O2", "/std:c++20"], "nvcc": ["-O3", "-std=c++20"]}}}
    assert flags(src, ["ARGS"], torch="2.13.0", windows=False) == {"ARGS": {"extra_compile_args": {
        "cxx": ["-O3", "-std=c++17"], "nvcc": ["-O3", "-std=c++17"]}}}
    assert flags(src, ["ARGS"], torch="2.14.1", windows=False) == {"ARGS": {"extra_compile_args": {
        "cxx": ["-O3", "-std=c++20"], "nvcc": ["-O3", "-std=c++20"]}}}


def test_an_ovoxel_fork_keeps_its_own_standard_and_casts(tmp_path: Path) -> None:
    """visualbruno's fork builds as C++20 and casts its sizes already."""
    src = tree(tmp_path, {"setup.py": OVOXEL.format(std=20), "src/io/svo.cpp": SVO_FORK})
    first = run("ovoxel.py", src)
    assert first.returncode == 0, first.stderr
    assert "casts its sizes already" in first.stdout
    assert (src / "src" / "io" / "svo.cpp").read_text() == SVO_FORK
    assert flags(src, ["ARGS"], torch="2.10.0", windows=True) == {"ARGS": {"extra_compile_args": {
        "cxx": ["/O2", "/std:c++20"], "nvcc": ["-O3", "-std=c++20"]}}}


# o-voxel/pyproject.toml's dependencies at microsoft/TRELLIS.2 5565d240 (the forks' end at easydict)
OVOXEL_DEPS = """\
dependencies = [
    "torch",
    "numpy",
    "easydict",
    "cumesh @ git+https://github.com/JeffreyXiang/CuMesh.git",
    "flex_gemm @ git+https://github.com/JeffreyXiang/FlexGEMM.git",
]
"""


def test_ovoxel_upstream_drops_its_git_url_dependencies(tmp_path: Path) -> None:
    """A wheel naming a direct URL cannot go to PyPI; the recipe's requires_dist pins farm's own
    cumesh and flex_gemm wheels instead. The forks' pyproject is left as it is."""
    src = tree(tmp_path / "up", {"setup.py": OVOXEL.format(std=17), "src/io/svo.cpp": SVO_UPSTREAM,
                                 "pyproject.toml": "[project]\n" + OVOXEL_DEPS})
    patched = applies_once("ovoxel.py", src)
    project = tomllib.loads(patched[src / "pyproject.toml"].decode())["project"]
    assert project["dependencies"] == ["torch", "numpy", "easydict"]
    fork_deps = '[project]\ndependencies = [\n    "torch",\n    "numpy",\n    "easydict"\n]\n'
    fork = tree(tmp_path / "fork", {"setup.py": OVOXEL.format(std=20), "src/io/svo.cpp": SVO_FORK,
                                    "pyproject.toml": fork_deps})
    proc = run("ovoxel.py", fork)
    assert proc.returncode == 0, proc.stderr
    assert "names no git-URL dependency" in proc.stdout
    assert (fork / "pyproject.toml").read_text() == fork_deps


def test_ovoxel_refuses_a_git_url_dependency_it_does_not_know(tmp_path: Path) -> None:
    deps = OVOXEL_DEPS.replace("CuMesh.git", "CuMesh.git@v2")
    src = tree(tmp_path, {"setup.py": OVOXEL.format(std=17), "src/io/svo.cpp": SVO_UPSTREAM,
                          "pyproject.toml": "[project]\n" + deps})
    proc = run("ovoxel.py", src)
    assert proc.returncode != 0
    assert "pyproject.toml:6:" in proc.stderr, proc.stderr
    assert (src / "pyproject.toml").read_text() == "[project]\n" + deps  # all or nothing per file


def test_ovoxel_refuses_a_svo_it_does_not_recognise(tmp_path: Path) -> None:
    src = tree(tmp_path, {"setup.py": OVOXEL.format(std=17),
                          "src/io/svo.cpp": SVO_UPSTREAM.replace("{codes.size()}", "{int(codes.size())}")})
    proc = run("ovoxel.py", src)
    assert proc.returncode != 0
    assert "src/io/svo.cpp:2:" in proc.stderr
    assert (src / "src" / "io" / "svo.cpp").read_text().startswith(SVO_UPSTREAM[:40])
    assert "farm" not in (src / "src" / "io" / "svo.cpp").read_text()  # all or nothing per file


@pytest.mark.parametrize("script", ["cubvh.py", "cumesh.py", "drtk.py", "flash_attn.py", "flexgemm.py", "gsplat.py",
                                    "natten.py",
                                    "ovoxel.py", "pytorch3d.py", "sageattention_flags.py",
                                    "sageattn3_msvc.py", "fused_ssim_msvc.py"])
def test_a_patch_refuses_a_tree_without_its_file(tmp_path: Path, script: str) -> None:
    proc = run(script, tmp_path)
    assert proc.returncode != 0
    assert ":1: no such file" in proc.stderr
    assert not any(tmp_path.iterdir())

