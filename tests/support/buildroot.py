"""A farm repository in a temporary folder, for build tests: the real ``_defaults.yml``, the
recipes a test writes, and copies of the source trees they build (symlinks resolved, so a
tree is self-contained as in a real checkout)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import pytest

from farm.builder.plan import BuildPlan, PlanOptions, plan_build
from farm.builder.spec import resolve_spec
from farm.load.defaults import load_defaults
from farm.load.recipes import load_config
from farm.model.arch import ArchList
from farm.model.archrequest import ArchRequest
from farm.model.cells import Cell
from farm.model.config import FarmConfig, Recipe
from farm.toolkit.assemble import Toolkit, ensure_toolkit, toolkit_prefix
from farm.toolkit.request import request_for

REPO = Path(__file__).resolve().parents[2]


def make_root(root: Path, recipes: Mapping[str, str], trees: Mapping[str, Path] | None = None) -> FarmConfig:
    """``recipes``: name -> YAML text; ``trees``: path in the root -> source folder to copy."""
    (root / "packages").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "_defaults.yml", root / "_defaults.yml")
    (root / "ledger.jsonl").touch()
    for name, text in recipes.items():
        (root / "packages" / f"{name}.yml").write_text(text)
    for dest, src in (trees or {}).items():
        target = root / dest
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(src, target, symlinks=False, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return load_config(root)


DEMO_RECIPE = """\
name: demo_ext
version: '0.1.0'
source:
  path: examples/demo_ext
links_torch: false
arch:
  list: '{arch}'
"""

# tests/data/torch_ext (and its override twin): a real torch extension, from its folder src/<name>
TORCH_EXT_RECIPE = """\
name: {name}
version: '0.1.0'
source:
  path: src/{name}
links_torch: true
arch:
  list: '{arch}'
"""

# tests/data/dep_user: a package whose setup.py imports demo_ext, built against farm's demo_ext wheel
DEP_USER_RECIPE = """\
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


def dep_user_root(root: Path) -> FarmConfig:
    """A farm root with demo_ext (8.0) and dep_user, which build-depends on demo_ext's wheel."""
    return make_root(root, {"demo_ext": DEMO_RECIPE.format(arch="8.0"), "dep_user": DEP_USER_RECIPE},
                     {"examples/demo_ext": REPO / "examples" / "demo_ext",
                      "src/dep_user": REPO / "tests" / "data" / "dep_user"})


def plan_from_config(config: FarmConfig, recipe: Recipe, cell: Cell, source_root: Path, options: PlanOptions, *,
                     archs: ArchList | None = None) -> BuildPlan:
    """``cell``'s plan as the builder makes it: its spec resolved from ``config`` (``archs``: a given
    list in place of the recipe's), then the plan from that spec."""
    spec = resolve_spec(config, recipe, cell, arch=ArchRequest.given(archs) if archs is not None else None)
    return plan_build(recipe, cell, source_root, options, spec=spec)


@pytest.fixture(scope="session")
def pypi_toolkit(tmp_path_factory: pytest.TempPathFactory) -> Toolkit:
    """CUDA 13.0 for a torch-free cell, assembled from NVIDIA's PyPI wheels once per test session,
    where ``farm build --cache-dir`` looks for it (see :func:`cache_dir_of`)."""
    request = request_for(load_defaults(REPO / "_defaults.yml").toolkit, "13.0")
    return ensure_toolkit(request, toolkit_prefix(tmp_path_factory.mktemp("farmcache") / "toolkit", request))


def cache_dir_of(toolkit: Toolkit) -> Path:
    """The ``--cache-dir`` that holds ``toolkit`` (its prefix is ``<cache>/toolkit/<line>/<slug>``)."""
    assert toolkit.prefix is not None
    return toolkit.prefix.parents[2]
