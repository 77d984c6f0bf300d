"""The config model: the repository's own files load; every malformed recipe fails with its own message."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from farm.errors import ArchError, ConfigError, FarmError, UsageError
from farm.load.defaults import load_defaults
from farm.load.recipes import load_config
from farm.model.cells import Cell, extension_lists, requires_dist, resolve_arch
from farm.model.config import ArchiveOrigin, GitSource, PathSource, SdistSource, VendorSource

REPO = Path(__file__).resolve().parent.parent
SHA = "1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d"


@pytest.fixture
def farm_root(tmp_path: Path) -> Path:
    shutil.copy(REPO / "_defaults.yml", tmp_path / "_defaults.yml")
    (tmp_path / "packages").mkdir()
    (tmp_path / "src").mkdir()
    return tmp_path


def write(root: Path, name: str, body: str) -> Path:
    path = root / "packages" / f"{name}.yml"
    path.write_text(textwrap.dedent(body).lstrip())
    return path


GOOD = """
name: pkg
version: '1.0'
source:
  git: {repo: owner/pkg, ref: v1.0}
links_torch: true
"""


VENDORED = f"""
name: pkg
version: '1.0'
links_torch: true
source:
  git: {{repo: owner/pkg, ref: v1.0}}
  vendor:
    - path: third_party/glm
      archive: {{url: 'https://example.org/glm-1.0.1.tar.xz', sha256: {SHA}}}
"""


COMMIT = "f3fde58372d33e9a5650ba7b80fc48b3b49d40c8"
GIT_VENDORED = VENDORED.replace(
    f"archive: {{url: 'https://example.org/glm-1.0.1.tar.xz', sha256: {SHA}}}",
    f"git: {{repo: NVIDIA/cutlass, ref: {COMMIT}}}").replace("third_party/glm", "csrc/cutlass")


def test_repository_config_loads() -> None:
    config = load_config(REPO)
    assert len(config.recipes) >= 11
    assert {"flash_attn", "sageattention", "pointnet2_ops", "torch_scatter", "demo_ext"} <= set(config.recipes)
    d = config.defaults
    assert d.build_epoch == 0
    assert "13.0" in d.cuda_lines
    assert len(d.grid) == 32
    assert d.policy.rows["x86_64"]["13.0"].text == "7.5;8.0;8.6;9.0+PTX;10.0;12.0+PTX"
    assert "12.4" not in d.policy.rows["aarch64"]
    assert d.default_target in d.publish
    sage = config.recipe("sageattention")
    assert "sm_90a" in sage.arch.by_cuda["13.0"].archs.names()
    assert config.recipe("natten").build.arch_env == {"NATTEN_CUDA_ARCH": "versions"}
    assert isinstance(config.recipe("flash_attn").source, SdistSource)
    assert isinstance(config.recipe("demo_ext").source, PathSource)


def test_good_recipe_loads(farm_root: Path) -> None:
    write(farm_root, "pkg", GOOD)
    recipe = load_config(farm_root).recipe("pkg")
    assert recipe.source == GitSource("owner/pkg", "v1.0", False)
    assert recipe.source.url == "https://github.com/owner/pkg.git"
    assert recipe.dist == "pkg"
    assert recipe.build_epoch == 0
    assert len(recipe.sha256) == 64


def test_per_extension_lists(farm_root: Path) -> None:
    write(farm_root, "pkg", GOOD + "extensions:\n  '*_sm90*': '9.0a'\n  '*_sm80*': '8.0;8.6'\n")
    recipe = load_config(farm_root).recipe("pkg")
    assert [(e.glob, e.spec.archs.canonical()) for e in recipe.extensions] == [
        ("*_sm90*", "sm_90a"), ("*_sm80*", "sm_80;sm_86")]


def test_sharding_forms(farm_root: Path) -> None:
    write(farm_root, "pkg", GOOD + "sharding: 20\n")
    sharding = load_config(farm_root).recipe("pkg").sharding
    assert sharding is not None
    assert sharding.jobs == 20
    assert (sharding.jobs_for("linux_x86_64"), sharding.jobs_for("linux_aarch64"), sharding.jobs_for("win_amd64")) == (20, 20, 1)
    write(farm_root, "pkg", GOOD + "sharding: {jobs: 10, platforms: [linux_x86_64]}\n")
    sharding = load_config(farm_root).recipe("pkg").sharding
    assert sharding is not None
    assert (sharding.jobs_for("linux_x86_64"), sharding.jobs_for("linux_aarch64")) == (10, 1)
    write(farm_root, "pkg", GOOD)
    assert load_config(farm_root).recipe("pkg").sharding is None


def test_unknown_package_suggests(farm_root: Path) -> None:
    write(farm_root, "pkg", GOOD)
    with pytest.raises(UsageError, match="did you mean 'pkg'"):
        load_config(farm_root).recipe("pgk")


# Each malformed recipe: (body, the message it must carry, the line it must name).
MALFORMED = {
    "unknown-key": (GOOD + "max_job: 2\n", "unknown key 'max_job'", 6),
    "unknown-key-suggestion": (GOOD + "links_torh: true\n", "did you mean 'links_torch'", 6),
    "unknown-nested-key": (GOOD + "build:\n  max_jobz: 2\n", "unknown key 'build.max_jobz'", 7),
    "wrong-type-bool": (GOOD.replace("links_torch: true", "links_torch: 'yes'"), "'links_torch' must be true or false", 5),
    "wrong-type-version-number": (GOOD.replace("version: '1.0'", "version: 1.0"), "quote it", 2),
    "missing-required": (GOOD.replace("links_torch: true\n", ""), "missing required key 'links_torch'", 1),
    "missing-source": ("name: pkg\nversion: '1.0'\nlinks_torch: true\n", "missing required key 'source'", 1),
    "floating-ref-main": (GOOD.replace("ref: v1.0", "ref: main"), "floating ref", 4),
    "floating-ref-HEAD": (GOOD.replace("ref: v1.0", "ref: HEAD"), "floating ref", 4),
    "two-source-kinds": (GOOD.replace("  git:", "  path: src\n  git:"), "exactly one of", 4),
    "bad-sdist-sha": (
        GOOD.replace("  git: {repo: owner/pkg, ref: v1.0}", "  sdist: {name: pkg, version: '1.0', sha256: abc}"),
        "64 lowercase hex", 4),
    "arch-unsupported-by-line": (GOOD + "arch:\n  by_cuda:\n    '13.0': '7.0;8.0'\n", "cannot build sm_70", 8),
    "package-arch-unsupported": (GOOD + "arch:\n  list: '5.0;8.0'\n", "applies to CUDA 13.0", 7),
    "override-unknown-cuda": (GOOD + "arch:\n  by_cuda:\n    '11.8': '8.0'\n", "unknown CUDA line '11.8'", 8),
    "combo-not-in-grid": (GOOD + "arch:\n  by_combo:\n    '13.0/2.4': '8.0'\n", "matches no grid row", 8),
    "bad-arch-syntax": (GOOD + "arch:\n  list: '8.0;nine'\n", "'nine' is not an arch", 7),
    "arch-as-number": (GOOD + "arch:\n  list: 8.0\n", "must be a string", 7),
    "name-mismatch": (GOOD.replace("name: pkg", "name: other"), "does not match the file name", 1),
    "lint-ignore-no-reason": (GOOD + "lint_ignore:\n  - {rule: fp8, path: 'a/*'}\n", "missing required key 'lint_ignore[0].reason'", 7),
    "duplicate-key": (GOOD + "links_torch: false\n", "duplicate key 'links_torch'", 6),
    "not-yaml": (GOOD + "arch: [unclosed\n", "not valid YAML", None),
    "local-version": (GOOD.replace("version: '1.0'", "version: '1.0+cu128'"), "local label", 2),
    "unknown-platform": (GOOD + "only:\n  platforms: [linux_x86]\n", "did you mean 'linux_x86_64'", 7),
    "extension-arch-unsupported": (GOOD + "extensions:\n  '*_sm100*': '10.0f'\n", "extensions['*_sm100*'] applies to CUDA 12.4", 7),
    "env-shadows-farm": (GOOD + "build:\n  env: {TORCH_CUDA_ARCH_LIST: '3.7'}\n", "set by farm for every build", 7),
    "env-bad-name": (GOOD + "build:\n  env: {'A B': '1'}\n", "not an environment variable name", 7),
    "wheel-as-cuda-component": (GOOD + "build:\n  extra_cuda_components: nvidia-nvtx\n", "not a CUDA component name", 7),
    "only-combination-not-in-grid": (GOOD + "only:\n  combinations:\n    - {cuda: '13.0', torch: '2.4'}\n",
                                     "only.combinations[0] selects CUDA 13.0, torch 2.4", 8),
    "only-combination-python-not-in-grid": (
        GOOD + "only:\n  combinations:\n    - {cuda: '13.0', torch: '2.9', python: ['3.15']}\n",
        "selects Python 3.15 with CUDA 13.0", 8),
    "bad-requirement": (GOOD + "requires_dist:\n  - numpy\n  - numpy>=>1\n",
                        "requires_dist entry 'numpy>=>1' is not a requirement", 8),
    "bad-extra-dep": (GOOD + "build:\n  extra_deps:\n    - ninja\n    - 'cumm=={version:cumm}+'\n",
                      "build.extra_deps entry 'cumm=={version:cumm}+' is not a requirement", 9),
    "requires-duplicate": (GOOD + "requires_dist:\n  - numpy>=1.24\n  - Numpy<3\n",
                           ("requires_dist entry 'Numpy<3' repeats project 'numpy' of entry 'numpy>=1.24' "
                            "(packages/pkg.yml:7)"), 8),
    "requires-duplicate-marker": (GOOD + "requires_dist:\n  - tqdm\n  - \"zope_interface; python_version < '3.12'\"\n"
                                  "  - \"Zope.Interface>=5; python_version<'3.12'\"\n",
                                  ("repeats project 'zope-interface' of entry \"zope_interface; python_version < '3.12'\" "
                                   '(packages/pkg.yml:8) under the same marker (python_version < "3.12")'), 9),
    "extra-deps-duplicate": (GOOD + "build:\n  extra_deps: [pccm>=0.4.16, numpy, PCCM]\n",
                             "build.extra_deps entry 'PCCM' repeats project 'pccm' of entry 'pccm>=0.4.16'", 7),
    "extra-deps-duplicate-words": (GOOD + "build:\n  extra_deps: cmake ninja cmake\n",
                                   "build.extra_deps entry 'cmake' repeats project 'cmake' of entry 'cmake'", 7),
    "bad-git-repo": (GOOD.replace("repo: owner/pkg", "repo: pkg"), "neither a GitHub owner/name nor a git URL", 4),
    "arch-env-unknown-rendering": (GOOD + "build:\n  arch_env: {PKG_ARCHS: cmak}\n", "did you mean 'cmake'", 7),
    "arch-env-shadows-farm": (GOOD + "build:\n  arch_env: {TORCH_CUDA_ARCH_LIST: torch}\n", "is set by farm", 7),
    "arch-typo": (GOOD + "arch:\n  list: '8.0;9.9'\n", "not a GPU arch any nvcc knows", 7),
    "sharding-one-job": (GOOD + "sharding: 1\n", "between 2 and 64", 6),
    "sharding-not-int": (GOOD + "sharding: many\n", "e.g. sharding: 10", 6),
    "sharding-windows": (GOOD + "sharding: {jobs: 4, platforms: [win_amd64]}\n", "Linux builds only", 6),
    "sharding-unknown-key": (GOOD + "sharding: {jobs: 4, platfroms: [linux_x86_64]}\n", "did you mean 'platforms'", 6),
    "verify-bad-device-error": (GOOD + "verify:\n  expect_device_error: 3\n", "must be true or the text", 7),
    "verify-bad-module": (GOOD + "verify:\n  import_name: llama-cpp\n", "is not a module name", 7),
    "verify-unknown-key": (GOOD + "verify:\n  skip_arch: yes\n", "unknown key 'verify.skip_arch'", 7),
    "requires-unknown-placeholder": (GOOD + "requires_dist:\n  - numpy\n  - cumm=={VER:cumm}\n",
                                     "requires_dist entry 'cumm=={VER:cumm}': unknown placeholder '{VER:cumm}'", 8),
    "extra-deps-unknown-placeholder": (GOOD + "build:\n  extra_deps: [ninja, 'cumm=={versoin:cumm}']\n",
                                       "build.extra_deps entry 'cumm=={versoin:cumm}': unknown placeholder", 7),
    "requires-no-such-recipe": (GOOD + "requires_dist: ['cumm=={version:cumm}']\n", "names 'cumm', which has no recipe", None),
    "system-package-bad-name": (GOOD + "build:\n  system_packages: ['a;rm -rf /']\n", "is not a package name", 7),
    "arch-block-unknown-platform": (GOOD + "arch:\n  win64:\n    list: '8.0'\n", "did you mean 'win_amd64'", 7),
    "vendor-path-escapes": (VENDORED.replace("path: third_party/glm", "path: ../glm"),
                            "source.vendor[0].path '../glm' is not a folder inside the source", 7),
    "vendor-path-absolute": (VENDORED.replace("path: third_party/glm", "path: /usr/include/glm"),
                             "'/usr/include/glm' is not a folder inside the source", 7),
    "vendor-path-git": (VENDORED.replace("path: third_party/glm", "path: .git/hooks"), "'.git/hooks' is not a folder", 7),
    "vendor-subdir-escapes": (VENDORED + "      subdir: ../../etc\n",
                              "source.vendor[0].subdir '../../etc' is not a folder inside the archive", 9),
    "vendor-two-origins": (VENDORED + "      sdist: {name: PyGLM, version: '2.8.3', sha256: " + SHA + "}\n",
                           "source.vendor[0] must have exactly one of 'archive', 'sdist', 'git' (found archive, sdist)", 7),
    "vendor-no-origin": (VENDORED.replace("      archive: {url: 'https://example.org/glm-1.0.1.tar.xz', sha256: "
                                          + SHA + "}\n", ""), "must have exactly one of 'archive', 'sdist', 'git'\n", 7),
    "vendor-bad-sha": (VENDORED.replace("sha256: " + SHA, "sha256: abc"),
                       "source.vendor[0].archive.sha256 must be 64 lowercase hex digits", 8),
    "vendor-not-an-archive": (VENDORED.replace("glm-1.0.1.tar.xz", "glm.html"), "does not name an archive", 8),
    "vendor-bad-url": (VENDORED.replace("https://example.org/", "ftp://example.org/"), "not an http(s) URL", 8),
    "vendor-overlap": (VENDORED + "    - {path: third_party/glm/glm, archive: {url: 'https://example.org/b.zip', "
                       "sha256: " + SHA + "}}\n", "overlaps 'third_party/glm' (packages/pkg.yml:7)", 9),
    "vendor-unknown-key": (VENDORED + "      strip: 1\n", "unknown key 'source.vendor[0].strip'", 9),
    "vendor-git-tag": (GIT_VENDORED.replace(COMMIT, "v4.2.1"),
                       "source.vendor[0].git.ref 'v4.2.1' is not a full commit (40 lowercase hex digits)", 8),
    "vendor-git-short-commit": (GIT_VENDORED.replace(COMMIT, COMMIT[:12]), "is not a full commit", 8),
    "vendor-git-bad-repo": (GIT_VENDORED.replace("NVIDIA/cutlass", "cutlass"),
                            "source.vendor[0].git.repo 'cutlass' is neither a GitHub owner/name nor a git URL", 8),
    "vendor-git-submodules": (GIT_VENDORED.replace("}\n", ", submodules: true}\n"),
                              "unknown key 'source.vendor[0].git.submodules'", 8),
    "vendor-not-a-list": (GOOD.replace("ref: v1.0}\n", "ref: v1.0}\n  vendor: {path: a}\n"),
                          "'source.vendor' must be a list", 5),
    "platform-patch-unknown-platform": (GOOD + "build:\n  platform_patch_script:\n    win64: p/x.py\n",
                                        "did you mean 'win_amd64'", 8),
    "platform-patch-not-a-script": (GOOD + "build:\n  platform_patch_script: {win_amd64: [p/x.py]}\n",
                                    "must be the path of a Python script", 7),
    "platform-patch-outside": (GOOD + "build:\n  platform_patch_script: {win_amd64: ../x.py}\n",
                               "must stay inside the repository", 7),
    "msvc-toolset-year": (GOOD + "build:\n  msvc_toolset: '2022'\n", "is not a Visual C++ toolset version", 7),
    "msvc-toolset-number": (GOOD + "build:\n  msvc_toolset: 14.44\n", "quote it: msvc_toolset: '14.44'", 7),
    "patch-script-not-python": (GOOD + "build:\n  patch_script: [p/x.py, p/notes.txt]\n",
                                "entry 'p/notes.txt' must be the path of a Python script", 7),
    "platform-patch-not-a-mapping": (GOOD + "build:\n  platform_patch_script: p/x.py\n", "must be a mapping", 7),
    "combo-on-torch-free": (
        GOOD.replace("links_torch: true", "links_torch: false") + "arch:\n  by_combo:\n    '13.0/2.9': '8.0'\n",
        "links_torch: false", 8),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_recipe(farm_root: Path, case: str) -> None:
    body, message, line = MALFORMED[case]
    (farm_root / "packages" / "pkg.yml").write_text(body.lstrip())
    with pytest.raises(FarmError) as err:
        load_config(farm_root)
    text = str(err.value)
    assert message in text
    assert "packages/pkg.yml" in text
    if line is not None:
        # that line exactly (not 8 for 80); the key may follow it: "packages/pkg.yml:7 (arch.list)"
        assert (err.value.where or "").split(" ")[0] == f"packages/pkg.yml:{line}"
    assert err.value.exit_code == 2


def test_malformed_messages_are_distinct(farm_root: Path) -> None:
    seen = set()
    for body, _, _ in MALFORMED.values():
        (farm_root / "packages" / "pkg.yml").write_text(body.lstrip())
        with pytest.raises(FarmError) as err:
            load_config(farm_root)
        seen.add(str(err.value))
    assert len(seen) == len(MALFORMED)


def test_vendored_trees_load_in_the_recipes_order(farm_root: Path) -> None:
    write(farm_root, "pkg", VENDORED + f"""    - path: third_party/eigen
      sdist: {{name: cmeel-eigen, version: '3.4.0', sha256: {SHA}}}
      subdir: cmeel.prefix/include
""")
    glm, eigen = load_config(farm_root).recipe("pkg").vendor
    assert glm == VendorSource("third_party/glm", ArchiveOrigin("https://example.org/glm-1.0.1.tar.xz", SHA), None,
                               "packages/pkg.yml:7")
    assert eigen.origin == SdistSource("cmeel-eigen", "3.4.0", SHA)
    assert eigen.subdir == "cmeel.prefix/include"
    write(farm_root, "pkg", GOOD)
    assert load_config(farm_root).recipe("pkg").vendor == ()


def test_a_vendored_git_tree_loads_with_its_commit(farm_root: Path) -> None:
    write(farm_root, "pkg", GIT_VENDORED + "      subdir: include\n")
    (entry,) = load_config(farm_root).recipe("pkg").vendor
    assert entry == VendorSource("csrc/cutlass", GitSource("NVIDIA/cutlass", COMMIT), "include", "packages/pkg.yml:7")
    assert isinstance(entry.origin, GitSource)
    assert entry.origin.url == "https://github.com/NVIDIA/cutlass.git"


def test_path_source_must_exist(farm_root: Path) -> None:
    write(farm_root, "pkg", GOOD.replace("  git: {repo: owner/pkg, ref: v1.0}", "  path: nowhere"))
    with pytest.raises(ConfigError, match="is not a directory"):
        load_config(farm_root)


def test_defaults_errors(farm_root: Path) -> None:
    path = farm_root / "_defaults.yml"
    text = path.read_text()
    path.write_text(text.replace("build_epoch: 0", "build_epoch: -1"))
    with pytest.raises(ConfigError, match="build_epoch"):
        load_defaults(path)
    path.write_text(text.replace("    '13.0': '7.5;8.0;8.6;9.0+PTX;10.0;12.0+PTX'", "    '13.0': '7.0;8.0'", 1))
    with pytest.raises(ArchError, match="CUDA 13.0's nvcc cannot build sm_70"):
        load_defaults(path)
    path.write_text(text.replace("default_target: index", "default_target: indx"))
    with pytest.raises(ConfigError, match="did you mean 'index'"):
        load_defaults(path)
    path.write_text(text.replace("cuda_lines: [", "cuda_lines: ['11.8', "))
    with pytest.raises(ConfigError, match="no nvcc support table"):
        load_defaults(path)
    path.write_text(text.replace("{cuda: '12.4', torch: '2.5', python: '3.13', platform: win_amd64}",
                                 "{cuda: '12.4', torch: '2.5', python: '3.31', platform: win_amd64}"))
    with pytest.raises(ConfigError, match=r"phantoms\[1\] .* matches no grid cell") as err:
        load_defaults(path)
    assert "_defaults.yml:" in str(err.value)
    path.write_text(text.replace("- {cuda: '12.8', torch: '2.8', arch_list:", "- {cuda: '12.8', torch: '2.6', arch_list:"))
    with pytest.raises(ConfigError, match=r"exceptions\[0\] \(12.8, torch 2.6\) matches no grid row"):
        load_defaults(path)


def test_recipe_file_is_never_written(farm_root: Path) -> None:
    body = GOOD + "max_job: 2\n"
    path = write(farm_root, "pkg", body)
    before = path.read_bytes()
    with pytest.raises(ConfigError):
        load_config(farm_root)
    assert path.read_bytes() == before


def test_unreadable_recipe_files_are_bad_input(farm_root: Path) -> None:
    (farm_root / "packages" / "pkg.yml").write_bytes(GOOD.lstrip().encode() + b"# caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8") as err:
        load_config(farm_root)
    assert "packages/pkg.yml:6" in str(err.value)
    (farm_root / "packages" / "pkg.yml").unlink()
    (farm_root / "packages" / "pkg.yml").mkdir()
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(farm_root)


def test_missing_defaults_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found") as err:
        load_config(tmp_path)
    assert str(tmp_path / "_defaults.yml") in str(err.value)


SIBLING = """
name: base
version: '2.0'
source:
  git: {repo: owner/base, ref: v2.0}
links_torch: %s
"""


@pytest.mark.parametrize("base_links_torch", [True, False])
def test_requires_dist_pins_a_sibling_wheel_of_the_same_cell(farm_root: Path, base_links_torch: bool) -> None:
    write(farm_root, "base", SIBLING % str(base_links_torch).lower())
    write(farm_root, "pkg", GOOD + "requires_dist: [numpy, 'base=={version:base}+{local:base}']\n")
    for packages in (None, ["pkg"]):  # the sibling is read even when only pkg is loaded
        recipe = load_config(farm_root, packages=packages).recipe("pkg")
        cell = Cell("pkg", "1.0", "12.8", "2.8", "cp311", "linux_x86_64")
        local = "cu128torch2.8" if base_links_torch else "cu128"
        assert requires_dist(recipe, cell) == ("numpy", f"base==2.0+{local}")


def test_torch_free_wheel_cannot_pin_a_per_torch_sibling(farm_root: Path) -> None:
    write(farm_root, "base", SIBLING % "true")
    write(farm_root, "pkg", GOOD.replace("links_torch: true", "links_torch: false")
          + "requires_dist: ['base=={version:base}+{local:base}']\n")
    with pytest.raises(ConfigError, match="base links torch, pkg does not"):
        load_config(farm_root)


def test_verify_knobs_load(farm_root: Path) -> None:
    write(farm_root, "pkg", GOOD + textwrap.dedent("""
        verify:
          import_name: pkg_core
          extra_imports: [pkg_core.torch]
          no_direct_import: ['*_cuda.*']
          expect_device_error: CUDA is not available
          needs_driver: true
        """))
    verify = load_config(farm_root).recipe("pkg").verify
    assert verify.import_name == "pkg_core"
    assert verify.extra_imports == ("pkg_core.torch",)
    assert verify.no_direct_import == ("*_cuda.*",)
    assert verify.needs_driver
    assert verify.expect_device_error == "CUDA is not available"
    write(farm_root, "pkg", GOOD + "verify: {expect_device_error: true}\n")
    assert load_config(farm_root).recipe("pkg").verify.expect_device_error is True


def test_a_platform_block_wins_over_its_group(farm_root: Path) -> None:
    write(farm_root, "pkg", GOOD + textwrap.dedent("""
        arch:
          x86_64:
            by_cuda: {'12.8': '8.0;9.0;10.0;12.0'}
          win_amd64:
            by_cuda: {'12.8': '8.0;9.0;12.0'}
        """))
    config = load_config(farm_root)
    recipe = config.recipe("pkg")
    linux = resolve_arch(config, recipe, Cell("pkg", "1.0", "12.8", "2.8", "cp311", "linux_x86_64"))
    win = resolve_arch(config, recipe, Cell("pkg", "1.0", "12.8", "2.8", "cp311", "win_amd64"))
    assert linux is not None
    assert win is not None
    assert linux.archs.canonical() == "sm_80;sm_90;sm_100;sm_120"
    assert linux.origin == "recipe arch.x86_64.by_cuda['12.8']"
    assert win.archs.canonical() == "sm_80;sm_90;sm_120"
    assert win.origin == "recipe arch.win_amd64.by_cuda['12.8']"


def test_extension_lists_per_cuda_line(farm_root: Path) -> None:
    write(farm_root, "pkg", GOOD + textwrap.dedent("""
        extensions:
          '*_sm90*': '9.0a'
          '*_mxfp8*':
            by_cuda: {'12.8': 'sm_100 compute_120', '13.0': 'sm_100 compute_120'}
        """))
    recipe = load_config(farm_root).recipe("pkg")
    def lists(cuda: str) -> list[tuple[str, str]]:
        return [(glob, archs.canonical()) for glob, archs in extension_lists(recipe, cuda)]
    assert lists("12.6") == [("*_sm90*", "sm_90a")]  # not built on 12.6: no list of its own there
    assert lists("12.8") == [("*_sm90*", "sm_90a"), ("*_mxfp8*", "sm_100;compute_120")]
    # a per-line list is checked against its own line only
    write(farm_root, "pkg", GOOD + "extensions:\n  '*_mxfp8*':\n    by_cuda: {'12.6': 'sm_100'}\n")
    with pytest.raises(ArchError, match="cannot build sm_100"):
        load_config(farm_root)


def test_requires_dist_cannot_loosen_the_torch_pin(farm_root: Path) -> None:
    """A torch-linked wheel runs only with its cell's torch minor: a bare `torch` (cubvh and
    sageattn3 upstream) would have replaced farm's pin, so the recipe is refused, naming the entry."""
    write(farm_root, "pkg", GOOD + "requires_dist: [numpy, torch]\n")
    with pytest.raises(ConfigError, match="farm pins torch itself") as exc:
        load_config(farm_root)
    assert exc.value.where
    assert exc.value.where.startswith("packages/pkg.yml:")
    # a package that does not link torch may require it like any other project
    write(farm_root, "pkg", GOOD.replace("links_torch: true", "links_torch: false") + "requires_dist: ['torch>=2']\n")
    assert load_config(farm_root).recipe("pkg").requires_dist == ("torch>=2",)


def test_one_project_under_different_markers_is_no_duplicate(farm_root: Path) -> None:
    """A project may be required once per marker (a version per Python, say); and one list's
    entry does not clash with the other list's (a build dependency the wheel also needs)."""
    write(farm_root, "pkg", GOOD + "requires_dist:\n  - \"numpy<2; python_version < '3.12'\"\n"
          "  - \"numpy>=2; python_version >= '3.12'\"\n  - scipy\n"
          "build:\n  extra_deps: [numpy, scipy]\n")
    recipe = load_config(farm_root).recipe("pkg")
    assert len(recipe.requires_dist) == 3
    assert recipe.build.extra_deps == ("numpy", "scipy")


def test_a_host_only_extension_is_declared_none(farm_root: Path) -> None:
    """A CPU op module beside CUDA ones (kepler_jax's cpu_ops): `none` expects no device code in it,
    and the build spec carries that through its file."""
    write(farm_root, "pkg", GOOD + "extensions:\n  '*cpu_ops*': none\n  '*_sm90*': '9.0a'\n")
    recipe = load_config(farm_root).recipe("pkg")
    assert [(e.glob, e.spec.archs.canonical()) for e in recipe.extensions] == [("*cpu_ops*", ""), ("*_sm90*", "sm_90a")]
    from farm.model.archrequest import ArchRequest

    request = ArchRequest.given(recipe.extensions[1].spec.archs, extensions=tuple(
        (e.glob, e.spec.archs) for e in recipe.extensions))
    back = ArchRequest.from_json(request.to_json(), where="t")
    assert back == request
    assert back.extensions[0] == ("*cpu_ops*", request.extensions[0][1])


def test_a_platform_patch_runs_after_the_common_one_on_its_platform_only(farm_root: Path) -> None:
    write(farm_root, "pkg", GOOD + "build:\n  patch_script: [p/rename.py, p/common.py]\n"
                                   "  platform_patch_script: {win_amd64: p/msvc.py}\n")
    knobs = load_config(farm_root).recipe("pkg").build
    assert knobs.patch_scripts("win_amd64") == ("p/rename.py", "p/common.py", "p/msvc.py")
    assert knobs.patch_scripts("linux_x86_64") == ("p/rename.py", "p/common.py")
    assert knobs.patch_scripts(None) == ("p/rename.py", "p/common.py")
    write(farm_root, "pkg", GOOD + "build:\n  patch_script: p/one.py\n")
    assert load_config(farm_root).recipe("pkg").build.patch_scripts("win_amd64") == ("p/one.py",)
