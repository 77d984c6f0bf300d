"""farm.builder.builders: real builds of demo_ext (native, and cibuildwheel under podman) that pass
postbuild, and a pointnet2-like package whose setup.py overrides the arch list and fails it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from cibuildwheel.options import BuildOptions

from farm.builder.builders import (
    BuilderKind,
    BuildResult,
    BuildSettings,
    build_cell,
    check_engine,
    run_native,
)
from farm.builder.plan import BuildPlan, PlanOptions, render_config, render_environment
from farm.builder.prepare import prepare_source
from farm.cli import main
from farm.errors import ConfigError, ToolError, UsageError
from farm.load.recipes import load_config
from farm.model.arch import ArchList
from farm.model.cells import Cell
from farm.model.config import FarmConfig
from farm.provenance.buildinfo import BuildInfo
from farm.toolkit.assemble import Toolkit
from tests.support import loopback
from tests.support.buildroot import DEMO_RECIPE, REPO, cache_dir_of, make_root, plan_from_config

# the running interpreter's tag: the native builder builds for the Python that runs it
PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
CELL = Cell("demo_ext", "0.1.0", "13.0", "none", PY, "linux_x86_64")
ARCHS = "8.0;9.0+PTX"  # two arches keep the builds small

POINTNET2_RECIPE = """\
name: pointnet2_like
version: '3.0.0'
source:
  path: src/pointnet2_like
links_torch: false
arch:
  list: '8.0;8.6'
lint_ignore:  # the lint in farm build would refuse it first; this test is about the assertion
  - {rule: arch-override, path: setup.py, reason: the post-build assertion must catch it on its own}
"""


def _settings(root: Path, toolkit: Toolkit, **kw: Any) -> BuildSettings:
    assert toolkit.prefix is not None
    return BuildSettings(out_dir=root / "upload", work_root=root / "work", source_cache=root / "sources",
                         toolkit_root=toolkit.prefix.parents[1], **kw)


def _demo_root(root: Path) -> FarmConfig:
    return make_root(root, {"demo_ext": DEMO_RECIPE.format(arch=ARCHS)},
                     {"examples/demo_ext": REPO / "examples" / "demo_ext"})


@pytest.fixture(scope="session")
def native_demo(tmp_path_factory: pytest.TempPathFactory, pypi_toolkit: Toolkit) -> tuple[Path, BuildResult]:
    root = tmp_path_factory.mktemp("native")
    config = _demo_root(root)
    settings = _settings(root, pypi_toolkit, builder=BuilderKind.NATIVE)
    # a maintainer's shell with flags nvcc and gcc refuse, and a header search path whose stddef.h
    # stops any compile that includes it: the build passes only if they are left out
    hostile = {**HOSTILE_SHELL, "CPATH": str(root / "hostile-include")}
    (root / "hostile-include").mkdir()
    (root / "hostile-include" / "stddef.h").write_text("#error the caller's CPATH reached the build\n")
    saved = {k: os.environ.get(k) for k in hostile}
    os.environ.update(hostile)
    lines: list[str] = []

    def log(msg: str) -> None:
        lines.append(msg)
        print(f"farm build: {msg}", file=sys.stderr)

    try:
        return root, build_cell(config, config.recipe("demo_ext"), CELL, settings, log=log)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        (root / "farm-build.log").write_text("\n".join(lines) + "\n")


HOSTILE_SHELL = {"NVCC_PREPEND_FLAGS": "--this-is-not-an-option", "CFLAGS": "-fthis-is-not-a-flag"}


def _cannot_run(reason: str) -> None:
    """Skip on a developer's machine; fail in CI (``CI=true``), which prepares podman with
    .ci/podman-setup.sh: a container test that silently skips there proves nothing."""
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"CI=true and the cibuildwheel container test cannot run: {reason}")
    pytest.skip(reason)


# The local manylinux-shaped image .ci/podman-setup.sh builds for podman hosts (docs/background.md).
LOCAL_PODMAN_IMAGE = "localhost/farm-manylinux:bookworm-1"


def podman_image() -> str:
    """The local manylinux image podman runs cibuildwheel's builds in; a skip (a failure under
    CI=true) naming why when podman or the image is missing."""
    image = os.environ.get("FARM_MANYLINUX_IMAGE", LOCAL_PODMAN_IMAGE)
    try:
        check_engine("podman")
    except ToolError as exc:
        _cannot_run(f"podman cannot start containers here: {exc}")
    if subprocess.run(["podman", "image", "exists", image], check=False).returncode != 0:
        _cannot_run(f"the image {image} does not exist: run `bash .ci/podman-setup.sh` (as root)")
    return image


@pytest.fixture(scope="session")
def podman_demo(tmp_path_factory: pytest.TempPathFactory, pypi_toolkit: Toolkit) -> tuple[Path, BuildResult]:
    image = podman_image()
    root = tmp_path_factory.mktemp("podman")
    config = _demo_root(root)
    settings = _settings(root, pypi_toolkit, engine="podman", images={"x86_64": image})
    # cibuildwheel overwrites $GITHUB_STEP_SUMMARY; the builder must append to it instead
    summary = root / "step-summary.md"
    summary.write_text("earlier step\n")
    saved = os.environ.get("GITHUB_STEP_SUMMARY")
    os.environ["GITHUB_STEP_SUMMARY"] = str(summary)
    try:
        return root, build_cell(config, config.recipe("demo_ext"), CELL, settings)
    finally:
        if saved is None:
            del os.environ["GITHUB_STEP_SUMMARY"]
        else:
            os.environ["GITHUB_STEP_SUMMARY"] = saved


def _check_asserted_demo(root: Path, result: BuildResult, builder: str) -> None:
    assert result.passed, "\n".join(r.report.render() for r in result.postbuild)
    (wheel,) = result.asserted
    assert wheel.parent == root / "upload"
    assert wheel.name.startswith(f"demo_ext-0.1.0+cu130-{PY}-{PY}-manylinux_")
    assert Path(str(wheel) + ".ledger.json").is_file()
    with zipfile.ZipFile(wheel) as zf:
        raw = zf.read("demo_ext-0.1.0+cu130.dist-info/_build_info.json")
        assert not [n for n in zf.namelist() if ".libs/" in n]  # nothing vendored
    info = json.loads(raw)
    assert BuildInfo.from_json(raw).to_json() == raw  # each builder's provenance reads back byte for byte
    so = f"demo_ext/_C{sysconfig.get_config_var('EXT_SUFFIX')}"
    assert info["found"][so] == ArchList.parse(ARCHS).canonical() == info["expected"][so]
    assert info["assertion"]["result"] == "passed"
    assert info["toolchain"]["builder"] == builder
    assert info["toolchain"]["nvcc"] == "13.0.88"
    # which exact toolkit: its source, release and each component's version and sha256
    toolkit = info["toolchain"]["toolkit"]
    assert (toolkit["source"], toolkit["release"]) == ("pypi", "13.0.2")
    assert {c["name"]: c["version"] for c in toolkit["components"]}["cuda_nvcc"] == "13.0.88"
    assert all(len(c["sha256"]) == 64 for c in toolkit["components"])
    assert info["cell"] == {"cuda": "13.0", "torch": "none", "python": PY, "platform": "linux_x86_64"}
    assert "duration_s" not in info
    assert "run" not in info
    line = json.loads(Path(f"{wheel}.ledger.json").read_text())
    assert line["duration_s"] > 0  # the build's own time: the matrix plans the cell's jobs with it


def test_native_build_of_demo_ext_passes_postbuild(native_demo) -> None:
    root, result = native_demo
    _check_asserted_demo(root, result, "native")
    # the spec the build was resolved into, written beside it, is the one postbuild asserted
    from farm.builder.spec import SPEC_FILE, read_spec

    spec = read_spec(root / "work" / CELL.id / SPEC_FILE)
    assert spec == result.plan.spec
    assert spec.arch.archs == ArchList.parse(ARCHS)
    # the asserted wheel was installed in a fresh venv and imported: the package and its extension
    (check,) = result.imports
    assert check.passed
    assert check.wheel == result.asserted[0]
    assert [(i.module, i.error) for i in check.imports] == [("demo_ext", None), ("demo_ext._C", None)]
    assert check.python == platform.python_version()


def test_the_callers_compiler_flags_do_not_reach_a_native_build(native_demo) -> None:
    """native_demo builds in a shell whose NVCC_PREPEND_FLAGS and CFLAGS nvcc and gcc refuse, and
    whose CPATH holds a stddef.h that is an #error: the build passed (above), so none reached a
    compile, and the log named them, without values."""
    root, result = native_demo
    assert result.asserted
    log = (root / "farm-build.log").read_text()
    (line,) = [s for s in log.splitlines() if "not passed to the build" in s]
    assert line == (f"{CELL.id}: not passed to the build: CFLAGS, CPATH, NVCC_PREPEND_FLAGS "
                    "(a native build takes its flags from the recipe, as the container does)")
    assert not any(v in log for v in HOSTILE_SHELL.values())


def test_asserted_demo_ext_imports_without_a_gpu(native_demo, tmp_path) -> None:
    _, result = native_demo
    (wheel,) = result.asserted
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path)
    code = "import demo_ext; print(demo_ext.device_count())"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


def test_the_quick_start_twice_succeeds_and_the_second_run_builds_nothing(tmp_path, pypi_toolkit, capsys) -> None:
    """README: `nox -s build -- demo_ext --cuda 13.0 --builder native`, run twice in one checkout.
    The second run finds the cell's asserted wheel (same configuration) and exits 0 without a build."""
    _demo_root(tmp_path)
    argv = ["build", "demo_ext", "--cuda", "13.0", "--builder", "native", "--root", str(tmp_path),
            "--out", str(tmp_path / "wheelhouse"), "--cuda-home", str(pypi_toolkit.cuda_home)]
    assert main(argv) == 0
    (wheel,) = (tmp_path / "wheelhouse").glob("*.whl")
    first = wheel.read_bytes()
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "already built" in err
    assert wheel.name in err
    assert [p.name for p in (tmp_path / "wheelhouse").glob("*.whl")] == [wheel.name]
    assert wheel.read_bytes() == first
    # ...and postbuild after the quick start (README's everyday flow) carries the wheel to dist/
    assert main(["postbuild", str(wheel), "--out", str(tmp_path / "dist"), "--root", str(tmp_path)]) == 0
    assert (tmp_path / "dist" / wheel.name).read_bytes() == first
    # ...or the README's other way: the build's repaired wheel, asserted against the spec it was built from
    work = tmp_path / ".cache" / "build" / CELL.id
    (repaired,) = (work / "wheelhouse").glob("*.whl")
    assert main(["postbuild", str(repaired), "--spec", str(work / "build-spec.json"), "--out",
                 str(tmp_path / "dist-spec"), "--root", str(tmp_path)]) == 0
    assert [p.name for p in (tmp_path / "dist-spec").glob("*.whl")] == [wheel.name]

    # the recipe changed: the old wheel is named, nothing is built until --overwrite replaces it
    recipe = tmp_path / "packages" / "demo_ext.yml"
    recipe.write_text(recipe.read_text() + "# a reviewed change\n")
    assert main(argv) == 2
    assert "from another configuration" in capsys.readouterr().err
    assert wheel.read_bytes() == first


def test_the_native_builder_builds_another_python_from_this_farm(tmp_path, pypi_toolkit, capsys) -> None:
    """`farm build demo_ext --builder native --python 3.12` from a farm of 3.11 (or the reverse):
    the build environment, the wheel, its provenance and its import check are that Python's."""
    from farm.builder.interpreters import find_interpreter

    other = "3.12" if sys.version_info[:2] != (3, 12) else "3.11"
    tag = "cp" + other.replace(".", "")
    search = find_interpreter(tag)
    if search.interpreter is None:
        pytest.skip(f"no Python {other} on this host: {'; '.join(search.looked)}")
    _demo_root(tmp_path)
    out = tmp_path / "wheelhouse"
    assert main(["build", "demo_ext", "--cuda", "13.0", "--builder", "native", "--python", other,
                 "--root", str(tmp_path), "--cache-dir", str(cache_dir_of(pypi_toolkit)), "--out", str(out),
                 "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    (wheel,) = out.glob("*.whl")
    assert wheel.name.startswith(f"demo_ext-0.1.0+cu130-{tag}-{tag}-manylinux_")
    assert f"py{other}-torchnone-" in result["build_env"]
    info = BuildInfo.from_json(zipfile.ZipFile(wheel).read("demo_ext-0.1.0+cu130.dist-info/_build_info.json"))
    assert info.toolchain is not None
    assert info.toolchain.python == search.interpreter.version
    (check,) = result["imports"]
    assert check["passed"]
    assert check["python"] == search.interpreter.version


def _build_demo_native(root: Path, toolkit: Toolkit) -> tuple[int, Path]:
    """`farm build demo_ext --builder native` of the root's demo_ext: its exit code and --out."""
    out = root / "wheelhouse"
    code = main(["build", "demo_ext", "--cuda", "13.0", "--builder", "native", "--root", str(root),
                 "--cache-dir", str(cache_dir_of(toolkit)), "--out", str(out)])
    return code, out


def _assertion_logged_before(err: str, later: str) -> None:
    """The build log shows the passed assertion of demo_ext's extension (its expected and found
    targets, per extension), before ``later``: what the assertion found survives a withdrawn wheel."""
    so = f"demo_ext/_C{sysconfig.get_config_var('EXT_SUFFIX')}"
    archs = ArchList.parse(ARCHS).canonical()
    prefix = f"farm build: {CELL.id}: "
    verdict = err.index(f"{prefix}{so}: ok (expected from the cell's arch list)\n")
    rows = err[verdict:].splitlines()[1:7]
    assert f"{prefix}expected  {archs}" in rows
    assert f"{prefix}found     {archs}" in rows
    assert f"{prefix}missing   -" in rows
    assert verdict < err.index(later)


def test_a_wheel_whose_import_fails_fails_the_cell(tmp_path, pypi_toolkit, capsys) -> None:
    """demo_ext whose package imports a module it never requires: it compiles and passes the
    assertion, then the import check in a fresh venv fails: exit 1, the error shown, the wheel
    and its fragment withdrawn from --out; the log has what the assertion found, before the check."""
    _demo_root(tmp_path)
    init = tmp_path / "examples" / "demo_ext" / "demo_ext" / "__init__.py"
    init.write_text(init.read_text() + "\nimport farm_test_undeclared_dependency\n")
    code, out = _build_demo_native(tmp_path, pypi_toolkit)
    captured = capsys.readouterr()
    assert code == 1
    _assertion_logged_before(captured.err, f"farm build: {CELL.id}: import check of ")
    assert "import demo_ext: FAILED: ModuleNotFoundError: No module named 'farm_test_undeclared_dependency'" in (
        captured.out)
    assert "import demo_ext._C: FAILED: its package demo_ext failed to import: ModuleNotFoundError" in captured.out
    assert f"FAILED the import check; nothing was written to {out}" in captured.out
    assert not list(out.glob("*.whl"))
    assert not list(out.glob("*.ledger.json"))


def test_a_wheel_whose_requirement_cannot_be_installed_is_withdrawn(tmp_path, pypi_toolkit, capsys,
                                                                   monkeypatch) -> None:
    """The import check cannot even run: pip cannot find a requirement of the wheel (a farm package
    this host never built, say). The assertion passed, but the cell is not checked: exit 3, pip's
    error shown, and neither the wheel nor its ledger fragment left in --out for an upload to take."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing is asked of an index
    _demo_root(tmp_path)
    recipe = tmp_path / "packages" / "demo_ext.yml"
    recipe.write_text(recipe.read_text() + "requires_dist: [farm-test-no-such-requirement==0.0.1]\n")
    code, out = _build_demo_native(tmp_path, pypi_toolkit)
    captured = capsys.readouterr()
    assert code == 3
    _assertion_logged_before(captured.err, "the import check could not run")
    assert "farm-test-no-such-requirement" in captured.out + captured.err
    assert "the import check could not run" in captured.out + captured.err
    assert not list(out.glob("*.whl"))
    assert not list(out.glob("*.ledger.json"))


def test_nothing_to_build_is_exit_0_with_a_message(tmp_path, capsys) -> None:
    """Every selected cell is in the ledger: not an error."""
    config = _demo_root(tmp_path)
    recipe = config.recipe("demo_ext")
    from tests.support.ledgermaker import make_entry

    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    info = make_entry(cuda="13.0", torch="none", python=python, build_epoch=config.effective_epoch(recipe),
                      arch=ArchList.parse(ARCHS).canonical())
    (tmp_path / "ledger.jsonl").write_text(json.dumps(info) + "\n")
    assert main(["build", "demo_ext", "--cuda", "13.0", "--builder", "native", "--root", str(tmp_path),
                 "--platform", "linux_x86_64", "--python", f"{sys.version_info.major}.{sys.version_info.minor}"]) == 0
    assert "nothing to build" in capsys.readouterr().err


def test_cibuildwheel_build_under_podman_passes_postbuild(podman_demo) -> None:
    root, result = podman_demo
    _check_asserted_demo(root, result, "cibuildwheel")
    # the toolkit came from PyPI inside the container
    assert "nvidia-cuda-nvcc==13.0.88" in str(result.plan.options["before-all"])
    # provenance names the container's Python (the image's cp311), not this host's
    from farm.builder.builders import container_python

    (wheel,) = result.asserted
    with zipfile.ZipFile(wheel) as zf:
        info = json.loads(zf.read("demo_ext-0.1.0+cu130.dist-info/_build_info.json"))
    image_python = container_python(result.plan)
    assert image_python is not None
    assert info["toolchain"]["python"] == image_python
    summary = (root / "step-summary.md").read_text()
    assert summary.startswith("earlier step\n")
    assert f"{PY}-manylinux_x86_64" in summary


def test_pointnet2_like_setup_override_fails_the_assertion(tmp_path, pypi_toolkit, capsys, monkeypatch) -> None:
    """Through the command line: `farm build` exits 1, names the missing and extra arches, and
    leaves nothing in the upload directory."""
    make_root(tmp_path, {"pointnet2_like": POINTNET2_RECIPE},
              {"src/pointnet2_like": REPO / "tests" / "data" / "pointnet2_like"})
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    upload = tmp_path / "upload"
    code = main(["build", "pointnet2_like", "--root", str(tmp_path), "--builder", "native",
                 "--cuda", "13.0", "--python", "3.11", "--platform", "linux_x86_64",
                 "--cache-dir", str(cache_dir_of(pypi_toolkit)), "--out", str(upload), "--json"])
    assert code == 1
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert not result["passed"]
    assert result["wheels"] == []
    (ext,) = result["postbuild"][0]["assertion"]["extensions"]
    assert ext["expected"] == "sm_80;sm_86"
    assert ext["found"] == "sm_75;sm_80;compute_80"
    assert ext["missing"] == "sm_86"
    assert ext["extra"] == "sm_75;compute_80"
    # the lone sm_75 is the setup.py's list, not nvcc's default (which comes as sm_75 + compute_75)
    assert ext["likely_causes"] == ["setup.py/CMake override"]
    # a failed wheel never reaches the upload directory
    assert not upload.exists() or not any(upload.iterdir())
    assert "FAILED the assertion" in summary.read_text()


# -- engine and source preparation ----------------------------------------------------------------
def test_missing_engine_names_the_alternatives(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolError) as exc:
        check_engine("podman")
    assert "not installed" in str(exc.value)
    assert "--engine docker" in str(exc.value)
    assert "--builder native" in str(exc.value)
    assert exc.value.exit_code == 3


def test_unknown_engine_is_bad_input() -> None:
    with pytest.raises(UsageError):
        check_engine("lxc")


def _patch_root(tmp_path: Path, script: str | None, subdir: str = "pkg") -> tuple[FarmConfig, Path]:
    src = tmp_path / "checkout"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "setup.py").write_text('import os\nos.environ["TORCH_CUDA_ARCH_LIST"] = "3.7"\n')
    text = f"name: p\nversion: '1.0'\nsource:\n  path: checkout\nlinks_torch: false\nbuild:\n  subdir: {subdir}\n"
    if script is not None:
        (tmp_path / "patches").mkdir()
        (tmp_path / "patches" / "p.py").write_text(script)
        text += "  patch_script: patches/p.py\n"
    config = make_root(tmp_path, {"p": text})
    return config, src


def test_patch_script_runs_on_a_private_copy(tmp_path) -> None:
    script = ("import pathlib, re\np = pathlib.Path('setup.py')\n"
              "p.write_text(re.sub(r'^os.environ.*$', '', p.read_text(), flags=re.M))\n")
    config, src = _patch_root(tmp_path, script)
    before = (src / "pkg" / "setup.py").read_text()
    copy = prepare_source(src, config.recipe("p"), config.root, tmp_path / "work", log=lambda m: None)
    assert "TORCH_CUDA_ARCH_LIST" not in (copy / "pkg" / "setup.py").read_text()
    assert (src / "pkg" / "setup.py").read_text() == before  # the checkout is untouched


def test_a_platform_patch_runs_after_the_common_one_for_its_cells(tmp_path) -> None:
    """``platform_patch_script``: win_amd64 cells get both scripts, in order; others the common one."""
    common = "import pathlib\np = pathlib.Path('setup.py')\np.write_text(p.read_text() + '# common\\n')\n"
    config, src = _patch_root(tmp_path, common)
    (tmp_path / "patches" / "msvc.py").write_text(
        "import pathlib\np = pathlib.Path('setup.py')\nassert p.read_text().endswith('# common\\n')\n"
        "p.write_text(p.read_text() + '# msvc\\n')\nprint('msvc flags')\n")
    recipe_file = tmp_path / "packages" / "p.yml"
    recipe_file.write_text(recipe_file.read_text() + "  platform_patch_script: {win_amd64: patches/msvc.py}\n")
    config = load_config(tmp_path)
    logged: list[str] = []
    win = prepare_source(src, config.recipe("p"), config.root, tmp_path / "win", log=logged.append,
                         platform="win_amd64")
    assert (win / "pkg" / "setup.py").read_text().endswith("# common\n# msvc\n")
    assert [m for m in logged if "patching with" in m] == ["p: patching with patches/p.py",
                                                          "p: patching with patches/msvc.py"]
    assert "  msvc flags" in logged
    linux = prepare_source(src, config.recipe("p"), config.root, tmp_path / "linux", log=lambda m: None,
                           platform="linux_x86_64")
    assert (linux / "pkg" / "setup.py").read_text().endswith("# common\n")
    (tmp_path / "patches" / "msvc.py").unlink()
    with pytest.raises(ConfigError, match="patch_script 'patches/msvc.py' does not exist"):
        prepare_source(src, config.recipe("p"), config.root, tmp_path / "win", log=lambda m: None,
                       platform="win_amd64")


def test_the_pointnet2_ops_patch_removes_the_assignment_and_is_idempotent(tmp_path) -> None:
    # packages/patches/pointnet2_ops.py on a setup.py with pointnet2_ops' assignment line
    src = tmp_path / "checkout"
    (src / "pointnet2_ops_lib").mkdir(parents=True)
    setup = (REPO / "tests" / "data" / "pointnet2_like" / "setup.py").read_text().replace(
        '"7.5;8.0+PTX"', '"3.7+PTX;5.0;6.0;6.1;6.2;7.0;7.5"')
    (src / "pointnet2_ops_lib" / "setup.py").write_text(setup)
    recipe = (REPO / "packages" / "pointnet2_ops.yml").read_text()
    recipe = recipe.replace("git: {repo: erikwijmans/Pointnet2_PyTorch, ref: b5ceb6d9ca0467ea34beb81023f96ee82228f626}",
                            "path: checkout")
    config = make_root(tmp_path, {"pointnet2_ops": recipe}, {"packages/patches": REPO / "packages" / "patches"})
    logged: list[str] = []
    copy = prepare_source(src, config.recipe("pointnet2_ops"), config.root, tmp_path / "work", log=logged.append)
    patched = (copy / "pointnet2_ops_lib" / "setup.py").read_text()
    assert "TORCH_CUDA_ARCH_LIST" not in patched.split('"""', 2)[2]  # the docstring may name it
    assert patched.count("\n") == setup.count("\n") - 1
    assert "removed the TORCH_CUDA_ARCH_LIST" in " ".join(logged)
    subprocess.run([sys.executable, str(REPO / "packages" / "patches" / "pointnet2_ops.py")],
                   cwd=copy / "pointnet2_ops_lib", check=True, capture_output=True)
    assert (copy / "pointnet2_ops_lib" / "setup.py").read_text() == patched


def test_a_patch_that_makes_the_build_folder_runs_in_the_root(tmp_path) -> None:
    """nvdiffrec_render's build folder exists only after its patch: the patch runs in the
    checkout's root, and a patch that does not make the folder is reported, naming both."""
    script = ("import pathlib\nnew = pathlib.Path('made')\nnew.mkdir()\n"
              "(new / 'setup.py').write_text(pathlib.Path('pkg/setup.py').read_text())\n")
    config, src = _patch_root(tmp_path, script, subdir="made")
    copy = prepare_source(src, config.recipe("p"), config.root, tmp_path / "work", log=lambda m: None)
    assert (copy / "made" / "setup.py").is_file()
    assert not (src / "made").exists()
    (tmp_path / "patches" / "p.py").write_text("print('made nothing')\n")
    with pytest.raises(ConfigError, match="did not make it"):
        prepare_source(src, config.recipe("p"), config.root, tmp_path / "work", log=lambda m: None)


def test_the_nvdiffrec_render_patch_makes_a_buildable_package(tmp_path) -> None:
    """packages/patches/nvdiffrec_render.py on a render/ shaped like nvdiffrec's: the package, its
    setup.py (the seven kernel sources, -DNVDR_TORCH) and ops.py preferring the built extension."""
    c_src = tmp_path / "render" / "renderutils" / "c_src"
    c_src.mkdir(parents=True)
    for name in ("mesh.cu", "loss.cu", "bsdf.cu", "normal.cu", "cubemap.cu", "common.cpp", "torch_bindings.cpp"):
        (c_src / name).write_text("// kernel\n")
    (tmp_path / "render" / "renderutils" / "tests").mkdir()
    (tmp_path / "render" / "renderutils" / "tests" / "test_bsdf.py").write_text("import renderutils\n")
    (tmp_path / "render" / "util.py").write_text("import numpy as np\n")
    (tmp_path / "render" / "renderutils" / "__init__.py").write_text("from .ops import xfm_points\n")
    (tmp_path / "render" / "renderutils" / "ops.py").write_text(
        "_cached_plugin = None\ndef _get_plugin():\n    global _cached_plugin\n"
        "    if _cached_plugin is not None:\n        return _cached_plugin\n\n    raise RuntimeError('JIT')\n"
        "def xfm_points():\n    return _get_plugin()\n")
    script = REPO / "packages" / "patches" / "nvdiffrec_render.py"
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    pkg = tmp_path / "nvdiffrec_render" / "nvdiffrec_render"
    assert (pkg / "__init__.py").is_file()
    assert (pkg / "util.py").is_file()
    assert not (pkg / "renderutils" / "tests").exists()
    setup = (tmp_path / "nvdiffrec_render" / "setup.py").read_text()
    assert '"nvdiffrec_render.renderutils._C"' in setup
    assert "-DNVDR_TORCH" in setup
    assert "torch_bindings.cpp" in setup
    # the prebuilt extension is found first: a stand-in _C makes the JIT unnecessary
    (pkg / "renderutils" / "_C.py").write_text("NAME = 'prebuilt'\n")
    probe = "import nvdiffrec_render.renderutils as r; print(r.xfm_points().NAME)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=pkg.parent, capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "prebuilt", out.stderr
    again = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert again.returncode == 0
    assert "already made" in again.stdout


def test_failing_patch_script_is_reported(tmp_path) -> None:
    config, src = _patch_root(tmp_path, "raise SystemExit('pattern not found')\n")
    with pytest.raises(ConfigError, match="pattern not found"):
        prepare_source(src, config.recipe("p"), config.root, tmp_path / "work", log=lambda m: None)


def test_missing_subdir_is_reported(tmp_path) -> None:
    config, src = _patch_root(tmp_path, None, subdir="nope")
    with pytest.raises(ConfigError, match="build.subdir 'nope'"):
        prepare_source(src, config.recipe("p"), config.root, tmp_path / "work", log=lambda m: None)


def test_native_builder_refuses_cells_it_cannot_build(tmp_path, monkeypatch) -> None:
    (tmp_path / "examples/demo_ext").mkdir(parents=True)
    config = make_root(tmp_path, {"demo_ext": DEMO_RECIPE.format(arch=ARCHS)})
    recipe = config.recipe("demo_ext")
    opts = PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "w", host_cuda_home=Path("/x"))
    windows = Cell("demo_ext", "0.1.0", "13.0", "none", f"cp3{sys.version_info.minor}", "win_amd64")
    plan = plan_from_config(config, recipe, windows, tmp_path / "examples/demo_ext", opts)
    with pytest.raises(ToolError, match=r"\-\-builder cibuildwheel"):
        run_native(plan, log=lambda m: None)
    # another Python is built with that Python: one that is nowhere here is refused, naming where it was looked for
    no_python = Cell("demo_ext", "0.1.0", "13.0", "none", "cp399", "linux_x86_64")
    plan = plan_from_config(config, recipe, no_python, tmp_path / "examples/demo_ext", opts)
    monkeypatch.setenv("FARM_NO_UV", "1")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    with pytest.raises(UsageError, match="cannot be built on this host: no Python 3.99 here") as exc:
        run_native(plan, log=lambda m: None)
    assert "PATH: no python3.99" in str(exc.value)
    assert exc.value.exit_code == 2  # what the host is, as the preflight refuses it


def test_native_builds_default_to_this_python_and_platform(capsys) -> None:
    import argparse

    from farm.commands.build import _native_defaults, configure

    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["demo_ext", "--builder", "native"])
    _native_defaults(args)
    assert args.python == [f"{sys.version_info.major}.{sys.version_info.minor}"]
    assert args.platform == [f"linux_{os.uname().machine}"]
    assert "this Python" in capsys.readouterr().err
    explicit = parser.parse_args(["demo_ext", "--builder", "native", "--python", "3.10", "--platform", "win_amd64"])
    _native_defaults(explicit)
    assert explicit.python == ["3.10"]
    assert explicit.platform == ["win_amd64"]
    container = parser.parse_args(["demo_ext"])
    _native_defaults(container)
    assert container.python is None
    assert container.platform is None


def _demo_plan(root: Path) -> BuildPlan:
    """demo_ext's plan for CELL, its source an empty setup.py: nothing here builds it."""
    (root / "examples/demo_ext").mkdir(parents=True)
    (root / "examples/demo_ext/setup.py").write_text("")
    config = make_root(root, {"demo_ext": DEMO_RECIPE.format(arch=ARCHS)})
    return plan_from_config(config, config.recipe("demo_ext"), CELL, root / "examples/demo_ext",
                            PlanOptions(output_dir=root / "out", work_dir=root / "w"))


def test_ambient_cibuildwheel_options_cannot_change_a_farm_build(tmp_path, monkeypatch) -> None:
    """A CIBW_*_LINUX variable in the caller's environment beats the plan's generic CIBW_* one in
    cibuildwheel; the builder drops it. Checked with cibuildwheel's own option resolution."""
    from dataclasses import replace

    from cibuildwheel.options import CommandLineArguments, compute_options

    from farm.builder.builders import cibuildwheel_environment

    plan = _demo_plan(tmp_path)
    plan.config_file.parent.mkdir(parents=True)
    plan.config_file.write_text(plan.config_text)
    ambient = {"PATH": "/usr/bin", "CIBW_BEFORE_BUILD_LINUX": "exit 1", "CIBW_TEST_COMMAND_LINUX": "false",
               "CIBW_MANYLINUX_X86_64_IMAGE": "localhost/mine:1"}
    args = replace(CommandLineArguments.defaults(), only=plan.identifier, config_file=str(plan.config_file),
                   package_dir=Path(plan.package_dir), output_dir=plan.output_dir)
    monkeypatch.chdir(plan.cwd)

    def resolved(env: dict[str, str]) -> BuildOptions:
        return compute_options("linux", args, env).build_options(plan.identifier)

    leaked = resolved({**ambient, **plan.env})
    assert leaked.before_build == "exit 1"  # why the ambient variables must go
    clean = resolved(cibuildwheel_environment(plan, ambient))
    assert clean.before_build == str(plan.options["before-build"])
    assert not clean.test_command
    assert clean.manylinux_images is not None
    assert clean.manylinux_images["x86_64"] == "localhost/mine:1"  # which image to use is the caller's


def test_both_builders_evaluate_the_plan_environment_alike(tmp_path, monkeypatch) -> None:
    """One plan, one environment: cibuildwheel (its own option resolution, from the config file
    farm writes) and the native builder give the same variables, quotes, $VAR and $(...) included."""
    from dataclasses import replace

    from cibuildwheel.options import CommandLineArguments, compute_options

    from farm.builder.builders import native_environment

    plan = _demo_plan(tmp_path)
    assert plan.native is not None
    tricky = (("GREETING", 'say "hi" to `them` and \\ back'), ("WITH_SPACE", "a b  c"),
              ("PATH", "/opt/x/bin:$PATH"), ("NESTED", "${HOME}/$GREETING"), ("SHELL_OUT", "$(echo sub)"))
    steps = replace(plan.native, environment=plan.native.environment + tricky)
    plan = replace(plan, native=steps, options={**plan.options, "environment": render_environment(steps.environment)},
                   config_text=render_config({**plan.options, "environment": render_environment(steps.environment)}))
    plan.config_file.parent.mkdir(parents=True)
    plan.config_file.write_text(plan.config_text)
    args = replace(CommandLineArguments.defaults(), only=plan.identifier, config_file=str(plan.config_file),
                   package_dir=Path(plan.package_dir), output_dir=plan.output_dir)
    monkeypatch.chdir(plan.cwd)
    base = {"PATH": "/usr/bin", "HOME": "/home/u"}
    in_container = compute_options("linux", args, {**base, **plan.env}).build_options(plan.identifier)
    expected = in_container.environment.as_dictionary(prev_environment=base)
    native = native_environment(steps, base)
    assert native == expected
    assert native["GREETING"] == 'say "hi" to `them` and \\ back'
    assert native["WITH_SPACE"] == "a b  c"
    assert native["PATH"].startswith("/opt/x/bin:")
    assert native["PATH"].endswith(":/usr/bin")
    assert native["NESTED"] == '/home/u/say "hi" to `them` and \\ back'
    assert native["SHELL_OUT"] == "sub"
    assert native["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0+PTX"


def test_the_native_environment_links_against_the_plans_library_path_alone(tmp_path) -> None:
    """The plan's LIBRARY_PATH is the toolkit's libcuda stub folder; the caller's is not appended
    (a container never sees it, and gcc searches the host's own link folders without it)."""
    from farm.builder.builders import native_environment, passed_on, withheld

    plan = _demo_plan(tmp_path)
    assert plan.native is not None
    stubs = dict(plan.native.environment)["LIBRARY_PATH"]
    assert stubs.endswith("/lib64/stubs")
    caller = {"PATH": "/usr/bin", "HOME": "/home/u", "LIBRARY_PATH": "/opt/host/lib:/usr/local/lib"}
    assert native_environment(plan.native, passed_on(caller))["LIBRARY_PATH"] == stubs
    assert withheld(plan.native.environment, caller) == []  # the plan sets its own: nothing to name


def test_the_native_environment_leaves_out_the_callers_compiler_variables(tmp_path) -> None:
    """A container never sees the caller's shell; neither does a native build see its compiler and
    flag variables: those the plan sets are the plan's (the recipe's CFLAGS evaluated without the
    caller's, the compiler cache's CC/CXX), the rest are left out and named; farm's own pass."""
    from dataclasses import replace

    from farm.builder import compilecache
    from farm.builder.builders import native_environment, passed_on, withheld

    plan = _demo_plan(tmp_path)
    assert plan.native is not None
    steps = replace(plan.native, environment=(*plan.native.environment, ("CFLAGS", "-O2 $CFLAGS"),
                                              *compilecache.build_environment("/run/bin")))
    farm_needs = {"PATH": "/usr/bin", "HOME": "/home/u", "TMPDIR": "/tmp/u", "HTTPS_PROXY": "http://proxy:3128",
                  "PIP_INDEX_URL": "https://mirror.example/simple", "SCCACHE_DIR": "/cache/sccache"}
    shell = {"CFLAGS": "-g", "CC": "clang", "CXX": "clang++", "CXXFLAGS": "-O0", "LDFLAGS": "-L/opt/x",
             "NVCC_PREPEND_FLAGS": "-G", "NVCC_APPEND_FLAGS": "-lineinfo", "NVCC_CCBIN": "/usr/bin/gcc-9",
             "CUDAFLAGS": "-G", "CMAKE_ARGS": "-DCMAKE_BUILD_TYPE=Debug", "CUDA_HOME": "/usr/local/cuda",
             "CMAKE_CUDA_COMPILER_LAUNCHER": "ccache", "PYTORCH_NVCC": "/opt/other/nvcc"}
    env = native_environment(steps, passed_on({**farm_needs, **shell}))
    dropped = withheld(steps.environment, {**farm_needs, **shell})
    assert dropped == ["CMAKE_ARGS", "CUDAFLAGS", "CXXFLAGS", "LDFLAGS", "NVCC_CCBIN", "NVCC_PREPEND_FLAGS"]
    assert not set(dropped) & set(env)
    planned = dict(steps.environment)
    assert env["CFLAGS"] == "-O2 "  # the recipe's, its $CFLAGS empty as in a container
    assert (env["CC"], env["CXX"]) == ("/run/bin/gcc", "/run/bin/g++")
    assert env["NVCC_APPEND_FLAGS"] == planned["NVCC_APPEND_FLAGS"] == "--threads 1"
    assert env["CMAKE_CUDA_COMPILER_LAUNCHER"] == "/run/bin/launch"
    assert env["PYTORCH_NVCC"] == "/run/bin/nvcc"
    assert env["CUDA_HOME"] == planned["CUDA_HOME"]
    assert env["PATH"] == f"{planned['CUDA_HOME']}/bin:/usr/bin"
    assert {k: env[k] for k in farm_needs if k != "PATH"} == {k: v for k, v in farm_needs.items() if k != "PATH"}
    # without the compiler cache the build compiles through the same launchers (uncached): the caller's
    # compiler variables are left out all the same
    planned_off = dict(plan.native.environment)
    assert withheld(plan.native.environment, shell) == sorted(set(shell) - set(planned_off))
    bare = native_environment(plan.native, passed_on({**farm_needs, **shell}))
    assert "CFLAGS" not in bare
    assert {k: bare[k] for k in ("CC", "CXX", "PYTORCH_NVCC", "CMAKE_CUDA_COMPILER_LAUNCHER")} == {
        k: planned_off[k] for k in ("CC", "CXX", "PYTORCH_NVCC", "CMAKE_CUDA_COMPILER_LAUNCHER")}


# search paths and platform overrides: they change what is compiled and linked, or the wheel's tag
AMBIENT_PATHS = {"CPATH": "/opt/host/include", "C_INCLUDE_PATH": "/opt/c/include",
                 "CPLUS_INCLUDE_PATH": "/opt/cxx/include", "CMAKE_PREFIX_PATH": "/opt/prefix",
                 "CMAKE_INCLUDE_PATH": "/opt/cmake/include", "CMAKE_LIBRARY_PATH": "/opt/cmake/lib",
                 "LIBRARY_PATH": "/opt/host/lib", "_PYTHON_HOST_PLATFORM": "linux-aarch64",
                 "_PYTHON_SYSCONFIGDATA_NAME": "_sysconfigdata__linux_aarch64-linux-gnu", "ARCHFLAGS": "-arch arm64"}


def test_a_recipes_env_reaches_the_build_and_the_callers_search_paths_do_not(tmp_path) -> None:
    """build.env may set what the caller's shell may not: the recipe's CFLAGS, CPATH and
    CMAKE_PREFIX_PATH reach the build (evaluated without the caller's values, as in a container);
    the caller's search paths and platform overrides are left out, and those the recipe does not
    set are named."""
    from farm.builder.builders import native_environment, passed_on, withheld

    (tmp_path / "examples/demo_ext").mkdir(parents=True)
    (tmp_path / "examples/demo_ext/setup.py").write_text("")
    recipe = DEMO_RECIPE.format(arch=ARCHS) + (
        "build:\n  env: {CFLAGS: '-O3 -fno-plt $CFLAGS', CPATH: /opt/recipe/include,"
        " CMAKE_PREFIX_PATH: '/opt/recipe:$CMAKE_PREFIX_PATH', LIBRARY_PATH: '$LIBRARY_PATH:/opt/recipe/lib'}\n")
    config = make_root(tmp_path, {"demo_ext": recipe})
    plan = plan_from_config(config, config.recipe("demo_ext"), CELL, tmp_path / "examples/demo_ext",
                            PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "w"))
    assert plan.native is not None
    caller = {"PATH": "/usr/bin", "HOME": "/home/u", "CFLAGS": "-g", **AMBIENT_PATHS}
    env = native_environment(plan.native, passed_on(caller))
    assert env["CFLAGS"] == "-O3 -fno-plt "
    assert env["CPATH"] == "/opt/recipe/include"
    assert env["CMAKE_PREFIX_PATH"] == "/opt/recipe:"
    assert env["LIBRARY_PATH"] == f"{plan.cuda_home}/lib64/stubs:/opt/recipe/lib"  # after the toolkit's stubs
    planned = {"CPATH", "CMAKE_PREFIX_PATH", "LIBRARY_PATH"}  # the recipe's and the toolkit's stubs
    assert not (set(AMBIENT_PATHS) - planned) & set(env)
    assert withheld(plan.native.environment, caller) == sorted(set(AMBIENT_PATHS) - planned)


def test_a_windows_build_on_the_host_gets_no_compiler_variables_from_the_caller(tmp_path) -> None:
    """cibuildwheel builds a win_amd64 cell on the host, in the environment farm starts it with:
    the caller's compiler variables, search paths and MSVC's CL/LINK are left out of it and named
    in the log line a native build writes; a Linux cell's container sees none of them anyway, and
    cibuildwheel itself gets the caller's environment."""
    from farm.builder.builders import cibuildwheel_environment, say_withheld

    (tmp_path / "examples/demo_ext").mkdir(parents=True)
    (tmp_path / "examples/demo_ext/setup.py").write_text("")
    config = make_root(tmp_path, {"demo_ext": DEMO_RECIPE.format(arch=ARCHS)})
    windows = Cell("demo_ext", "0.1.0", "13.0", "none", PY, "win_amd64")
    plan = plan_from_config(config, config.recipe("demo_ext"), windows, tmp_path / "examples/demo_ext",
                            PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "w", host_cuda_home=Path("/x")))
    assert plan.msvc is not None
    shell = {"CFLAGS": "-g", "NVCC_PREPEND_FLAGS": "-G", "CL": "/Od", "_LINK_": "/DEBUG", "CPATH": "C:/inc"}
    ambient = {"PATH": "C:/Windows", "INCLUDE": "C:/VC/include", "LIB": "C:/VC/lib", "TEMP": "C:/tmp", **shell}
    env = cibuildwheel_environment(plan, ambient)
    assert not set(shell) & set(env)
    assert {k: env[k] for k in ("PATH", "INCLUDE", "LIB", "TEMP")} == {k: ambient[k] for k in ("PATH", "INCLUDE", "LIB", "TEMP")}
    assert env["GITHUB_STEP_SUMMARY"] == str(plan.step_summary)
    logged: list[str] = []
    say_withheld(plan, ambient, logged.append)
    assert logged == [(f"{windows.id}: not passed to the build: CFLAGS, CL, CPATH, NVCC_PREPEND_FLAGS, _LINK_ "
                       "(a native build takes its flags from the recipe, as the container does)")]
    linux = _demo_plan(tmp_path / "linux")
    assert cibuildwheel_environment(linux, ambient) == {**ambient, **linux.env}


def test_build_output_is_relayed_without_secrets(capfd) -> None:
    """pip echoing an index URL with a token, or a build script printing a password: the log farm
    relays shows neither (stdout stays free for --json)."""
    from farm.builder.builders import run_relayed

    env = {**os.environ, "PRIVATE_INDEX_TOKEN": "tok-9f8e7d6c", "PIP_INDEX_URL": "https://ci:pw-1234@pypi.example/simple"}
    proc = run_relayed(["sh", "-c", 'echo "Looking in indexes: $PIP_INDEX_URL"; echo "token=$PRIVATE_INDEX_TOKEN" >&2'],
                       env=env)
    assert proc.returncode == 0
    out, err = capfd.readouterr()
    assert out == ""
    assert "Looking in indexes: https://***@pypi.example/simple" in err
    assert "token=***" in err
    assert "tok-9f8e7d6c" not in err
    assert "pw-1234" not in err


def test_farm_build_lints_the_source_as_built_before_compiling(tmp_path, capsys) -> None:
    """Without a lint_ignore, the setup.py override of pointnet2_like is refused by the lint that
    farm build runs on the prepared source: exit 1, before any toolkit or compiler is touched."""
    recipe = POINTNET2_RECIPE.split("lint_ignore:", maxsplit=1)[0]
    make_root(tmp_path, {"pointnet2_like": recipe}, {"src/pointnet2_like": REPO / "tests" / "data" / "pointnet2_like"})
    cache = tmp_path / "cache"
    code = main(["build", "pointnet2_like", "--root", str(tmp_path), "--builder", "native", "--cuda", "13.0",
                 "--python", "3.11", "--platform", "linux_x86_64", "--cache-dir", str(cache)])
    err = capsys.readouterr().err
    assert code == 1
    assert "the arch-gate lint fails on the source of pointnet2_like-3.0.0-cu130-notorch-cp311-linux_x86_64 as built" in err
    assert "setup.py" in err
    assert "TORCH_CUDA_ARCH_LIST" in err
    assert not (cache / "toolkit").exists()
    assert not (cache / "envs").exists()


def test_cells_this_host_cannot_build_are_skipped_before_any_download(tmp_path, capsys, monkeypatch) -> None:
    """`farm build demo_ext --builder cibuildwheel --engine podman` on a Linux host without podman:
    every cell is checked first; Windows cells are skipped (cibuildwheel builds them on Windows),
    Linux cells for the engine; nothing is fetched or assembled, and with nothing left, exit 3."""
    _demo_root(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-engines-here"))
    cache = tmp_path / "cache"
    code = main(["build", "demo_ext", "--builder", "cibuildwheel", "--engine", "podman", "--cuda", "13.0",
                 "--python", "3.11", "--root", str(tmp_path), "--cache-dir", str(cache)])
    err = capsys.readouterr().err
    assert code == 3
    assert ("demo_ext-0.1.0-cu130-notorch-cp311-win_amd64: skipped: this host cannot build it: cibuildwheel builds "
            "win_amd64 wheels on Windows; this host is Linux") in err
    assert "linux_x86_64: skipped: this host cannot build it: the container engine 'podman' is not installed" in err
    assert "none of the 3 selected cell(s) of demo_ext can be built on this host" in err
    assert not cache.exists() or not any(cache.rglob("*.json"))  # no toolkit, no source, no environment
    # the Windows cell named on the command line is refused instead: bad input, exit 2
    code = main(["build", "demo_ext", "--builder", "cibuildwheel", "--engine", "podman", "--cuda", "13.0",
                 "--python", "3.11", "--platform", "win_amd64", "--root", str(tmp_path), "--cache-dir", str(cache)])
    assert code == 2
    assert ("win_amd64: error: cell demo_ext-0.1.0-cu130-notorch-cp311-win_amd64 cannot be built on "
            "this host") in capsys.readouterr().err


def test_a_header_from_a_vendored_archive_builds_into_an_asserted_wheel(tmp_path, pypi_toolkit, capsys) -> None:
    """demo_ext without its header, which a source.vendor archive served on 127.0.0.1 supplies (as
    a stripped submodule's library would be): the build compiles against the placed header, the
    wheel is asserted, and its provenance and build spec record the archive."""
    _demo_root(tmp_path)
    tree = tmp_path / "examples" / "demo_ext"
    header = (tree / "csrc" / "demo_ext.h").read_bytes()
    (tree / "csrc" / "demo_ext.h").unlink()
    setup = tree / "setup.py"
    setup.write_text(setup.read_text().replace('include_dirs=["csrc"]', 'include_dirs=["csrc", "csrc/inc"]'))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        member = tarfile.TarInfo("demo-headers-1.0/include/demo_ext.h")
        member.size = len(header)
        tf.addfile(member, io.BytesIO(header))
    served = tmp_path / "served"
    served.mkdir()
    (served / "demo-headers-1.0.tar.gz").write_bytes(buf.getvalue())
    sha = hashlib.sha256(buf.getvalue()).hexdigest()
    out = tmp_path / "wheelhouse"
    with loopback.serve(served) as base:
        vendor = {"kind": "archive", "path": "csrc/inc", "url": f"{base}demo-headers-1.0.tar.gz", "sha256": sha,
                  "subdir": "include"}
        recipe = tmp_path / "packages" / "demo_ext.yml"
        recipe.write_text(recipe.read_text().replace("  path: examples/demo_ext\n", (
            "  path: examples/demo_ext\n  vendor:\n    - path: csrc/inc\n"
            f"      archive: {{url: '{vendor['url']}', sha256: {sha}}}\n      subdir: include\n")))
        assert main(["build", "demo_ext", "--cuda", "13.0", "--builder", "native", "--root", str(tmp_path),
                     "--cache-dir", str(cache_dir_of(pypi_toolkit)), "--out", str(out)]) == 0
    (wheel,) = out.glob("*.whl")
    info = BuildInfo.from_json(zipfile.ZipFile(wheel).read("demo_ext-0.1.0+cu130.dist-info/_build_info.json"))
    assert info.asserted
    assert info.source is not None
    assert info.source.to_dict()["vendor"] == [vendor]
    spec = json.loads((cache_dir_of(pypi_toolkit) / "build" / CELL.id / "build-spec.json").read_text())
    assert spec["postbuild"]["source"]["vendor"] == [vendor]
    assert not (tree / "csrc" / "inc").exists()  # placed in the cached copy, never in the recipe's folder
