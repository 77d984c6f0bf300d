from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from farm.load.recipes import load_config
from farm.model.cells import (
    NO_TORCH,
    Cell,
    Resolution,
    declared_cells,
    is_phantom_key,
    local_version,
    planned_wheel_name,
    recipe_excludes,
    resolve_arch,
)
from farm.model.config import FarmConfig
from tests.support.buildroot import make_root


@pytest.fixture
def config(tmp_path: Path) -> FarmConfig:
    return make_root(tmp_path, {"pkg": textwrap.dedent("""
        name: pkg
        version: '1.0'
        source: {git: {repo: owner/pkg, ref: v1.0}}
        links_torch: true
        min_torch: '2.6'
        arch:
          list: '8.0;9.0+PTX'
          by_cuda: {'12.9': '8.0;8.9;9.0+PTX'}
          by_combo: {'12.8/2.8': '7.5;8.0;9.0+PTX'}
          aarch64:
            by_cuda: {'13.0': '9.0;11.0+PTX'}
        """), "free": textwrap.dedent("""
        name: free
        version: '2.0'
        source: {git: {repo: owner/free, ref: v2.0}}
        links_torch: false
        """)})


def test_declared_cells_cover_grid(config) -> None:
    cells = list(declared_cells(config.defaults, config.recipe("pkg")))
    assert len(cells) == len(set(cells))
    # the grid's Pythons, 3.10 to 3.15 (3.15 with the torch 2.13 and 2.14 rows), as upstream ships them
    assert {c.python for c in cells} == {"cp310", "cp311", "cp312", "cp313", "cp314", "cp315"}
    assert {c.torch for c in cells if c.python == "cp315"} == {"2.13", "2.14"}
    assert Cell("pkg", "1.0", "12.8", "2.8", "cp311", "win_amd64") in cells


def test_python_range_limits_the_grid(config, tmp_path: Path) -> None:
    path = tmp_path / "_defaults.yml"
    path.write_text(path.read_text().replace("python: {min: '3.10', max: '3.15'}", "python: {min: '3.11', max: '3.14'}"))
    narrowed = load_config(tmp_path)
    cells = list(declared_cells(narrowed.defaults, narrowed.recipe("pkg")))
    assert {c.python for c in cells} == {"cp311", "cp312", "cp313", "cp314"}


def test_torch_free_packages_collapse_the_torch_axis(config) -> None:
    cells = list(declared_cells(config.defaults, config.recipe("free")))
    assert {c.torch for c in cells} == {NO_TORCH}
    assert len(cells) == len({(c.cuda, c.python, c.platform) for c in cells})
    c = cells[0]
    assert not is_phantom_key(config.defaults, c.cuda, c.torch, c.python_version, c.platform)


def test_phantoms_and_restrictions(config) -> None:
    d = config.defaults
    assert is_phantom_key(d, "12.9", "2.10", "3.12", "win_amd64")
    assert not is_phantom_key(d, "12.9", "2.10", "3.12", "linux_x86_64")
    recipe = config.recipe("pkg")
    assert recipe_excludes(recipe, Cell("pkg", "1.0", "12.4", "2.5", "cp311", "linux_x86_64")) == "min_torch 2.6"
    assert recipe_excludes(recipe, Cell("pkg", "1.0", "12.4", "2.6", "cp311", "linux_x86_64")) is None


def test_resolution_order(config) -> None:
    recipe = config.recipe("pkg")

    def resolved(cuda: str, torch: str, platform: str = "linux_x86_64") -> Resolution:
        found = resolve_arch(config, recipe, Cell("pkg", "1.0", cuda, torch, "cp311", platform))
        assert found is not None, (cuda, torch, platform)
        return found

    assert resolved("12.8", "2.8").archs.canonical() == "sm_75;sm_80;sm_90;compute_90"
    assert "by_combo" in resolved("12.8", "2.8").origin
    assert resolved("12.9", "2.8").archs.canonical() == "sm_80;sm_89;sm_90;compute_90"
    assert resolved("13.0", "2.9").origin == "recipe arch.list"
    # aarch64: the platform block first, then the package-wide rules, by the same code
    assert resolved("13.0", "2.9", "linux_aarch64").archs.canonical() == "sm_90;sm_110;compute_110"
    assert resolved("12.8", "2.8", "linux_aarch64").origin == "recipe arch.by_combo['12.8/2.8']"
    # no aarch64 policy row for 12.4: no cell, whatever the recipe says
    assert resolve_arch(config, recipe, Cell("pkg", "1.0", "12.4", "2.6", "cp311", "linux_aarch64")) is None


def _known(found: Resolution | None) -> Resolution:
    assert found is not None
    return found


def test_policy_and_exceptions(config) -> None:
    free = config.recipe("free")
    cell = Cell("free", "2.0", "13.0", NO_TORCH, "cp311", "linux_x86_64")
    assert _known(resolve_arch(config, free, cell)).origin == "policy x86_64 13.0"
    torch_cell = Cell("free", "2.0", "12.8", "2.8", "cp311", "linux_x86_64")
    assert _known(resolve_arch(config, free, torch_cell)).origin == "policy exception x86_64 12.8/2.8"
    assert _known(resolve_arch(config, free, torch_cell)).archs.names()[0] == "sm_70"


def test_names(config) -> None:
    recipe = config.recipe("pkg")
    cell = Cell("pkg", "1.0", "12.8", "2.8", "cp311", "linux_x86_64")
    assert local_version(cell) == "cu128torch2.8"
    assert planned_wheel_name(recipe, cell, 0) == "pkg-1.0+cu128torch2.8-cp311-cp311-linux_x86_64.whl"
    assert planned_wheel_name(recipe, cell, 1) == "pkg-1.0+cu128torch2.8-1-cp311-cp311-linux_x86_64.whl"
    free = Cell("free", "2.0", "13.0", NO_TORCH, "cp312", "win_amd64")
    assert local_version(free) == "cu130"
    assert free.id == "free-2.0-cu130-notorch-cp312-win_amd64"
    assert free.python_version == "3.12"


def test_only_restrictions(tmp_path: Path) -> None:
    config = make_root(tmp_path, {"narrow": textwrap.dedent("""
        name: narrow
        version: '1.0'
        source: {git: {repo: owner/narrow, ref: v1.0}}
        links_torch: true
        only:
          platforms: [linux_x86_64, linux_aarch64]
          combinations:
            - {cuda: '12.8', torch: '2.8', python: ['3.10', '3.11']}
            - {cuda: '13.0'}
        """)})
    recipe = config.recipe("narrow")

    def why(cuda: str, torch: str, py: str, platform: str = "linux_x86_64") -> str | None:
        return recipe_excludes(recipe, Cell("narrow", "1.0", cuda, torch, py, platform))

    assert why("12.8", "2.8", "cp311") is None
    assert why("12.8", "2.8", "cp312") == "only.combinations"
    assert why("12.8", "2.9", "cp311") == "only.combinations"
    assert why("13.0", "2.11", "cp314") is None
    assert why("12.9", "2.8", "cp311") == "only.combinations"
    assert why("13.0", "2.11", "cp311", "win_amd64") == "only.platforms"
