"""farm.builder.plan: cell + recipe + checkout -> cibuildwheel argv, environment and config (pure), checked
against the real cibuildwheel (identifiers, environment parsing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from cibuildwheel.environment import parse_environment
from cibuildwheel.oci_container import OCIContainerEngineConfig

from farm.builder.plan import (
    SONAME_EXCLUDES,
    BuildPlan,
    PlanOptions,
    container_label,
    identifier,
    repair_command,
)
from farm.cli import main
from farm.errors import ConfigError, UsageError
from farm.model.arch import ArchList
from farm.model.cells import Cell
from farm.model.config import FarmConfig
from tests.support.buildroot import DEMO_RECIPE, REPO, make_root, plan_from_config
from tests.support.wheelmaker import make_wheel

TORCH_RECIPE = """\
name: torchpkg
version: '1.2.0'
source:
  path: src/torchpkg
links_torch: true
build:
  subdir: lib
  nvcc_flags: ['-lineinfo']
  max_jobs: 2
  nvcc_threads: 2
  extra_deps: [psutil]
  env: {TORCHPKG_FAST: '1'}
"""

UPSTREAM_PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[tool.cibuildwheel]
skip = "*"
test-command = "false"
before-build = "exit 1"
"""


@pytest.fixture
def config(tmp_path: Path) -> FarmConfig:
    for d in ("examples/demo_ext", "src/torchpkg/lib"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "src/torchpkg/lib/pyproject.toml").write_text(UPSTREAM_PYPROJECT)
    (tmp_path / "examples/demo_ext/pyproject.toml").write_text(UPSTREAM_PYPROJECT)
    return make_root(tmp_path, {"demo_ext": DEMO_RECIPE.format(arch="8.0;9.0+PTX"), "torchpkg": TORCH_RECIPE})


def options(tmp_path: Path, **kw: Any) -> PlanOptions:
    return PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "work", **kw)


def plan_for(config: FarmConfig, tmp_path: Path, cell: Cell, **kw: Any) -> BuildPlan:
    recipe = config.recipe(cell.package)
    checkout = tmp_path / ("examples/demo_ext" if cell.package == "demo_ext" else "src/torchpkg")
    return plan_from_config(config, recipe, cell, checkout, options(tmp_path, **kw))


X86 = Cell("demo_ext", "0.1.0", "13.0", "none", "cp311", "linux_x86_64")
ARM = Cell("torchpkg", "1.2.0", "13.0", "2.9", "cp312", "linux_aarch64")
WIN = Cell("torchpkg", "1.2.0", "13.0", "2.9", "cp311", "win_amd64")


def option(plan: BuildPlan, key: str) -> str:
    """One cibuildwheel option of ``plan``: each one farm writes is a string."""
    value = plan.options[key]
    assert isinstance(value, str), (key, value)
    return value


def build_env(plan: BuildPlan) -> dict[str, str]:
    """The plan's environment option as cibuildwheel itself evaluates it."""
    return parse_environment(option(plan, "environment")).as_dictionary({"PATH": "/usr/bin"})


def test_identifiers() -> None:
    assert identifier(X86) == "cp311-manylinux_x86_64"
    assert identifier(ARM) == "cp312-manylinux_aarch64"
    assert identifier(WIN) == "cp311-win_amd64"
    with pytest.raises(UsageError):
        identifier(Cell("x", "1", "13.0", "none", "cp311", "macosx_arm64"))


def test_torch_free_x86_plan(config, tmp_path) -> None:
    plan = plan_for(config, tmp_path, X86, container_engine="podman",
                    images={"x86_64": "localhost/img:1", "aarch64": "localhost/arm:1"})
    assert plan.argv == ("cibuildwheel", "--only", "cp311-manylinux_x86_64",
                         "--config-file", str(tmp_path / "work/cibuildwheel.toml"),
                         "--output-dir", str(tmp_path / "out"), ".")
    assert plan.cwd == tmp_path / "examples/demo_ext"
    env = build_env(plan)
    assert env["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0+PTX"
    assert env["CUDAARCHS"] == env["CMAKE_CUDA_ARCHITECTURES"] == "80-real;90"
    assert env["CUDA_HOME"] == "/opt/farm/toolkit/cuda"
    assert env["PATH"] == "/opt/farm/toolkit/cuda/bin:/usr/bin"
    assert env["FORCE_CUDA"] == "1"
    # the toolkit's libcuda stub for -lcuda, at link time only: never where a library is loaded from
    assert env["LIBRARY_PATH"] == "/opt/farm/toolkit/cuda/lib64/stubs"
    assert "LD_LIBRARY_PATH" not in env
    assert env["MAX_JOBS"] == "3"  # inherited from _defaults.yml's build knobs
    assert env["NVCC_APPEND_FLAGS"] == "--threads 1"
    assert "torch" not in option(plan, "before-build")
    assert "nvidia-cuda-nvcc==13.0.88" in option(plan, "before-all")
    # the build's container carries its work folder's label (removed by farm when the build is interrupted)
    # (and mounts the launchers' folder: every Linux build compiles through them, cached or not)
    assert option(plan, "container-engine") == (f"podman; create_args: --volume {tmp_path / 'work'}/compile-cache:"
                                                f"/opt/farm/compile-run --label {container_label(tmp_path / 'work')}")
    assert option(plan, "manylinux-x86_64-image") == "localhost/img:1"
    assert "manylinux-aarch64-image" not in plan.options
    assert option(plan, "build-frontend") == "build; args: --no-isolation"
    for soname in ("libcuda.so.1", "libtorch.so", "libc10.so", "'libcudart.so.*'"):
        assert f"--exclude {soname}" in option(plan, "repair-wheel-command")


def test_torch_aarch64_plan(config, tmp_path) -> None:
    plan = plan_for(config, tmp_path, ARM, images={"x86_64": "localhost/img:1",
                                                   "aarch64": "quay.io/pypa/manylinux_2_28_aarch64"})
    assert plan.identifier == "cp312-manylinux_aarch64"
    assert plan.package_dir == "lib"
    assert plan.argv[-1] == "lib"
    assert plan.options["archs"] == ["aarch64"]
    assert option(plan, "manylinux-aarch64-image") == "quay.io/pypa/manylinux_2_28_aarch64"
    assert "manylinux-x86_64-image" not in plan.options
    # the image the build runs in, as the provenance records it (a rebuild needs it)
    from farm.builder.builders import image_of
    assert image_of(plan) == "quay.io/pypa/manylinux_2_28_aarch64"
    assert image_of(plan_for(config, tmp_path, ARM)) is None  # cibuildwheel's own
    env = build_env(plan)
    # the aarch64 policy row of _defaults.yml, rendered for torch
    assert env["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0+PTX;10.0;11.0;12.0+PTX"
    assert plan.spec.arch.archs == ArchList.parse("8.0;9.0+PTX;10.0;11.0;12.0+PTX")
    assert env["MAX_JOBS"] == "2"
    assert env["NVCC_APPEND_FLAGS"] == "--threads 2 -lineinfo"
    assert env["TORCHPKG_FAST"] == "1"
    assert plan.spec.torch_version == "2.9.1"
    before = option(plan, "before-build")
    assert "torch==2.9.1 --index-url https://download.pytorch.org/whl/cu130" in before
    assert "psutil" in before
    assert "setuptools" in before


def test_windows_plan_uses_the_host_toolkit(config, tmp_path) -> None:
    with pytest.raises(UsageError, match="needs its toolkit"):
        plan_for(config, tmp_path, WIN)
    plan = plan_for(config, tmp_path, WIN, host_cuda_home=Path("C:/farm/toolkit/13.0/cuda"))
    assert plan.identifier == "cp311-win_amd64"
    assert option(plan, "before-all") == ""
    assert option(plan, "repair-wheel-command") == ""
    assert build_env(plan)["CUDA_HOME"] == "C:/farm/toolkit/13.0/cuda"
    assert build_env(plan)["PATH"] == "C:/farm/toolkit/13.0/cuda/bin;/usr/bin"
    assert "LIBRARY_PATH" not in build_env(plan)  # MSVC links cuda.lib from the toolkit's lib/x64
    # cmd.exe: no single quotes, and '>' quoted so it is not a redirection
    assert option(plan, "before-build").startswith('python -m pip install "setuptools>=64" wheel ninja && ')
    assert "'" not in option(plan, "before-build")


def test_a_windows_plan_carries_its_msvc_setup(config, tmp_path) -> None:
    """A win_amd64 cell: DISTUTILS_USE_SDK in the build's environment, the developer environment's
    step (vswhere, vcvarsall with the toolset) and torch's C++ standard in the plan; no MSVC
    anything in a Linux cell's."""
    plan = plan_for(config, tmp_path, WIN, host_cuda_home=Path("C:/farm/toolkit/13.0/cuda"))
    env = build_env(plan)
    assert env["DISTUTILS_USE_SDK"] == "1"
    assert "-allow-unsupported-compiler" not in env["NVCC_APPEND_FLAGS"]  # CUDA 13.0 knows MSVC 14.44
    assert plan.msvc is not None
    msvc = plan.to_json()["msvc"]
    assert isinstance(msvc, dict)
    assert msvc["toolset"] == "14.44"
    assert msvc["msc_ver"] == 1944
    assert msvc["msc_ceiling"] == 1950
    assert msvc["cxx_std"] == "c++17"  # torch 2.9
    assert 'vcvarsall.bat" x64 -vcvars_ver=14.44 && set' in str(msvc["vcvars"])
    assert "vswhere.exe" in str(msvc["vswhere"])
    linux = plan_for(config, tmp_path, ARM)
    assert linux.msvc is None
    assert "DISTUTILS_USE_SDK" not in build_env(linux)
    assert linux.to_json()["msvc"] is None


def test_a_toolset_the_cuda_line_does_not_know_gets_allow_unsupported_compiler(tmp_path) -> None:
    """`build.msvc_toolset: '14.50'` (Visual Studio 2026): CUDA 12.8's host_config.h stops below
    _MSC_VER 1950, so nvcc is told to accept it; CUDA 13.2's knows it."""
    (tmp_path / "src/torchpkg/lib").mkdir(parents=True)
    recipe = TORCH_RECIPE.replace("  max_jobs: 2\n", "  max_jobs: 2\n  msvc_toolset: '14.50'\n")
    config = make_root(tmp_path, {"torchpkg": recipe})
    home = Path("C:/farm/toolkit/cuda")
    old_line = plan_for(config, tmp_path, Cell("torchpkg", "1.2.0", "12.8", "2.9", "cp311", "win_amd64"),
                        host_cuda_home=home)
    assert build_env(old_line)["NVCC_APPEND_FLAGS"] == "--threads 2 -lineinfo -allow-unsupported-compiler"
    assert "-vcvars_ver=14.50" in str(old_line.to_json()["msvc"])
    new_line = plan_for(config, tmp_path, Cell("torchpkg", "1.2.0", "13.2", "2.13", "cp311", "win_amd64"),
                        host_cuda_home=home)
    assert "-allow-unsupported-compiler" not in build_env(new_line)["NVCC_APPEND_FLAGS"]
    assert old_line.spec.to_json()["knobs"]["msvc_toolset"] == "14.50"


def test_config_file_sets_every_option_so_upstream_config_cannot_leak(config, tmp_path) -> None:
    plan = plan_for(config, tmp_path, X86)
    options = tomllib.loads(plan.config_text)["tool"]["cibuildwheel"]
    assert options["test-command"] == ""
    assert options["before-test"] == ""
    assert options["skip"] == ""
    assert options["build"] == "cp311-manylinux_x86_64"
    assert parse_environment(options["environment"]).as_dictionary({})["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0+PTX"
    assert options["before-build"] == option(plan, "before-build")


@pytest.mark.parametrize("cell", [X86, ARM, WIN], ids=lambda c: c.platform)
def test_real_cibuildwheel_prints_exactly_the_planned_identifier(config, tmp_path, cell) -> None:
    # The checkout's own [tool.cibuildwheel] says skip = "*": with farm's config file it is not read.
    plan = plan_for(config, tmp_path, cell, host_cuda_home=Path("/opt/cuda"))
    plan.config_file.parent.mkdir(parents=True, exist_ok=True)
    plan.config_file.write_text(plan.config_text)
    exe = Path(sys.executable).parent / "cibuildwheel"
    env = {**os.environ, **plan.env}
    proc = subprocess.run([str(exe), "--print-build-identifiers", *plan.argv[1:]], cwd=plan.cwd, env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [plan.identifier]


def test_step_summary_is_redirected_into_the_work_dir(config, tmp_path) -> None:
    plan = plan_for(config, tmp_path, X86)
    assert plan.env["GITHUB_STEP_SUMMARY"] == str(tmp_path / "work/cibuildwheel-summary.md")


def test_family_targets_are_rendered_for_cmake_only(config, tmp_path) -> None:
    recipe = config.recipe("demo_ext")
    plan = plan_from_config(config, recipe, X86, tmp_path / "examples/demo_ext", options(tmp_path),
                            archs=ArchList.parse("9.0;10.0f"))
    env = build_env(plan)
    assert "TORCH_CUDA_ARCH_LIST" not in env
    assert env["CUDAARCHS"] == "90-real;100f-real"


def test_arch_env_carries_the_cells_list_in_the_packages_own_variables(tmp_path) -> None:
    (tmp_path / "src/torchpkg/lib").mkdir(parents=True)
    recipe = TORCH_RECIPE + "  arch_env: {TORCHPKG_ARCHS: versions, TORCHPKG_SMS: numbers}\n"
    config = make_root(tmp_path, {"torchpkg": recipe})
    plan = plan_from_config(config, config.recipe("torchpkg"), ARM, tmp_path / "src/torchpkg", options(tmp_path),
                            archs=ArchList.parse("8.0 9.0a 10.0a 12.0"))
    env = build_env(plan)
    assert env["TORCHPKG_ARCHS"] == "8.0;9.0;10.0;12.0"
    assert env["TORCHPKG_SMS"] == "80;90;100;120"
    assert env["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0a;10.0a;12.0"


def test_gencode_in_nvcc_flags_gives_every_nvcc_call_the_cells_list(tmp_path) -> None:
    """spconv's generated ConvParams TUs reach nvcc with no arch flags (nvcc's default sm_75 +
    compute_75 would fail the per-TU check): {gencode} appends the cell's list to every call."""
    (tmp_path / "src/torchpkg/lib").mkdir(parents=True)
    config = make_root(tmp_path, {"torchpkg": TORCH_RECIPE.replace("['-lineinfo']", "['{gencode}', '-lineinfo']")})
    plan = plan_from_config(config, config.recipe("torchpkg"), ARM, tmp_path / "src/torchpkg", options(tmp_path),
                            archs=ArchList.parse("8.0 9.0a 12.0+PTX"))
    assert build_env(plan)["NVCC_APPEND_FLAGS"] == (
        "--threads 2 -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a "
        "-gencode=arch=compute_120,code=sm_120 -gencode=arch=compute_120,code=compute_120 -lineinfo")


def test_system_packages_are_installed_in_order_before_the_toolkit(tmp_path) -> None:
    (tmp_path / "src/torchpkg/lib").mkdir(parents=True)
    recipe = TORCH_RECIPE + "  system_packages: [epel-release, sparsehash-devel]\n"
    config = make_root(tmp_path, {"torchpkg": recipe})
    linux = plan_from_config(config, config.recipe("torchpkg"), ARM, tmp_path / "src/torchpkg", options(tmp_path))
    script = option(linux, "before-all")
    assert script.startswith("set -eu\ndnf install -y epel-release\ndnf install -y sparsehash-devel\n")
    # the toolkit script exits early once stamped: the packages must come before it
    assert script.index("sparsehash-devel") < script.index("exit 0")
    win = plan_from_config(config, config.recipe("torchpkg"), WIN, tmp_path / "src/torchpkg",
                           options(tmp_path, host_cuda_home=tmp_path / "cuda"))
    assert "dnf" not in option(win, "before-all")


def test_bad_inputs(config, tmp_path) -> None:
    recipe = config.recipe("demo_ext")
    with pytest.raises(UsageError, match="absolute"):
        plan_from_config(config, recipe, X86, tmp_path, PlanOptions(output_dir=Path("out"), work_dir=tmp_path))
    with pytest.raises(UsageError, match="not a cell of package"):
        plan_from_config(config, config.recipe("torchpkg"), X86, tmp_path, options(tmp_path))


def test_cuda_components_are_manifest_names(tmp_path) -> None:
    (tmp_path / "examples/demo_ext").mkdir(parents=True)
    text = DEMO_RECIPE.format(arch="8.0") + "build:\n  extra_cuda_components: nvidia-nvtx==13.0.85\n"
    # refused when the recipe loads, before any plan: with the file and line
    with pytest.raises(ConfigError, match="not a CUDA component name") as err:
        make_root(tmp_path, {"demo_ext": text})
    assert "packages/demo_ext.yml:9" in str(err.value)


def test_the_recipes_extra_components_and_torchs_reach_the_containers_toolkit(config, tmp_path) -> None:
    for d in ("examples/demo_ext", "src/torchpkg/lib"):
        (tmp_path / "r" / d).mkdir(parents=True, exist_ok=True)
    text = DEMO_RECIPE.format(arch="8.0") + "build:\n  extra_cuda_components: [cuda_nvtx]\n"
    cfg = make_root(tmp_path / "r", {"demo_ext": text, "torchpkg": TORCH_RECIPE})
    plan = plan_from_config(cfg, cfg.recipe("demo_ext"), X86, tmp_path, options(tmp_path))
    assert plan.spec.toolkit.components[-1] == "cuda_nvtx"
    assert "nvidia-nvtx==13.0.85" in option(plan, "before-all")
    torch_cell = Cell("torchpkg", "1.2.0", "13.0", "2.9", "cp311", "linux_x86_64")
    tplan = plan_from_config(cfg, cfg.recipe("torchpkg"), torch_cell, tmp_path, options(tmp_path))
    assert "nvidia-cusparse==12.6.3.3" in option(tplan, "before-all")


def test_a_redist_cell_mounts_the_hosts_verified_toolkit(config, tmp_path) -> None:
    cell = Cell("demo_ext", "0.1.0", "12.8", "none", "cp311", "linux_x86_64")
    with pytest.raises(UsageError, match="mounts the host's"):
        plan_for(config, tmp_path, cell)
    host = tmp_path / "cache/toolkit/12.8/redist-12.8.1-linux-x86_64-0123"
    plan = plan_for(config, tmp_path, cell, host_toolkit_prefix=host, container_engine="podman")
    assert option(plan, "before-all") == ""
    assert option(plan, "container-engine") == (f"podman; create_args: --volume {host}:/opt/farm/toolkit:ro "
                                                f"--volume {tmp_path / 'work'}/compile-cache:/opt/farm/compile-run "
                                                f"--label {container_label(tmp_path / 'work')}")
    # as cibuildwheel itself reads the option (a path with a space stays one argument)
    spaced = plan_for(config, tmp_path, cell, host_toolkit_prefix=tmp_path / "my cache" / "tk")
    engine = OCIContainerEngineConfig.from_config_string(option(spaced, "container-engine"))
    assert (engine.name, engine.create_args) == ("docker", ("--volume", f"{tmp_path}/my cache/tk:/opt/farm/toolkit:ro",
                                                            "--volume", f"{tmp_path}/work/compile-cache:/opt/farm/compile-run",
                                                            "--label", container_label(tmp_path / "work")))
    assert build_env(plan)["CUDA_HOME"] == "/opt/farm/toolkit/cuda"
    assert plan.spec.toolkit.source == "redist"
    assert plan.spec.toolkit.release == "12.8.1"


@pytest.mark.parametrize("vendored", [False, True])
def test_repair_command_refuses_vendored_libraries(tmp_path, vendored) -> None:
    files = {"demo_ext/_C.so": b"\x7fELF"}
    if vendored:
        files["demo_ext.libs/libgomp-a34b3233.so.1"] = b"\x7fELF"
    dest = tmp_path / "repaired"
    make_wheel(dest, "demo_ext", "0.1.0", files)
    check = repair_command(sys.executable).split(" && ", 1)[1].replace("{dest_dir}", str(dest))
    proc = subprocess.run(check, shell=True, capture_output=True, text=True, check=False)
    assert proc.returncode == (1 if vendored else 0)
    if vendored:
        assert "vendors demo_ext.libs/libgomp-a34b3233.so.1" in proc.stderr
        assert "a vendored library is an unasserted binary" in proc.stderr


def test_excludes_cover_driver_runtime_and_torch() -> None:
    for name in ("libcuda.so.1", "libcudart.so.*", "libtorch_cuda.so", "libc10_cuda.so"):
        assert name in SONAME_EXCLUDES


def test_repair_command_lets_the_recipes_declared_libraries_through(tmp_path) -> None:
    files = {"demo_ext/_C.so": b"\x7fELF", "demo_ext.libs/libgomp-a34b3233.so.1": b"\x7fELF"}
    dest = tmp_path / "repaired"
    make_wheel(dest, "demo_ext", "0.1.0", files)
    check = repair_command(sys.executable, declared=("libgomp*",)).split(" && ", 1)[1].replace("{dest_dir}", str(dest))
    proc = subprocess.run(check, shell=True, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr  # postbuild asserts it against the recipe's list


FUSED_SSIM_TREE = {
    "setup.py": ("import torch\nfallback_archs = [\n    '-gencode=arch=compute_75,code=sm_75',\n]\n"
                 "nvcc_args = ['-O3']\nif torch.cuda.is_available():\n    nvcc_args.append('-arch=sm_90')\n"
                 "else:\n    nvcc_args.extend(fallback_archs)\n"),
    "ssim.cu": "#include <torch/extension.h>\n#include <cooperative_groups.h>\n__global__ void k() {}\n",
    "ext.cpp": '#include <torch/extension.h>\n#include "ssim.h"\n',
}


def _fused_ssim_root(tmp_path: Path) -> Path:
    """The fused_ssim recipe as committed, its source a local tree with the lines its patches edit."""
    root = tmp_path / "root"
    for name, text in FUSED_SSIM_TREE.items():
        (root / "checkout" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "checkout" / name).write_text(text)
    recipe = (REPO / "packages" / "fused_ssim.yml").read_text()
    recipe = recipe.replace("git: {repo: rahul-goel/fused-ssim, ref: 328dc9836f513d00c4b5bc38fe30478b4435cbb5}",
                            "path: checkout")
    make_root(root, {"fused_ssim": recipe}, {"packages/patches": REPO / "packages" / "patches"})
    return root


def test_farm_build_plan_shows_a_windows_cells_msvc_build_on_a_linux_host(tmp_path, capsys) -> None:
    """`farm build PKG --platform win_amd64 --plan`: the source patched for Windows (the common
    patch, then the MSVC one), the MSVC environment, the flags and the cibuildwheel call; nothing is
    compiled or downloaded, on a host that could not build the cell."""
    root = _fused_ssim_root(tmp_path)
    cache = tmp_path / "cache"
    args = ["build", "fused_ssim", "--platform", "win_amd64", "--cuda", "13.0", "--torch", "2.13", "--python", "3.12",
            "--plan", "--root", str(root), "--cache-dir", str(cache)]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["errors"] == []
    (plan,) = data["plans"]
    assert plan["cell"] == "fused_ssim-0.0.0-cu130-torch2.13-cp312-win_amd64"
    assert plan["patches"] == ["packages/patches/fused_ssim.py", "packages/patches/fused_ssim_msvc.py"]
    assert "fused_ssim: ssim.cu: 1 edit(s)" in plan["patch_output"]
    src = Path(plan["cwd"])
    assert "#undef small" in (src / "ssim.cu").read_text()
    assert "fallback_archs = []" in (src / "setup.py").read_text()
    msvc = plan["msvc"]
    assert msvc["cxx_std"] == "c++20"  # torch 2.13
    assert msvc["cl_std_flag"] == "/std:c++20"
    assert msvc["nvcc_flags"] == []
    assert msvc["environment"] == {"DISTUTILS_USE_SDK": "1"}
    assert "-vcvars_ver=14.44" in msvc["vcvars"]
    assert plan["env"] == {"GITHUB_STEP_SUMMARY": str(cache / "build" / "plan" / plan["cell"] / "cibuildwheel-summary.md")}
    assert plan["argv"][:3] == ["cibuildwheel", "--only", "cp312-win_amd64"]
    assert plan["spec"]["knobs"]["platform_patch_script"] == {"win_amd64": "packages/patches/fused_ssim_msvc.py"}
    assert not (cache / "toolkit").exists()  # planned where it would go, never downloaded
    # the text a maintainer reads
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "patch: packages/patches/fused_ssim_msvc.py" in text
    assert "env DISTUTILS_USE_SDK=1" in text
    assert 'vcvarsall.bat" x64 -vcvars_ver=14.44' in text
    assert "/std:c++20 (cl), -std=c++20 (nvcc)" in text


def test_farm_build_plan_of_a_linux_cell_applies_the_common_patch_only(tmp_path, capsys) -> None:
    root = _fused_ssim_root(tmp_path)
    assert main(["build", "fused_ssim", "--platform", "linux_x86_64", "--cuda", "13.0", "--torch", "2.14",
                 "--python", "3.12", "--plan", "--json", "--root", str(root), "--cache-dir", str(tmp_path / "c")]) == 0
    (plan,) = json.loads(capsys.readouterr().out)["plans"]
    assert plan["patches"] == ["packages/patches/fused_ssim.py"]
    assert plan["msvc"] is None
    assert "#undef small" not in (Path(plan["cwd"]) / "ssim.cu").read_text()


def test_farm_build_plan_names_a_patch_that_no_longer_applies(tmp_path, capsys) -> None:
    root = _fused_ssim_root(tmp_path)
    (root / "checkout" / "ext.cpp").write_text("#include <torch/python.h>\n")
    code = main(["build", "fused_ssim", "--platform", "win_amd64", "--cuda", "13.0", "--torch", "2.13",
                 "--python", "3.12", "--plan", "--root", str(root), "--cache-dir", str(tmp_path / "c")])
    assert code == 2
    err = capsys.readouterr().err
    assert "fused_ssim_msvc.py failed" in err
    assert "ext.cpp:1:" in err


def test_farm_build_plan_is_not_a_shard(tmp_path, capsys) -> None:
    root = _fused_ssim_root(tmp_path)
    assert main(["build", "fused_ssim", "--plan", "--link", "--root", str(root)]) == 2
    assert "--plan shows the whole build" in capsys.readouterr().err


def test_farm_build_plan_with_the_native_builder_shows_what_the_native_builder_runs(tmp_path, capsys) -> None:
    """`farm build PKG --plan --builder native`: this host's interpreter of the cell's Python, the
    shared build environment (its folder and contents: build tools, torch and its index), the
    environment with the host's CUDA_HOME and compiler-cache launchers, `python -m build` and the
    repair: what run_native takes from the plan, not cibuildwheel's call."""
    root = _fused_ssim_root(tmp_path)
    cache = tmp_path / "cache"
    args = ["build", "fused_ssim", "--builder", "native", "--cuda", "13.0", "--torch", "2.14", "--plan",
            "--root", str(root), "--cache-dir", str(cache)]
    assert main([*args, "--json"]) == 0
    (plan,) = json.loads(capsys.readouterr().out)["plans"]
    assert plan["builder"] == "native"
    assert plan["refused"] is None
    native = plan["native"]
    assert native["interpreter"]["version"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}.")
    contents = native["build_env"]["contents"]
    assert contents["torch"].startswith("torch==2.14.")
    assert {"build", "auditwheel", "ninja"} <= set(contents["requirements"])
    env_path = Path(native["build_env"]["path"])
    assert env_path.parent == cache / "envs"
    assert native["build_env"]["ready"] is False  # made by the build; nothing was made by the plan
    assert not env_path.exists()
    assert native["build"][:4] == [str(env_path / "bin" / "python"), "-m", "build", "--wheel"]
    assert "--no-isolation" in native["build"]
    assert native["repair"].startswith("auditwheel repair ")
    assert plan["cuda_home"].startswith(str(cache / "toolkit" / "13.0" / ""))  # where farm would assemble it
    assert not (cache / "toolkit").exists()  # planned where it would go, never downloaded
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "the build as planned for the native builder" in text
    assert f"interpreter: Python {native['interpreter']['version']}" in text
    assert f"build environment: {env_path} (made by the build)" in text
    assert f"  env CUDA_HOME={plan['cuda_home']}\n" in text  # the host's toolkit, not the container's mount
    assert "/opt/farm/" not in text
    assert f"build: {env_path}/bin/python -m build --wheel --no-isolation" in text
    assert "repair: auditwheel repair" in text
    assert "cibuildwheel" not in text


def test_farm_build_plan_with_the_native_builder_says_why_it_cannot_build_a_cell(tmp_path, capsys) -> None:
    root = _fused_ssim_root(tmp_path)
    assert main(["build", "fused_ssim", "--builder", "native", "--platform", "win_amd64", "--cuda", "13.0",
                 "--torch", "2.13", "--python", "3.12", "--plan", "--root", str(root),
                 "--cache-dir", str(tmp_path / "c")]) == 0
    text = capsys.readouterr().out
    assert "native builder: cannot build this cell on this host: the native builder builds Linux cells" in text
    assert "cibuildwheel" not in text
