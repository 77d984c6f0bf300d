"""farm.builder.farmdeps: a farm wheel as another package's build dependency. tests/data/dep_user's
setup.py imports demo_ext while it builds; its recipe names farm's demo_ext wheel of the same cell
in extra_deps. Real builds (nvcc) of both, one wheelhouse: the second is built against the
first's exact bytes, and its provenance says so."""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from farm.builder.builders import BuilderKind, BuildResult, BuildSettings, build_cell
from farm.builder.farmdeps import resolve
from farm.errors import UsageError
from farm.fsutil import sha256_file
from farm.model.cells import Cell
from farm.provenance.ledgerwrite import fragment_path
from tests.support.buildroot import dep_user_root
from tests.support.wheelmaker import make_wheel

PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
DEMO = Cell("demo_ext", "0.1.0", "13.0", "none", PY, "linux_x86_64")
USER = Cell("dep_user", "1.0.0", "13.0", "none", PY, "linux_x86_64")


def _settings(root: Path, toolkit) -> BuildSettings:
    return BuildSettings(builder=BuilderKind.NATIVE, out_dir=root / "wheelhouse", work_root=root / "work",
                         source_cache=root / "sources", cuda_home=toolkit.cuda_home)


def test_the_placeholder_pins_the_same_cells_wheel(tmp_path) -> None:
    from farm.builder.spec import resolve_spec

    config = dep_user_root(tmp_path)
    spec = resolve_spec(config, config.recipe("dep_user"), USER)
    assert spec.farm_deps == ("demo_ext==0.1.0+cu130",)
    assert spec.knobs.extra_deps == spec.farm_deps


def test_a_missing_or_foreign_wheel_stops_the_build_before_anything_is_fetched(tmp_path) -> None:
    config = dep_user_root(tmp_path)
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
    # the cibuildwheel builder resolves it the same way: the same refusal, before anything is fetched
    with pytest.raises(UsageError, match="is not farm's asserted wheel"):
        build_cell(config, config.recipe("dep_user"), USER, BuildSettings(out_dir=tmp_path / "wheelhouse"))


@dataclass(frozen=True)
class Built:
    root: Path
    demo: BuildResult
    user: BuildResult


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, pypi_toolkit) -> Built:
    """demo_ext, then dep_user against it, built once into one wheelhouse (real nvcc builds)."""
    root = tmp_path_factory.mktemp("farmdeps")
    config = dep_user_root(root)
    settings = _settings(root, pypi_toolkit)
    demo = build_cell(config, config.recipe("demo_ext"), DEMO, settings)
    assert demo.passed
    user = build_cell(config, config.recipe("dep_user"), USER, settings)
    assert user.passed, "\n".join(r.report.render() for r in user.postbuild)
    return Built(root, demo, user)


def test_a_package_builds_against_farms_own_wheel_of_the_same_cell(built: Built) -> None:
    (demo_wheel,) = built.demo.asserted
    (wheel,) = built.user.asserted
    with zipfile.ZipFile(wheel) as zf:
        info = json.loads(zf.read("dep_user-1.0.0+cu130.dist-info/_build_info.json"))
    assert info["toolchain"]["farm_deps"] == [{"requirement": "demo_ext==0.1.0+cu130", "filename": demo_wheel.name,
                                               "sha256": sha256_file(demo_wheel)}]
    # the build environment holds demo_ext's wheel by its bytes: its spec names the file and digest
    assert built.user.build_env is not None
    env_spec = json.loads((built.user.build_env / "farm-env.json").read_text())
    assert f"demo_ext @ {demo_wheel.resolve().as_uri()}#sha256={sha256_file(demo_wheel)}" in env_spec["requirements"]
    # and the wheel imports in a fresh venv
    (check,) = built.user.imports
    assert check.passed


def _copy(wheel: Path, into: Path, *, fragment: bool = True) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    shutil.copy(wheel, into / wheel.name)
    if fragment:
        shutil.copy(fragment_path(wheel.parent, wheel.name), fragment_path(into, wheel.name))
    return into / wheel.name


def test_a_wheelhouse_wheel_is_used_only_when_its_fragment_vouches_for_its_bytes(built: Built, tmp_path) -> None:
    """A wheelhouse is a folder that crossed a job boundary: the dependency is judged as the upload
    gate judges a wheel before a byte of it is installed."""
    (demo_wheel,) = built.demo.asserted
    (dep,) = resolve(("demo_ext==0.1.0+cu130",), USER, demo_wheel.parent)
    assert dep.sha256 == sha256_file(demo_wheel)
    # no fragment beside it: nothing vouches for the bytes
    bare = _copy(demo_wheel, tmp_path / "bare", fragment=False)
    with pytest.raises(UsageError, match="has no ledger fragment beside it") as exc:
        resolve(("demo_ext==0.1.0+cu130",), USER, bare.parent)
    assert exc.value.where == str(bare)
    # the same name, other bytes (a member added after postbuild): its fragment holds another sha256
    changed = _copy(demo_wheel, tmp_path / "changed")
    with zipfile.ZipFile(changed, "a") as zf:
        zf.writestr("demo_ext/extra.py", "x = 1\n")
    with pytest.raises(UsageError, match="is not the wheel farm asserted: the ledger records") as exc:
        resolve(("demo_ext==0.1.0+cu130",), USER, changed.parent)
    assert sha256_file(demo_wheel) in exc.value.message
    # a fragment that is not one
    broken = _copy(demo_wheel, tmp_path / "broken")
    fragment_path(broken.parent, broken.name).write_text("{not json")
    with pytest.raises(UsageError, match="is not a readable ledger fragment"):
        resolve(("demo_ext==0.1.0+cu130",), USER, broken.parent)
