"""YAML loading at the trust boundary: a recipe comes from a pull request, so a hostile one must
fail fast, small and with its line, never expand an alias bomb or print the expanded value."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.load.recipes import load_config
from farm.model.yamlsrc import MAX_ALIASES, load_yaml

REPO = Path(__file__).resolve().parent.parent


def bomb(levels: int = 9, width: int = 9) -> str:
    """The "billion laughs": each level aliases the previous one ``width`` times (551 bytes for
    9 x 9, i.e. 9**9 = 387 million strings when expanded)."""
    lines = ["name: pkg", "version: '1.0'", "source:", "  git: {repo: owner/pkg, ref: v1.0}", "links_torch: false",
             "lol: &a0 [" + ",".join(['"lol"'] * width) + "]"]
    lines += [f"l{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    lines += ["build:", "  env:", f"    X: *a{levels}"]
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_by_the_command_in_bounded_time_memory_and_output(tmp_path: Path) -> None:
    shutil.copy(REPO / "_defaults.yml", tmp_path / "_defaults.yml")
    (tmp_path / "packages").mkdir()
    recipe = tmp_path / "packages" / "pkg.yml"
    recipe.write_text(bomb())
    # The command runs under a fresh parent that reports its one child's peak: this process's own
    # RUSAGE_CHILDREN holds the largest child of the whole test session (nvcc, cuobjdump, ...).
    measure = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(rc)")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "farm.cli", "matrix", "pkg",
                           "--root", str(tmp_path)], capture_output=True, text=True, timeout=120, check=False)
    elapsed = time.monotonic() - start
    peak_kib = int(proc.stderr.rstrip().rsplit("\n", 1)[-1])  # Linux: KiB
    proc.stderr = proc.stderr.rstrip().rsplit("\n", 1)[0]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "packages/pkg.yml:" in proc.stderr
    assert "aliases expand to more than" in proc.stderr
    assert len(proc.stdout) + len(proc.stderr) < 2000
    # The unbounded run took minutes and 8 GB; the refusal is a parse of 600 bytes.
    assert elapsed < 20, elapsed
    assert peak_kib < 400 * 1024, peak_kib


def test_alias_line_is_where_the_bound_is_crossed(tmp_path: Path) -> None:
    path = tmp_path / "x.yml"
    path.write_text(bomb())
    with pytest.raises(ConfigError) as exc:
        load_yaml(path)
    assert exc.value.where is not None
    assert exc.value.where.startswith(f"{path}:")
    assert int(exc.value.where.rsplit(":", 1)[1]) > 6  # an alias line, not the top of the file


def test_alias_count_and_recursion_are_refused(tmp_path: Path) -> None:
    many = tmp_path / "many.yml"
    many.write_text("a: &a x\nb: [" + ",".join(["*a"] * (MAX_ALIASES + 1)) + "]\n")
    with pytest.raises(ConfigError, match=f"more than {MAX_ALIASES} aliases"):
        load_yaml(many)
    rec = tmp_path / "rec.yml"
    rec.write_text("a: &a\n  - 1\n  - *a\n")
    with pytest.raises(ConfigError, match="inside its own anchor") as exc:
        load_yaml(rec)
    assert exc.value.where == f"{rec}:3"


def test_small_aliases_and_merge_keys_load_as_yaml_defines_them(tmp_path: Path) -> None:
    path = tmp_path / "m.yml"
    path.write_text(textwrap.dedent("""
        base: &base
          x: 1
          y: 2
        more: &more
          y: 20
          z: 30
        top:
          <<: [*base, *more]
          y: 3
        list: [*base, *base]
    """).lstrip())
    data, _ = load_yaml(path)
    # explicit keys override merged ones; among merged maps the first wins
    assert data["top"] == {"x": 1, "y": 3, "z": 30}
    assert data["top"].line_of("y") == 9
    assert data["top"].line_of("x") == 8
    assert data["list"] == [{"x": 1, "y": 2}] * 2


def test_duplicate_own_keys_still_refused_next_to_a_merge(tmp_path: Path) -> None:
    path = tmp_path / "d.yml"
    path.write_text("base: &b {x: 1}\ntop:\n  <<: *b\n  y: 1\n  y: 2\n")
    with pytest.raises(ConfigError, match="duplicate key 'y'"):
        load_yaml(path)


def test_hints_never_print_a_huge_value(tmp_path: Path) -> None:
    shutil.copy(REPO / "_defaults.yml", tmp_path / "_defaults.yml")
    (tmp_path / "packages").mkdir()
    big = "[" + ",".join(str(i) for i in range(20000)) + "]"
    (tmp_path / "packages" / "pkg.yml").write_text(
        "name: pkg\nversion: '1.0'\nsource:\n  git: {repo: owner/pkg, ref: v1.0}\nlinks_torch: false\n"
        f"build:\n  env:\n    X: {big}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path).recipe("pkg")
    assert len(str(exc.value)) < 600
