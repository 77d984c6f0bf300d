"""The source as it is built: a private copy of the fetched tree with the recipe's patch scripts
applied (:func:`prepare_source`), and the arch-gate lint of exactly that source
(:func:`lint_as_built`), which ``farm lint``, the matrix and ``farm build`` run. Light on purpose:
the lint's cold path imports it without the builders."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from farm.errors import ConfigError, redact
from farm.fsutil import remove, sha256_file
from farm.lint.api import LintReport, lint_cached
from farm.model.arch import ArchList
from farm.model.config import BuildKnobs, FarmConfig, Recipe
from farm.source.fetch import COPY_IGNORED, SourceTree

Log = Callable[[str], None]


def build_log(log: Log | None) -> Log:
    """Where a build says what it does: the caller's log, else stderr."""
    return log or (lambda msg: print(f"farm build: {msg}", file=sys.stderr, flush=True))


def prepare_source(tree_root: Path, recipe: Recipe, config_root: Path, work_dir: Path, *,
                   log: Log | None = None, knobs: BuildKnobs | None = None, platform: str | None = None) -> Path:
    """A private copy of the checkout with the recipe's patch scripts applied; returns its root.
    ``knobs``: the build spec's (``farm build``); else the recipe's own ``subdir`` and scripts.
    ``platform``: the cell's, whose ``platform_patch_script`` (if any) runs after ``patch_script``.

    A patch script (a Python file in the farm repository) runs in the build folder
    (``build.subdir`` or the root); when the build folder is what the first patch makes (a package
    upstream never laid out for building, nvdiffrec_render), that one runs in the root and the
    folder must exist afterwards. Patch scripts must be idempotent; the copy is fresh anyway, so the
    cached checkout is never changed.
    """
    say = build_log(log)
    src = Path(work_dir) / "src"
    remove(src)  # a link left there is removed, never what it names
    shutil.copytree(tree_root, src, symlinks=True,
                    ignore=shutil.ignore_patterns(*COPY_IGNORED))
    knobs = knobs or recipe.build
    subdir = knobs.subdir
    build_dir = src / subdir if subdir else src
    scripts = knobs.patch_scripts(platform)
    made_by_patch = bool(scripts) and not build_dir.exists()
    if not build_dir.is_dir() and not made_by_patch:
        raise ConfigError(f"build.subdir {subdir!r} is not a folder of the source", where=recipe.display,
                          hint="fix build.subdir to the folder that holds setup.py / pyproject.toml")
    for script in scripts:
        path = patch_path(config_root, recipe, script)
        say(f"{recipe.name}: patching with {script}")
        in_root = made_by_patch and not build_dir.is_dir()
        proc = subprocess.run([sys.executable, str(path)], cwd=src if in_root else build_dir,
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ConfigError(f"patch_script {script} failed (rc {proc.returncode}): "
                              f"{(proc.stderr or proc.stdout).strip()[-1500:]}", where=recipe.display)
        for line in redact(proc.stdout.strip()).splitlines():
            say(f"  {line}")
        if in_root and not build_dir.is_dir():
            raise ConfigError(f"build.subdir {subdir!r} is not in the source, and patch_script {script} (run in "
                              "the source's root, as the folder is missing) did not make it", where=recipe.display,
                              hint="fix build.subdir, or make the patch script create that folder")
    return src


def patch_path(config_root: Path, recipe: Recipe, script: str) -> Path:
    """A recipe's patch script as a file of the farm repository; a missing one is a config error."""
    path = (config_root / script).resolve()
    if not path.is_file():
        raise ConfigError(f"patch_script {script!r} does not exist", where=recipe.display,
                          hint=f"add the script under {config_root} or fix the path")
    return path


def lint_as_built(config: FarmConfig, recipe: Recipe, tree: SourceTree, archs: ArchList, cache_dir: Path, *,
                  prepared: Path | None = None, knobs: BuildKnobs | None = None,
                  extensions: tuple[tuple[str, ArchList], ...] = (),
                  cuda: str | None = None, platform: str | None = None) -> LintReport:
    """The lint of exactly the source that is built: the fetched tree after the recipe's patch
    scripts for ``platform`` (cached by the tree's identity and the scripts' digests). ``prepared``:
    a patched copy the caller already made (``farm build``); otherwise a temporary one is made
    on a cache miss. A ``lint_ignore`` that matches nothing in the patched source is stale.
    ``cuda``: the cell's CUDA line, used for a recipe with ``kernel_families``."""
    knobs = knobs or recipe.build
    paths = [patch_path(config.root, recipe, script) for script in knobs.patch_scripts(platform)]
    # the scripts and the shared helpers beside them (packages/patches/_*.py) they may import
    helpers = sorted({h for path in paths for h in path.parent.glob("_*.py")})
    variant = f"patch:{':'.join(sha256_file(p) for p in (*paths, *helpers))}" if paths else ""
    with tempfile.TemporaryDirectory(prefix="farm-lint-") as tmp:
        def prepare() -> Path:
            return prepared if prepared is not None else prepare_source(
                tree.root, recipe, config.root, Path(tmp), log=lambda _: None, knobs=knobs, platform=platform)
        return lint_cached(tree, archs, recipe.lint_ignore, cache_dir, build_subdir=knobs.subdir,
                           prepare=prepare if paths else None, variant=variant, extensions=extensions,
                           cuda=cuda if recipe.kernel_families else None, families=recipe.families)
