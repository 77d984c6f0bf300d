"""The repository's own recipes: every one loads, every cell it declares resolves, and the matrix
lists the public farm's 44 packages (plus the demo) with more than 10,000 cells."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from farm.builder.plan import PlanOptions
from farm.builder.spec import resolve_spec
from farm.builder.verify import modules_to_import
from farm.cli import main
from farm.load.recipes import load_config
from farm.model.arch import ArchList, validate_for_cuda
from farm.model.cells import (
    declared_cells,
    is_phantom_key,
    planned_wheel_name,
    recipe_excludes,
    requires_dist,
    resolve_arch,
)
from farm.model.config import PLATFORMS, FarmConfig, GitSource
from tests.support.buildroot import plan_from_config

REPO = Path(__file__).resolve().parent.parent

# The public farm's packages (its packages/<name>/ folders), each a recipe here under the same name.
PUBLIC_FARM = (
    "cc_torch", "cubvh", "cumesh", "cumesh_vb", "cumm", "custom_rasterizer_hy3d2", "detectron2",
    "diff_gaussian_rasterization", "diso", "dpvo_cuda", "drtk", "faithc_aot", "flash_attn", "flexgemm",
    "flexgemm_ap", "flexgemm_vb", "fused_ssim", "gsplat", "gsplat_maskgaussian", "llama_cpp_python", "mmcv",
    "natten", "nunchaku", "nvdiffrast", "nvdiffrec_render", "ovoxel", "ovoxel_vb", "ovoxel_vb_ap",
    "pointnet2_ops", "pyg_lib", "pytorch3d", "sageattention", "sageattn3", "simple_knn", "spconv",
    "torch_cluster", "torch_generic_nms", "torch_scatter", "torch_sparse", "torch_spline_conv", "torchao",
    "torchsparse", "vllm", "vox2seq",
)


@pytest.fixture(scope="module")
def config() -> FarmConfig:
    return load_config(REPO)


def test_every_public_farm_package_has_a_recipe(config: FarmConfig) -> None:
    assert len(PUBLIC_FARM) == 44
    assert set(config.recipes) == {*PUBLIC_FARM, "demo_ext"}


@pytest.mark.parametrize("name", [*PUBLIC_FARM, "demo_ext"])
def test_recipe_loads_and_every_cell_resolves(config: FarmConfig, name: str) -> None:
    recipe = config.recipe(name)
    alone = load_config(REPO, packages=[name]).recipe(name)  # loads on its own, siblings included
    assert alone.sha256 == recipe.sha256
    assert alone.siblings == recipe.siblings
    built = 0
    for cell in declared_cells(config.defaults, recipe):
        if is_phantom_key(config.defaults, cell.cuda, cell.torch, cell.python_version, cell.platform) or recipe_excludes(recipe, cell):
            continue
        resolution = resolve_arch(config, recipe, cell)
        if resolution is None:  # no policy row for this (platform group, CUDA line): not built
            continue
        validate_for_cuda(resolution.archs, cell.cuda, where=resolution.origin)
        assert planned_wheel_name(recipe, cell, config.effective_epoch(recipe)).endswith(".whl")
        for req in requires_dist(recipe, cell):
            parsed = Requirement(req)
            assert "{" not in req
            assert parsed.name
        built += 1
    assert built > 0, f"{name} builds no cell at all"


@pytest.mark.parametrize("name", [*PUBLIC_FARM, "demo_ext"])
def test_recipe_plans_a_build_on_every_line_and_platform(config: FarmConfig, name: str, tmp_path: Path) -> None:
    """The build planner takes every recipe (extra components, env, arch renderings) on each
    (CUDA line, platform) it builds; the first cell of each stands for the rest."""
    recipe = config.recipe(name)
    options = PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "work", host_cuda_home=tmp_path / "cuda")
    seen = set()
    for cell in declared_cells(config.defaults, recipe):
        if (cell.cuda, cell.platform) in seen or is_phantom_key(config.defaults, cell.cuda, cell.torch, cell.python_version, cell.platform) or recipe_excludes(recipe, cell):
            continue
        if resolve_arch(config, recipe, cell) is None:
            continue
        seen.add((cell.cuda, cell.platform))
        plan = plan_from_config(config, recipe, cell, tmp_path, options)
        assert plan.cell == cell
        assert plan.argv[0] == "cibuildwheel"
        for var in recipe.build.arch_env:  # packages that read their own variable get the cell's list
            assert var in str(plan.options["environment"])
    assert seen


def test_the_public_farms_sharded_packages_shard_on_linux(config: FarmConfig) -> None:
    jobs = {name: r.sharding.jobs for name, r in config.recipes.items() if r.sharding is not None}
    assert jobs == {"flash_attn": 20, "natten": 20, "spconv": 10, "llama_cpp_python": 10}
    for name, count in jobs.items():
        sharding = config.recipe(name).sharding
        assert sharding is not None
        assert sharding.jobs_for("win_amd64") == 1
        assert sharding.jobs_for("linux_x86_64") == sharding.jobs_for("linux_aarch64") == count


def test_sibling_pins_render_per_cell(config: FarmConfig) -> None:
    ovoxel, spconv = config.recipe("ovoxel"), config.recipe("spconv")
    cell = next(c for c in declared_cells(config.defaults, ovoxel) if c.cuda == "12.8" and c.torch == "2.8")
    reqs = requires_dist(ovoxel, cell)
    assert f"cumesh=={config.recipe('cumesh').version}+cu128torch2.8" in reqs
    assert f"flex_gemm=={config.recipe('flexgemm').version}+cu128torch2.8" in reqs
    cell = next(c for c in declared_cells(config.defaults, spconv) if c.cuda == "13.0")
    assert f"cumm=={config.recipe('cumm').version}+cu130" in requires_dist(spconv, cell)


def test_matrix_lists_every_package_with_over_10000_cells(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.touch()  # nothing built: every declared cell that survives the filters is to build
    rc = main(["matrix", "--root", str(REPO), "--no-lint", "--json", "--ledger", str(ledger)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert {p["package"] for p in out["packages"]} == {*PUBLIC_FARM, "demo_ext"}
    assert out["totals"]["declared"] > 10_000
    # every cell to build is scheduled, but those no hosted runner can finish (refused with the reason)
    assert out["totals"]["to_build"] == len(out["cells"]) + len(out["refused_cells"])
    assert len(out["cells"]) > 10_000
    by_name = {p["package"]: p for p in out["packages"]}
    # restrictions of the public farm: vLLM on two (cuda, torch) rows of Linux x86_64 only
    assert by_name["vllm"]["to_build"] == 10
    assert {c["platform"] for c in out["cells"] if c["package"] == "gsplat_maskgaussian"} == {
        "linux_x86_64", "win_amd64"}


def test_every_patch_script_exists_and_belongs_to_a_recipe() -> None:
    """The scripts recipes name (common and per platform) are files of packages/patches/, and
    every script there but the shared helpers (``_*.py``) is some recipe's."""
    config = load_config(REPO)
    named = {script for recipe in config.recipes.values() for plat in PLATFORMS
             for script in recipe.build.patch_scripts(plat)}
    assert all((REPO / script).is_file() for script in named), sorted(s for s in named if not (REPO / s).is_file())
    on_disk = {f"packages/patches/{p.name}" for p in (REPO / "packages" / "patches").glob("*.py")
               if not p.name.startswith("_")}
    assert on_disk == named


def test_nvdiffrast_is_asserted_as_an_ahead_of_time_build(config: FarmConfig) -> None:
    """nvdiffrast 0.4.0's setup.py compiles the extension ``_nvdiffrast_c`` (5 CUDA sources) that
    nvdiffrast/torch/ops.py imports; only 0.3.x compiled at run time. So a wheel without an
    extension is a defect, ninja is no run-time requirement, and the import check reaches the
    extension through the package as users do."""
    recipe = config.recipe("nvdiffrast")
    assert recipe.version == "0.4.0"
    assert not recipe.jit
    cell = next(c for c in declared_cells(config.defaults, recipe) if c.cuda == "13.0" and c.torch == "2.14"
                and c.platform == "linux_x86_64")
    spec = resolve_spec(config, recipe, cell)
    assert not spec.expected.allow_no_extensions
    assert str(spec.expected.default) == "sm_75;sm_80;sm_86;sm_90;compute_90;sm_100;sm_120;compute_120"
    assert not any(Requirement(r).name == "ninja" for r in requires_dist(recipe, cell))
    wheel_files = ["nvdiffrast/torch/ops.py", "_nvdiffrast_c.cpython-311-x86_64-linux-gnu.so"]
    assert modules_to_import(wheel_files, recipe.verify, recipe.dist) == (
        "nvdiffrast", "nvdiffrast.torch", "_nvdiffrast_c")


# o-voxel's pyproject.toml at each of the three pins (microsoft/TRELLIS.2 5565d240,
# visualbruno/TRELLIS.2 65d1e13b, PozzettiAndrea/Trellis.2.drtk 200ba8cb): the same table.
OVOXEL_BUILD_SYSTEM = """\
[build-system]
requires = [
    "setuptools>=64",
    "wheel",
    "torch",
    "numpy",
    "plyfile",
    "trimesh",
    "tqdm",
    "zstandard",
    "easydict"
]
build-backend = "setuptools.build_meta"
"""


@pytest.mark.parametrize("name", ["ovoxel", "ovoxel_vb", "ovoxel_vb_ap"])
def test_ovoxel_recipes_carry_what_their_build_needs(config: FarmConfig, name: str) -> None:
    """farm builds without isolation (`python -m build --no-isolation`), which refuses to start
    while a build requirement is missing from the build environment ("ERROR Unmet dependencies ...
    easydict, numpy, plyfile, tqdm, trimesh, zstandard", the first build of ovoxel_vb_ap): every
    requirement but the toolchain farm provides itself is the recipe's `extra_deps`. The C++ files
    include <Eigen/Dense> from the submodule o-voxel/third_party/eigen, so the pin is fetched with
    its submodules. ``import o_voxel`` imports PIL (o_voxel/convert/volumetic_attr.py, at every pin),
    which the pyproject's dependencies miss: the wheel's requires_dist adds pillow."""
    recipe = config.recipe(name)
    wanted = {Requirement(r).name for r in tomllib.loads(OVOXEL_BUILD_SYSTEM)["build-system"]["requires"]}
    given = {Requirement(r).name for r in recipe.build.extra_deps}
    assert wanted - {"setuptools", "wheel", "torch"} <= given
    assert isinstance(recipe.source, GitSource)
    assert recipe.source.submodules
    assert "pillow" in recipe.requires_dist


# What a package's build imports before any of its own code is compiled, found at its pin by a
# probe that failed on it: farm builds without isolation, so the recipe's extra_deps must bring it.
# module -> the requirement that provides it (pkg_resources: setuptools before 81, which removed it)
BUILD_IMPORTS = {
    "torchsparse": ("numpy", "tqdm"),  # setup.py:10 imports the package: torchsparse/utils/tune.py:7, :10
    "mmcv": ("pkg_resources",),  # setup.py:6
    "drtk": ("pkg_resources",),  # setup.py:11
    "cubvh": ("pybind11",),  # pyproject.toml's build-system requires
}
PROVIDERS = {"pkg_resources": ("setuptools", "81")}


@pytest.mark.parametrize("name", sorted(BUILD_IMPORTS))
def test_the_build_environment_brings_what_the_build_imports(config: FarmConfig, name: str) -> None:
    deps = {Requirement(d).name: Requirement(d) for d in config.recipe(name).build.extra_deps}
    for module in BUILD_IMPORTS[name]:
        project, without = PROVIDERS.get(module, (module, ""))
        assert project in deps, f"{name}: its build imports {module}; extra_deps lacks {project}"
        if without:
            assert without not in deps[project].specifier, f"{name}: {deps[project]} allows {project} {without}"


# The PyG packages' setup.py builds every csrc/NAME.cpp twice: `_NAME_cpu` (a CppExtension, no
# device code) and `_NAME_cuda`, which holds kernels only where csrc/cuda/NAME_cuda.cu exists; the
# package's __init__ loads one of each pair with torch.ops.load_library, and each module's PyInit
# returns NULL, so importing one on its own fails. NAME -> (with a .cu, without), from the release
# sdists (torch_scatter 2.1.2, torch_sparse 0.6.18, torch_cluster 1.6.3, torch_spline_conv 1.2.2)
# and the repositories' newest snapshot commits, which agree.
PYG_LIBRARIES = {
    "torch_scatter": ({"scatter", "segment_coo", "segment_csr"}, {"version"}),
    "torch_sparse": ({"convert", "diag", "rw", "spmm"},
                     {"ego_sample", "hgt_sample", "metis", "neighbor_sample", "relabel", "saint", "sample", "version"}),
    "torch_cluster": ({"fps", "graclus", "grid", "knn", "nearest", "radius", "rw"}, {"sampler", "version"}),
    "torch_spline_conv": ({"basis", "weighting"}, {"version"}),
}


@pytest.mark.parametrize("name", sorted(PYG_LIBRARIES))
def test_pyg_recipes_judge_each_library_as_setup_py_builds_it(config: FarmConfig, name: str) -> None:
    """Each `_NAME_cuda` with a .cu holds the cell's list, every other library none (the assertion
    refused the first proxy build of torch_scatter: `_scatter_cpu.so has no device code at all`),
    and the import check imports the package alone, as users do."""
    recipe = config.recipe(name)
    cell = next(c for c in declared_cells(config.defaults, recipe)
                if (c.cuda, c.torch, c.platform) == ("13.0", "2.14", "linux_x86_64"))
    expected = resolve_spec(config, recipe, cell).expected
    kernels, host = PYG_LIBRARIES[name]
    libraries = [f"{name}/_{lib}_{kind}.so" for lib in sorted(kernels | host) for kind in ("cpu", "cuda")]
    for path in libraries:
        archs, _glob = expected.for_extension(path)
        device = path.removeprefix(f"{name}/_").removesuffix("_cuda.so") in kernels
        assert archs == (expected.default if device else ArchList.of(())), path
    assert modules_to_import([f"{name}/__init__.py", *libraries], recipe.verify, recipe.dist) == (name,)


def test_torch_sparse_pins_the_torch_scatter_it_imports(config: FarmConfig) -> None:
    """torch_sparse's modules import torch_scatter at `import torch_sparse` (storage.py, tensor.py,
    ...), which its setup.py does not require (only scipy): the wheel pins farm's torch_scatter of
    the same cell, whose libraries it links through torch.ops."""
    recipe = config.recipe("torch_sparse")
    cell = next(c for c in declared_cells(config.defaults, recipe) if c.cuda == "13.0" and c.torch == "2.11")
    assert f"torch_scatter=={config.recipe('torch_scatter').version}+cu130torch2.11" in requires_dist(recipe, cell)
