"""The build spec: a cell resolved once (farm.model.archrequest, farm.builder.spec), carried from the matrix
through the planner and the builder to postbuild, and written/read as JSON in one place."""

from __future__ import annotations

import ast
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from farm.binary.cuobjdump import PINNED
from farm.builder.plan import PlanOptions, plan_build
from farm.builder.spec import SPEC_FILE, SPEC_VERSION, BuildSpec, SpecOverrides, read_spec, resolve_spec, write_spec
from farm.errors import ConfigError, UsageError
from farm.load.recipes import load_config
from farm.model.arch import ArchList
from farm.model.archrequest import ArchRequest, arch_request
from farm.model.cells import Cell, declared_cells, recipe_excludes
from farm.model.config import FarmConfig
from farm.provenance import buildinfo, probe
from farm.provenance.ledger import LedgerIndex
from farm.schedule.matrix import Filters, compute_matrix
from tests.support.buildroot import DEMO_RECIPE, REPO, make_root

TORCH_RECIPE = """\
name: torchpkg
version: '1.2.0'
source:
  path: src/torchpkg
links_torch: true
sharding: 3
build:
  nvcc_flags: ['-lineinfo']
  max_jobs: 2
  extra_deps: [psutil]
  env: {TORCHPKG_FAST: '1'}
  arch_env: {TORCHPKG_ARCHS: cmake}
arch:
  by_cuda: {'13.0': '8.0;9.0a;12.0+PTX'}
extensions:
  '*_sm90*': {by_cuda: {'13.0': '9.0a'}}
"""

X86 = Cell("demo_ext", "0.1.0", "13.0", "none", "cp311", "linux_x86_64")
TORCH = Cell("torchpkg", "1.2.0", "13.0", "2.9", "cp311", "linux_x86_64")


@pytest.fixture
def config(tmp_path: Path) -> FarmConfig:
    for d in ("examples/demo_ext", "src/torchpkg"):
        (tmp_path / d).mkdir(parents=True)
    return make_root(tmp_path, {"demo_ext": DEMO_RECIPE.format(arch="8.0;9.0+PTX"), "torchpkg": TORCH_RECIPE})


def test_resolve_spec_holds_every_decision_of_the_build(config) -> None:
    spec = resolve_spec(config, config.recipe("torchpkg"), TORCH, SpecOverrides(torch_index="pip"))
    assert spec.arch == arch_request(config, config.recipe("torchpkg"), TORCH)
    assert spec.arch.requested == "8.0;9.0a;12.0+PTX"
    assert spec.arch.origin == "recipe arch.by_cuda['13.0']"
    assert spec.arch.extensions == (("*_sm90*", ArchList.parse("9.0a")),)
    assert spec.arch.where  # the recipe file and line the list was written at
    assert spec.torch_version is not None
    assert spec.torch_version.startswith("2.9.")
    assert spec.torch_index == "pip"
    assert spec.toolkit.cuda == "13.0"
    assert spec.toolkit.components[-1] != ""
    assert spec.knobs.env["TORCHPKG_FAST"] == "1"
    assert spec.knobs.extra_deps == ("psutil",)
    assert spec.compile_jobs == 3
    assert spec.python == "3.11"
    free = resolve_spec(config, config.recipe("demo_ext"), X86)
    assert free.torch_version is None
    assert free.torch_index is None
    assert free.compile_jobs == 1


def test_the_spec_round_trips_through_its_file(config, tmp_path) -> None:
    spec = resolve_spec(config, config.recipe("torchpkg"), TORCH)
    path = write_spec(spec, tmp_path)
    assert path == tmp_path / SPEC_FILE
    assert read_spec(path) == spec
    with pytest.raises(AttributeError):  # frozen
        spec.cell = X86  # type: ignore[misc]


def test_every_recipe_of_the_repository_round_trips() -> None:
    config = load_config(REPO)
    seen = 0
    for recipe in config.recipes.values():
        for cell in declared_cells(config.defaults, recipe):
            if recipe_excludes(recipe, cell) or arch_request(config, recipe, cell) is None:
                continue
            spec = resolve_spec(config, recipe, cell)
            assert BuildSpec.from_json(json.loads(json.dumps(spec.to_json())), where="t") == spec, cell.id
            seen += 1
            break
    assert seen == len(config.recipes)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(spec_version=99), "spec_version"),
    (lambda d: d["arch"].update(normalised="9.0;8.0"), "arch.normalised must be a canonical arch list"),
    (lambda d: d["arch"].update(normalised="8.0;banana"), "arch.normalised"),
    (lambda d: d["arch"].pop("requested"), "arch.requested must be a string"),
    (lambda d: d["arch"].update(extensions=[["*_sm90*"]]), "arch.extensions"),
    (lambda d: d["cell"].update(platform=7), "cell.platform must be a string"),
    (lambda d: d["environment"].update(python="3.12"), "environment.python"),
    (lambda d: d["knobs"].update(arch_env={"X": "fortran"}), "knobs.arch_env"),
    (lambda d: d["knobs"].update(compile_jobs=0), "knobs.compile_jobs"),
    (lambda d: d["toolkit"].update(components="cuda_nvcc"), "toolkit.components"),
    (lambda d: d.pop("knobs"), "knobs must be an object"),
    (lambda d: d["verify"].update(expect_device_error=3), "verify.expect_device_error"),
    (lambda d: d["verify"].update(extra_imports="a.b"), "verify.extra_imports"),
    (lambda d: d["verify"].pop("runtime_libs"), "verify.runtime_libs"),
    (lambda d: d["verify"].update(runtime_wheels="nvidia-cuda-nvrtc"), "verify.runtime_wheels"),
    (lambda d: d["verify"].update(surprise=True), "verify"),
    # a spec can never drop or loosen the torch pin of a torch-linked cell
    (lambda d: d["postbuild"].update(pins=[]), "postbuild.pins must be a list holding the cell's torch pin"),
    (lambda d: d["postbuild"].update(pins=["torch"]), "postbuild.pins"),
])
def test_a_spec_file_not_written_by_farm_is_refused_naming_the_key(config, tmp_path, edit, message) -> None:
    data = resolve_spec(config, config.recipe("torchpkg"), TORCH).to_json()
    edit(data)
    path = tmp_path / SPEC_FILE
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match=message) as info:
        read_spec(path)
    assert info.value.where == str(path)
    assert info.value.exit_code == 2


def test_an_unreadable_spec_is_bad_input(tmp_path) -> None:
    with pytest.raises(UsageError, match="cannot read the build spec"):
        read_spec(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(UsageError, match="not JSON"):
        read_spec(tmp_path / "bad.json")


def test_the_plan_renders_the_spec_it_is_given_not_the_config(config, tmp_path) -> None:
    """The builder resolves once and hands the spec down: a spec whose list differs from what the
    config says today is what the plan exports and what postbuild will assert."""
    recipe = config.recipe("torchpkg")
    given = ArchRequest.given(ArchList.parse("8.6;10.0"), origin="matrix")
    spec = resolve_spec(config, recipe, TORCH, arch=given)
    plan = plan_build(recipe, TORCH, tmp_path / "src/torchpkg",
                      PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "w"), spec=spec)
    assert plan.spec is spec
    assert plan.spec.arch is given
    assert plan.spec.arch.origin == "matrix"
    env = dict(plan.native.environment) if plan.native else {}
    assert env["TORCH_CUDA_ARCH_LIST"] == "8.6;10.0"
    assert env["TORCHPKG_ARCHS"] == "86-real;100-real"
    assert plan.to_json()["spec"] == spec.to_json()
    with pytest.raises(UsageError, match="the build spec is for cell"):
        plan_build(config.recipe("demo_ext"), X86, tmp_path, PlanOptions(output_dir=tmp_path / "o",
                                                                         work_dir=tmp_path / "w"), spec=spec)


def test_the_matrix_hands_the_build_its_resolution(config) -> None:
    matrix = compute_matrix(config, LedgerIndex.empty(), Filters.parse(config, packages=["torchpkg"]))
    planned = next(p for p in matrix.cells if p.cell == TORCH)
    assert planned.arch == arch_request(config, config.recipe("torchpkg"), TORCH)
    assert (planned.archs, planned.arch.requested, planned.arch.origin) == (
        planned.arch.archs, "8.0;9.0a;12.0+PTX", "recipe arch.by_cuda['13.0']")
    # the build's spec carries it as it is
    assert resolve_spec(config, config.recipe("torchpkg"), TORCH, arch=planned.arch).arch is planned.arch


def test_resolve_arch_is_called_in_one_place() -> None:
    """Every stage receives the spec (or its arch request); the rule itself runs behind
    farm.model.archrequest.arch_request only, which the trust checks (gate, audit) call too."""
    callers = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in sorted((REPO / "farm").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "resolve_arch"
    ]
    assert [c.split(":")[0] for c in callers] == [str(Path("farm/model/archrequest.py"))], callers


MOVED = TORCH_RECIPE + """\
build_epoch: 4
jit: true
requires_dist: [numpy]
vendored:
  'libkernels*.so*': '8.0;9.0+PTX'
  'libgomp*.so*': none
  'libcublasLt*.so*': {exempt: "NVIDIA's build"}
"""


def test_the_spec_carries_every_decision_postbuild_needs(config, tmp_path) -> None:
    """Vendored rules, jit, the epoch, requires_dist and the torch pin travel in the spec file."""
    (config.root / "packages" / "torchpkg.yml").write_text(MOVED)
    moved = load_config(config.root)
    spec = resolve_spec(moved, moved.recipe("torchpkg"), TORCH)
    assert (spec.dist, spec.build_epoch, spec.jit) == ("torchpkg", moved.effective_epoch(moved.recipe("torchpkg")), True)
    assert [(r.glob, r.archs.canonical() if r.archs is not None else None, r.exempt) for r in spec.vendored] == [
        ("libkernels*.so*", "sm_80;sm_90;compute_90", None), ("libgomp*.so*", "", None),
        ("libcublasLt*.so*", None, "NVIDIA's build")]
    assert spec.requires_dist == ("numpy",)
    assert spec.pins == ("torch==2.9.*",)
    assert spec.required_components
    assert spec.recipe_sha256 == moved.recipe("torchpkg").sha256
    assert spec.expected.allow_no_extensions
    assert spec.expected.vendored == spec.vendored
    assert read_spec(write_spec(spec, tmp_path)) == spec


def test_a_spec_is_held_to_its_own_decisions_when_the_recipe_moves(config, tmp_path) -> None:
    """The recipe edited after the build (epoch, vendored rules, jit, requires_dist): postbuild's
    context from the written spec is the build's, not today's recipe's."""
    path = write_spec(resolve_spec(config, config.recipe("torchpkg"), TORCH), tmp_path)
    (config.root / "packages" / "torchpkg.yml").write_text(MOVED)
    today = resolve_spec(load_config(config.root), load_config(config.root).recipe("torchpkg"), TORCH)
    spec = read_spec(path)
    assert (today.build_epoch, today.jit, len(today.vendored), today.requires_dist) != (
        spec.build_epoch, spec.jit, len(spec.vendored), spec.requires_dist)
    unknown = buildinfo.Toolchain(nvcc=None, torch=None, python=None, builder=None, cibuildwheel=None)
    ctx = spec.context(run=probe.run_from_env({}), toolchain=unknown)
    assert ctx.build_epoch == spec.build_epoch != today.build_epoch
    assert not ctx.expected.allow_no_extensions
    assert ctx.expected.vendored == ()
    assert ctx.requires_dist == ()
    assert ctx.pins == ("torch==2.9.*",)
    assert ctx.recipe_sha256 == spec.recipe_sha256 != today.recipe_sha256
    assert ctx.cell == TORCH
    assert ctx.expected.default == spec.arch.archs
    assert ctx.cuobjdump == spec.cuobjdump == PINNED


def test_the_spec_holds_the_assertions_cuobjdump(config, tmp_path) -> None:
    """A spec written by a farm that pinned another cuobjdump asserts with that one, not today's."""
    data = resolve_spec(config, config.recipe("torchpkg"), TORCH).to_json()
    assert data["postbuild"]["cuobjdump"] == PINNED
    data["postbuild"]["cuobjdump"] = "13.2.51"
    path = tmp_path / SPEC_FILE
    path.write_text(json.dumps(data))
    unknown = buildinfo.Toolchain(nvcc=None, torch=None, python=None, builder=None, cibuildwheel=None)
    assert read_spec(path).context(run=probe.run_from_env({}), toolchain=unknown).cuobjdump == "13.2.51"


@pytest.mark.parametrize(("version", "says"), [(SPEC_VERSION - 1, "an older farm"), (SPEC_VERSION + 1, "a newer farm")])
def test_a_spec_of_another_farm_version_fails_closed(config, tmp_path, version, says) -> None:
    data = resolve_spec(config, config.recipe("torchpkg"), TORCH).to_json()
    data["spec_version"] = version
    path = tmp_path / SPEC_FILE
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match=f"spec_version {version}: the spec was written by {says}") as info:
        read_spec(path)
    assert info.value.where == str(path)
    assert "rebuild the cell" in (info.value.hint or "")


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.pop("postbuild"), "postbuild must be an object"),
    (lambda d: d["postbuild"].update(build_epoch=-1), "postbuild.build_epoch must be an integer >= 0"),
    (lambda d: d["postbuild"].update(jit="yes"), "postbuild.jit must be true or false"),
    (lambda d: d["postbuild"].update(vendored=[{"glob": "x", "archs": "sm_80", "exempt": "y"}]),
     r"postbuild.vendored\[0\] must be a rule with an arch list or an exemption"),
    (lambda d: d["postbuild"].update(vendored=[{"glob": "x", "archs": "9.0;8.0", "exempt": None}]),
     r"postbuild.vendored\[0\].archs"),
    (lambda d: d["postbuild"].update(source={"kind": "git", "repo": "r"}), "postbuild.source"),
    (lambda d: d["postbuild"].update(pins="torch"), "postbuild.pins must be a list"),
    (lambda d: d["postbuild"].pop("cuobjdump"), "postbuild.cuobjdump"),
    (lambda d: d["postbuild"].update(cuobjdump="13.5.37; rm -rf ~"), "postbuild.cuobjdump must be a cuobjdump version"),
])
def test_a_spec_with_a_bad_postbuild_decision_is_refused(config, tmp_path, edit, message) -> None:
    data = resolve_spec(config, config.recipe("torchpkg"), TORCH).to_json()
    edit(data)
    path = tmp_path / SPEC_FILE
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match=message):
        read_spec(path)


def test_kernel_families_travel_in_the_spec_and_are_read_back_validated(config, tmp_path) -> None:
    from farm.binary.archrule import FamilyTargets
    from farm.model.arch import ArchList

    base = resolve_spec(config, config.recipe("torchpkg"), TORCH)
    families = (FamilyTargets("SCALED_MM_ARCHS", ("csrc/scaled_mm_c3x_sm90.cu",), ArchList.parse("9.0a")),
                FamilyTargets("FP4_ARCHS", ("csrc/nvfp4.cu",), ArchList.of(())),
                FamilyTargets("MACHETE_ARCHS", (), ArchList.parse("9.0a"), ("csrc/machete/generated/*.cu",)))
    spec = dataclasses.replace(base, families=families)
    assert read_spec(write_spec(spec, tmp_path)) == spec
    assert spec.expected.families == families
    assert spec.digest != base.digest
    for bad in ({"name": "X", "sources": [], "patterns": [], "targets": "9.0a"},
                {"name": "X", "sources": ["a.cpp"], "patterns": [], "targets": ""},
                {"name": "X", "sources": ["a.cu"], "patterns": [], "targets": "9.0q"},
                {"name": "X", "sources": ["a.cu"], "patterns": []},
                {"name": "X", "sources": ["a.cu"], "targets": "9.0a"},  # a spec before patterns
                {"name": "X", "sources": [], "patterns": ["gen/a.cu"], "targets": "9.0a"},  # not a glob
                {"name": "X", "sources": [], "patterns": ["gen/*.cpp"], "targets": "9.0a"}):
        data = spec.to_json()
        data["postbuild"]["families"] = [bad]
        (tmp_path / SPEC_FILE).write_text(json.dumps(data))
        with pytest.raises(UsageError, match="postbuild.families"):
            read_spec(tmp_path / SPEC_FILE)


def test_the_spec_takes_the_families_the_lint_derived_from_the_cmake_project() -> None:
    from farm.builder.spec import families_from_lint
    from farm.lint.api import lint_tree
    from farm.model.arch import ArchList

    tree = Path(__file__).parent / "data" / "lint" / "vllm_like"
    report = lint_tree(tree, ArchList.parse("7.5 8.0 8.6 9.0+PTX 10.0 12.0+PTX"), cuda="13.0")
    families = {f.name: f for f in families_from_lint(report.scope)}
    scaled = families["SCALED_MM_ARCHS (CMakeLists.txt:29)"]
    assert scaled.targets == ArchList.parse("9.0a")
    assert scaled.sources
    assert all(
        s.endswith(".cu") for s in scaled.sources)
    assert families["HADACORE_ARCHS (CMakeLists.txt:47)"].targets == ArchList.parse("8.0+PTX;9.0+PTX")
    with pytest.raises(UsageError, match="differ in length"):
        families_from_lint({**report.scope, "family_sources": []})
    with pytest.raises(UsageError, match="differ in length"):
        families_from_lint({**report.scope, "family_patterns": []})


def test_the_spec_takes_a_familys_glob_of_generated_sources_from_the_lint(tmp_path) -> None:
    from farm.binary.archrule import FamilyTargets
    from farm.builder.spec import families_from_lint
    from farm.lint.api import lint_tree

    tree = shutil.copytree(Path(__file__).parent / "data" / "lint" / "vllm_like", tmp_path / "src")
    cmake = tree / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + 'cuda_archs_loose_intersection(MACHETE_ARCHS "9.0a" "${CUDA_ARCHS}")\n'
                     'file(GLOB MACHETE_SRC "csrc/machete/generated/*.cu")\n'
                     'set_gencode_flags_for_srcs(SRCS "${MACHETE_SRC}" CUDA_ARCHS "${MACHETE_ARCHS}")\n')
    report = lint_tree(tree, ArchList.parse("7.5 8.0 8.6 9.0+PTX 10.0 12.0+PTX"), cuda="13.0")
    families = {f.name: f for f in families_from_lint(report.scope)}
    assert families["MACHETE_ARCHS (CMakeLists.txt:58)"] == FamilyTargets(
        "MACHETE_ARCHS (CMakeLists.txt:58)", (), ArchList.parse("9.0a"), ("csrc/machete/generated/*.cu",))


def test_the_vendored_trees_are_part_of_the_spec_and_its_digest(config, tmp_path) -> None:
    """``source.vendor`` travels in the spec's source (and so in provenance), and another pinned
    archive is another build: the digest the compile shards and link job compare differs."""
    def spec_with(sha: str) -> BuildSpec:
        text = TORCH_RECIPE.replace("  path: src/torchpkg\n", "  path: src/torchpkg\n  vendor:\n"
                                    "    - path: third_party/glm\n"
                                    f"      archive: {{url: 'https://example.org/glm-1.0.1.tar.xz', sha256: {sha}}}\n")
        (config.root / "packages" / "torchpkg.yml").write_text(text)
        moved = load_config(config.root)
        return resolve_spec(moved, moved.recipe("torchpkg"), TORCH)

    plain = resolve_spec(config, config.recipe("torchpkg"), TORCH)
    assert "vendor" not in plain.source.to_dict()  # a recipe without vendor writes the bytes it always wrote
    one, two = spec_with("a" * 64), spec_with("b" * 64)
    assert one.source.to_dict()["vendor"] == [{"kind": "archive", "path": "third_party/glm",
                                               "url": "https://example.org/glm-1.0.1.tar.xz", "sha256": "a" * 64,
                                               "subdir": None}]
    assert read_spec(write_spec(one, tmp_path)) == one
    assert dataclasses.replace(one, recipe_sha256=two.recipe_sha256).digest != two.digest
    assert dataclasses.replace(one, source=two.source).digest == dataclasses.replace(
        two, recipe_sha256=one.recipe_sha256).digest


def test_the_import_checks_runtime_libraries_resolve_to_the_lines_pinned_wheels(tmp_path) -> None:
    """verify.runtime_libs names components; the spec holds NVIDIA's wheels of the cell's line,
    pinned as _defaults.yml pins them (CUDA 12's named -cu12), and they travel in the spec file."""
    for d in ("examples/demo_ext", "src/torchpkg"):
        (tmp_path / d).mkdir(parents=True)
    demo = DEMO_RECIPE.format(arch="8.0;9.0+PTX") + "verify:\n  runtime_libs: [cuda_cudart, cuda_nvrtc]\n"
    config = make_root(tmp_path, {"demo_ext": demo})
    spec = resolve_spec(config, config.recipe("demo_ext"), X86)
    line = config.defaults.toolkit.lines["13.0"]
    assert spec.verify.runtime_libs == ("cuda_cudart", "cuda_nvrtc")
    assert spec.runtime_wheels == (f"nvidia-cuda-runtime=={line.pypi['cuda_cudart']}",
                                   f"nvidia-cuda-nvrtc=={line.pypi['cuda_nvrtc']}")
    assert read_spec(write_spec(spec, tmp_path)) == spec
    cu12 = resolve_spec(config, config.recipe("demo_ext"), dataclasses.replace(X86, cuda="12.8"))
    assert cu12.runtime_wheels == tuple(f"nvidia-cuda-{w}-cu12=={config.defaults.toolkit.lines['12.8'].pypi[c]}"
                                        for w, c in (("runtime", "cuda_cudart"), ("nvrtc", "cuda_nvrtc")))


@pytest.mark.parametrize(("libs", "message"), [
    ("[cuda_nvcc]", "'cuda_nvcc' is no CUDA runtime library"),
    ("[libcudart]", "did you mean|runtime libraries"),
    ("[libcufft]", "CUDA 12.8 pins no PyPI wheel for it"),
])
def test_a_runtime_library_the_line_cannot_give_is_refused_naming_the_recipe(tmp_path, libs, message) -> None:
    (tmp_path / "examples/demo_ext").mkdir(parents=True)
    demo = DEMO_RECIPE.format(arch="8.0;9.0+PTX") + f"verify:\n  runtime_libs: {libs}\n"
    config = make_root(tmp_path, {"demo_ext": demo})
    with pytest.raises(ConfigError, match=message) as info:
        resolve_spec(config, config.recipe("demo_ext"), dataclasses.replace(X86, cuda="12.8"))
    assert info.value.where == "packages/demo_ext.yml"
    assert info.value.exit_code == 2


def test_a_smaller_max_jobs_in_the_environment_wins_over_the_recipes(config, tmp_path) -> None:
    """The recipe says max_jobs: 2; a maintainer's MAX_JOBS=1 on a small host stays 1 in the
    build's environment, a larger one does not raise the recipe's bound."""
    recipe = config.recipe("torchpkg")
    assert resolve_spec(config, recipe, TORCH).knobs.max_jobs == 2
    for env, jobs in (({"MAX_JOBS": "1"}, 1), ({"MAX_JOBS": " 8 "}, 2), ({"MAX_JOBS": ""}, 2)):
        spec = resolve_spec(config, recipe, TORCH, SpecOverrides(env=env))
        assert spec.knobs.max_jobs == jobs, env
    small = resolve_spec(config, recipe, TORCH, SpecOverrides(env={"MAX_JOBS": "1"}))
    plan = plan_build(recipe, TORCH, tmp_path / "src/torchpkg",
                      PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "w"), spec=small)
    assert plan.native is not None
    assert dict(plan.native.environment)["MAX_JOBS"] == "1"
    for bad in ("0", "two", "-1", "1e3"):
        with pytest.raises(UsageError, match="MAX_JOBS") as info:
            resolve_spec(config, recipe, TORCH, SpecOverrides(env={"MAX_JOBS": bad}))
        assert info.value.exit_code == 2
