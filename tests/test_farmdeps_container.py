"""A farm wheel as a build dependency on cibuildwheel's route (farm.builder.builders.stage_farm_deps
and the plan's mount): the resolved wheel (farm.builder.farmdeps.resolve, the same as the native
builder's) is copied into the cell's work folder, its sha256 checked again, mounted read-only into
the container and installed there by its sha256. The real build: demo_ext built once by farm, then
tests/data/dep_user, whose setup.py imports demo_ext, by cibuildwheel under the real podman and
image; the provenance records the dependency as the native builder's does."""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from cibuildwheel.oci_container import OCIContainerEngineConfig

from farm.builder.builders import BuilderKind, BuildSettings, build_cell, stage_farm_deps
from farm.builder.farmdeps import FarmDep
from farm.builder.plan import CONTAINER_FARM_DEPS, PlanOptions, container_label
from farm.errors import WheelError
from farm.fsutil import sha256_file
from farm.model.cells import Cell
from farm.provenance.ledgerwrite import FRAGMENT_SUFFIX
from farm.toolkit.assemble import Toolkit
from tests.support.buildroot import dep_user_root, plan_from_config

PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
DEMO = Cell("demo_ext", "0.1.0", "13.0", "none", PY, "linux_x86_64")
USER = Cell("dep_user", "1.0.0", "13.0", "none", PY, "linux_x86_64")


def _dep(tmp_path: Path) -> FarmDep:
    wheel = tmp_path / "wheelhouse" / f"demo_ext-0.1.0+cu130-{PY}-{PY}-manylinux_2_34_x86_64.whl"
    wheel.parent.mkdir(parents=True, exist_ok=True)
    wheel.write_bytes(b"the wheel's bytes")
    return FarmDep("demo_ext==0.1.0+cu130", wheel, sha256_file(wheel))


def test_the_plan_mounts_the_checked_copies_and_installs_them_by_sha256(tmp_path) -> None:
    """The container plan: the copies' folder mounted read-only (as cibuildwheel itself reads its
    container-engine option, a path with a space stays one argument) and before-build installing
    the direct reference to the mounted copy; a Windows build (on its host) installs the wheel's
    own path."""
    config = dep_user_root(tmp_path)
    dep = _dep(tmp_path)
    staged = tmp_path / "work dir" / "farm-deps"
    opts = PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "work", container_engine="podman",
                       farm_deps=(dep,), farm_deps_dir=staged)
    plan = plan_from_config(config, config.recipe("dep_user"), USER, tmp_path, opts)
    engine = OCIContainerEngineConfig.from_config_string(str(plan.options["container-engine"]))
    assert engine.create_args == ("--volume", f"{tmp_path / 'work'}/compile-cache:/opt/farm/compile-run",
                                  "--volume", f"{staged}:{CONTAINER_FARM_DEPS}:ro",
                                  "--label", container_label(tmp_path / "work"))
    assert str(plan.options["before-build"]).endswith(
        f"python -m pip install 'demo_ext @ file://{CONTAINER_FARM_DEPS}/{dep.wheel.name}#sha256={dep.sha256}'")
    win = Cell("dep_user", "1.0.0", "13.0", "none", PY, "win_amd64")
    wplan = plan_from_config(config, config.recipe("dep_user"), win, tmp_path,
                             PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "work", host_cuda_home=tmp_path,
                                         farm_deps=(dep,)))
    assert dep.direct_reference in str(wplan.options["before-build"])
    assert "create_args" not in str(wplan.options["container-engine"])


def test_the_container_gets_checked_copies_and_nothing_else(tmp_path) -> None:
    dep = _dep(tmp_path)
    (dep.wheel.parent / "other-0.1-py3-none-any.whl").write_bytes(b"not a dependency")
    folder = stage_farm_deps((dep,), tmp_path / "work" / "farm-deps")
    assert [p.name for p in folder.iterdir()] == [dep.wheel.name]
    assert sha256_file(folder / dep.wheel.name) == dep.sha256
    (folder / "stale.whl").write_bytes(b"")
    assert [p.name for p in stage_farm_deps((dep,), folder).iterdir()] == [dep.wheel.name]  # emptied first
    # bytes that are not the resolved ones (changed after resolve) are refused
    dep.wheel.write_bytes(b"other bytes")
    with pytest.raises(WheelError, match="changed while it was copied for the build container"):
        stage_farm_deps((dep,), folder)


@pytest.fixture(scope="module")
def demo_dep(tmp_path_factory: pytest.TempPathFactory, pypi_toolkit: Toolkit) -> Path:
    """farm's demo_ext wheel of DEMO's cell, built once (native, nvcc) with its ledger fragment."""
    root = tmp_path_factory.mktemp("demo-dep")
    config = dep_user_root(root)
    demo = build_cell(config, config.recipe("demo_ext"), DEMO, BuildSettings(
        builder=BuilderKind.NATIVE, out_dir=root / "wheelhouse", work_root=root / "work",
        source_cache=root / "sources", cuda_home=pypi_toolkit.cuda_home))
    assert demo.passed
    (wheel,) = demo.asserted
    assert Path(f"{wheel}{FRAGMENT_SUFFIX}").is_file()
    return wheel


def test_cibuildwheel_builds_against_farms_own_wheel_in_the_container(tmp_path, pypi_toolkit, demo_dep) -> None:
    """dep_user through cibuildwheel under the real podman and image: demo_ext's verified copy is
    mounted read-only and installed by its sha256 inside the container, where dep_user's setup.py
    imports it; the wheel's provenance records the dependency by name and sha256."""
    from .test_builders import podman_image

    image = podman_image()
    config = dep_user_root(tmp_path)
    assert pypi_toolkit.prefix is not None
    settings = BuildSettings(engine="podman", images={"x86_64": image}, out_dir=tmp_path / "wheelhouse",
                             work_root=tmp_path / "work", source_cache=tmp_path / "sources",
                             toolkit_root=pypi_toolkit.prefix.parents[1])
    settings.out_dir.mkdir(parents=True)
    demo_wheel = settings.out_dir / demo_dep.name
    shutil.copyfile(demo_dep, demo_wheel)
    shutil.copyfile(f"{demo_dep}{FRAGMENT_SUFFIX}", f"{demo_wheel}{FRAGMENT_SUFFIX}")
    user = build_cell(config, config.recipe("dep_user"), USER, settings)
    assert user.passed, "\n".join(r.report.render() for r in user.postbuild)
    (wheel,) = user.asserted
    digest = sha256_file(demo_wheel)
    with zipfile.ZipFile(wheel) as zf:
        info = json.loads(zf.read("dep_user-1.0.0+cu130.dist-info/_build_info.json"))
    assert info["toolchain"]["builder"] == "cibuildwheel"
    assert info["toolchain"]["farm_deps"] == [{"requirement": "demo_ext==0.1.0+cu130", "filename": demo_wheel.name,
                                               "sha256": digest}]
    staged = tmp_path / "work" / USER.id / "farm-deps"
    assert [p.name for p in staged.iterdir()] == [demo_wheel.name]
    assert f"--volume {staged}:{CONTAINER_FARM_DEPS}:ro" in str(user.plan.options["container-engine"])
    assert (f"'demo_ext @ file://{CONTAINER_FARM_DEPS}/{demo_wheel.name}#sha256={digest}'"
            in str(user.plan.options["before-build"]))
    (check,) = user.imports  # and it imports on this host, in a fresh venv
    assert check.passed
