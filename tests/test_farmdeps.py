"""farm.builder.farmdeps: a farm wheel as another package's build dependency. tests/data/dep_user's
setup.py imports demo_ext while it builds; its recipe names farm's demo_ext wheel of the same cell
in extra_deps. Real builds (nvcc) of both: demo_ext once, then dep_user against its exact bytes
by each builder (native on this host, cibuildwheel in the real podman and image), and the
provenance says so. Which wheel is believed (provenance, the sha256 its fragment or the ledger
records) is a fast test on wheels written here."""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from farm.builder.builders import BuilderKind, BuildSettings, build_cell
from farm.builder.farmdeps import CONTAINER_FARM_DEPS, resolve, stage
from farm.errors import UsageError, WheelError
from farm.fsutil import sha256_file
from farm.model.cells import Cell
from farm.model.config import FarmConfig
from farm.provenance.buildinfo import BuildInfo
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerwrite import FRAGMENT_SUFFIX, write_fragment
from farm.toolkit.assemble import Toolkit

from . import buildroot
from .buildroot import DEMO_RECIPE, REPO, make_root
from .wheelmaker import make_wheel

pypi_toolkit = buildroot.pypi_toolkit

PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
DEMO = Cell("demo_ext", "0.1.0", "13.0", "none", PY, "linux_x86_64")
USER = Cell("dep_user", "1.0.0", "13.0", "none", PY, "linux_x86_64")
USER_RECIPE = """\
name: dep_user
version: '1.0.0'
source:
  path: src/dep_user
links_torch: false
arch:
  list: '8.0'
build:
  extra_deps: ['demo_ext=={version:demo_ext}+{local:demo_ext}']
"""


def _root(root: Path) -> FarmConfig:
    return make_root(root, {"demo_ext": DEMO_RECIPE.format(arch="8.0"), "dep_user": USER_RECIPE},
                     {"examples/demo_ext": REPO / "examples" / "demo_ext",
                      "src/dep_user": REPO / "tests" / "data" / "dep_user"})


def _settings(root: Path, toolkit: Toolkit) -> BuildSettings:
    return BuildSettings(builder=BuilderKind.NATIVE, out_dir=root / "wheelhouse", work_root=root / "work",
                         source_cache=root / "sources", cuda_home=toolkit.cuda_home)


def test_the_placeholder_pins_the_same_cells_wheel(tmp_path) -> None:
    from farm.builder.spec import resolve_spec

    config = _root(tmp_path)
    spec = resolve_spec(config, config.recipe("dep_user"), USER)
    assert spec.farm_deps == ("demo_ext==0.1.0+cu130",)
    assert spec.knobs.extra_deps == spec.farm_deps


def test_a_missing_or_foreign_wheel_stops_the_build_before_anything_is_fetched(tmp_path) -> None:
    config = _root(tmp_path)
    with pytest.raises(UsageError, match=r"builds against farm's demo_ext==0.1.0\+cu130, which is not in") as exc:
        build_cell(config, config.recipe("dep_user"), USER, BuildSettings(
            builder=BuilderKind.NATIVE, out_dir=tmp_path / "wheelhouse", work_root=tmp_path / "work"))
    assert "farm build demo_ext" in (exc.value.hint or "")
    assert not (tmp_path / "work").exists()
    # a wheel of that name that farm did not assert (no provenance) is refused too
    make_wheel(tmp_path / "wheelhouse", "demo_ext", "0.1.0+cu130", {"demo_ext/__init__.py": b""},
               tag=f"{PY}-{PY}-manylinux_2_28_x86_64")
    with pytest.raises(UsageError, match="is not farm's asserted wheel"):
        resolve(("demo_ext==0.1.0+cu130",), USER, tmp_path / "wheelhouse")


def _asserted_demo(wheelhouse: Path) -> Path:
    """A wheel named and stamped as farm's asserted demo_ext of DEMO's cell (its provenance from
    the golden record, the cell set to this one)."""
    record = json.loads((REPO / "tests" / "data" / "provenance" / "asserted-all-keys.build_info.json").read_text())
    record["cell"] = {"cuda": "13.0", "torch": "none", "python": PY, "platform": "linux_x86_64"}
    return make_wheel(wheelhouse, "demo_ext", "0.1.0+cu130",
                      {"demo_ext/__init__.py": b"", "demo_ext-0.1.0+cu130.dist-info/_build_info.json":
                       json.dumps(record).encode()}, tag=f"{PY}-{PY}-manylinux_2_36_x86_64")


def _record(wheel: Path, where: Path) -> Path:
    info = BuildInfo.from_json((REPO / "tests" / "data" / "provenance" / "asserted-all-keys.build_info.json")
                               .read_bytes())
    return write_fragment(info.ledger_entry(filename=wheel.name, sha256=sha256_file(wheel),
                                            size=wheel.stat().st_size), where)


def test_a_farm_wheel_is_believed_only_with_the_sha256_recorded_for_it(tmp_path) -> None:
    """The wheel's bytes must be the ones postbuild recorded: its fragment beside it, or a ledger
    line. Unrecorded, or changed after it was recorded: refused before anything is installed."""
    house = tmp_path / "wheelhouse"
    wheel = _asserted_demo(house)
    with pytest.raises(UsageError, match=r"is not recorded: no .*\.ledger\.json beside it and no ledger line"):
        resolve(("demo_ext==0.1.0+cu130",), USER, house)
    # a ledger line recording it is enough
    ledger_dir = tmp_path / "ledger"
    fragment = _record(wheel, ledger_dir)
    (ledger_dir / "ledger.jsonl").write_bytes(fragment.read_bytes().replace(b"\n", b"") + b"\n")
    ledger = LedgerIndex.load(ledger_dir / "ledger.jsonl")
    (dep,) = resolve(("demo_ext==0.1.0+cu130",), USER, house, ledger=ledger)
    assert dep.sha256 == sha256_file(wheel)
    assert dep.container_reference == (f"demo_ext @ file://{CONTAINER_FARM_DEPS}/{wheel.name}"
                                       f"#sha256={dep.sha256}")
    # the fragment beside it, as postbuild leaves it
    shutil.copyfile(fragment, f"{wheel}{FRAGMENT_SUFFIX}")
    assert resolve(("demo_ext==0.1.0+cu130",), USER, house) == (dep,)
    # the bytes changed after they were recorded (same name, same provenance)
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("demo_ext/extra.py", b"x = 1\n")
    with pytest.raises(WheelError, match=r"is not the wheel farm recorded: its sha256 is [0-9a-f]{64}, .*records "):
        resolve(("demo_ext==0.1.0+cu130",), USER, house)


def test_the_container_gets_checked_copies(tmp_path) -> None:
    house = tmp_path / "wheelhouse"
    wheel = _asserted_demo(house)
    _record(wheel, house)
    deps = resolve(("demo_ext==0.1.0+cu130",), USER, house)
    folder = stage(deps, tmp_path / "work" / "farm-deps")
    assert [p.name for p in folder.iterdir()] == [wheel.name]
    assert sha256_file(folder / wheel.name) == deps[0].sha256
    (folder / "stale.whl").write_bytes(b"")
    assert [p.name for p in stage(deps, folder).iterdir()] == [wheel.name]  # emptied first


def test_the_plan_mounts_the_checked_copies_and_installs_them_by_sha256(tmp_path) -> None:
    """The container plan: the staged folder mounted read-only (as cibuildwheel reads its
    container-engine option) and before-build installing the direct reference to the mounted copy;
    a Windows build (on its host) installs the wheel's own path."""
    from cibuildwheel.oci_container import OCIContainerEngineConfig

    from farm.builder.farmdeps import FarmDep
    from farm.builder.plan import PlanOptions, plan_build

    config = _root(tmp_path)
    staged = tmp_path / "work dir" / "farm-deps"
    dep = FarmDep("demo_ext==0.1.0+cu130", tmp_path / "wheelhouse" / f"demo_ext-0.1.0+cu130-{PY}-{PY}-x.whl", "ab" * 32)
    opts = PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "work", container_engine="podman",
                       farm_deps=(dep,), farm_deps_dir=staged)
    plan = plan_build(config, config.recipe("dep_user"), USER, tmp_path, opts)
    engine = OCIContainerEngineConfig.from_config_string(str(plan.options["container-engine"]))
    assert engine.create_args == ("--volume", f"{staged}:{CONTAINER_FARM_DEPS}:ro")
    assert str(plan.options["before-build"]).endswith(
        f"python -m pip install 'demo_ext @ file://{CONTAINER_FARM_DEPS}/{dep.wheel.name}#sha256={'ab' * 32}'")
    win = Cell("dep_user", "1.0.0", "13.0", "none", PY, "win_amd64")
    wplan = plan_build(config, config.recipe("dep_user"), win, tmp_path,
                       PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "work", host_cuda_home=tmp_path,
                                   farm_deps=(dep,)))
    assert dep.direct_reference in str(wplan.options["before-build"])
    assert "create_args" not in str(wplan.options["container-engine"])


@pytest.fixture(scope="session")
def demo_dep(tmp_path_factory: pytest.TempPathFactory, pypi_toolkit: Toolkit) -> Path:
    """farm's demo_ext wheel of DEMO's cell, built once (native, nvcc) with its ledger fragment."""
    root = tmp_path_factory.mktemp("demo-dep")
    config = _root(root)
    demo = build_cell(config, config.recipe("demo_ext"), DEMO, _settings(root, pypi_toolkit))
    assert demo.passed
    (wheel,) = demo.asserted
    assert Path(f"{wheel}{FRAGMENT_SUFFIX}").is_file()
    return wheel


def _wheelhouse_with(dep: Path, house: Path) -> Path:
    """``house`` holding the dependency and its fragment, as a farm build leaves them."""
    house.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(dep, house / dep.name)
    shutil.copyfile(f"{dep}{FRAGMENT_SUFFIX}", house / f"{dep.name}{FRAGMENT_SUFFIX}")
    return house / dep.name


def _built_against(wheel: Path, demo_wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        info = json.loads(zf.read("dep_user-1.0.0+cu130.dist-info/_build_info.json"))
    assert info["toolchain"]["farm_deps"] == [{"requirement": "demo_ext==0.1.0+cu130", "filename": demo_wheel.name,
                                               "sha256": sha256_file(demo_wheel)}]


def test_a_package_builds_against_farms_own_wheel_of_the_same_cell(tmp_path, pypi_toolkit, demo_dep) -> None:
    config = _root(tmp_path)
    settings = _settings(tmp_path, pypi_toolkit)
    demo_wheel = _wheelhouse_with(demo_dep, settings.out_dir)
    user = build_cell(config, config.recipe("dep_user"), USER, settings)
    assert user.passed, "\n".join(r.report.render() for r in user.postbuild)
    (wheel,) = user.asserted
    _built_against(wheel, demo_wheel)
    # the build environment holds demo_ext's wheel by its bytes: its spec names the file and digest
    assert user.build_env is not None
    env_spec = json.loads((user.build_env / "farm-env.json").read_text())
    assert f"demo_ext @ {demo_wheel.resolve().as_uri()}#sha256={sha256_file(demo_wheel)}" in env_spec["requirements"]
    # and the wheel imports in a fresh venv
    (check,) = user.imports
    assert check.passed


def test_cibuildwheel_builds_against_farms_own_wheel_in_the_container(tmp_path, pypi_toolkit, demo_dep) -> None:
    """The same dependency through cibuildwheel under the real podman and image: the verified copy
    of demo_ext's wheel is mounted read-only and installed by its sha256 inside the container,
    where dep_user's setup.py imports it; the provenance records it as the native build does."""
    from .test_builders import podman_image

    image = podman_image()
    config = _root(tmp_path)
    assert pypi_toolkit.prefix is not None
    settings = BuildSettings(engine="podman", images={"x86_64": image}, out_dir=tmp_path / "wheelhouse",
                             work_root=tmp_path / "work", source_cache=tmp_path / "sources",
                             toolkit_root=pypi_toolkit.prefix.parents[1])
    demo_wheel = _wheelhouse_with(demo_dep, settings.out_dir)
    user = build_cell(config, config.recipe("dep_user"), USER, settings)
    assert user.passed, "\n".join(r.report.render() for r in user.postbuild)
    (wheel,) = user.asserted
    _built_against(wheel, demo_wheel)
    digest = sha256_file(demo_wheel)
    staged = tmp_path / "work" / USER.id / "farm-deps"
    assert [p.name for p in staged.iterdir()] == [demo_wheel.name]
    engine = str(user.plan.options["container-engine"])
    assert f"--volume {staged}:{CONTAINER_FARM_DEPS}:ro" in engine
    assert (f"'demo_ext @ file://{CONTAINER_FARM_DEPS}/{demo_wheel.name}#sha256={digest}'"
            in str(user.plan.options["before-build"]))
    with zipfile.ZipFile(wheel) as zf:
        info = json.loads(zf.read("dep_user-1.0.0+cu130.dist-info/_build_info.json"))
    assert info["toolchain"]["builder"] == "cibuildwheel"
