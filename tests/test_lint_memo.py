"""`farm lint`'s remembered answers: used only while every file is as it was, never stale."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from farm.cli import main

DATA = Path(__file__).parent / "data" / "lint"
GATE = "csrc/qattn/qk_int_sv_f8_cuda_sm89.cu"
LIST = "8.0;8.6;9.0+PTX"
REPO = Path(__file__).resolve().parent.parent


def aged(tree: Path) -> Path:
    """Every file of ``tree`` last modified a minute ago: old enough for its timestamp to be trusted."""
    past = time.time() - 60
    for path in tree.rglob("*"):
        os.utime(path, (past, past))
    return tree


def farm(*argv: str, cwd: Path) -> tuple[int, str, bool]:
    """`farm ARGV` in a fresh process: exit code, stdout, and whether the rules were imported."""
    code = ("import sys\nfrom farm.cli import main\nrc = main(sys.argv[1:])\n"
            "print('RULES-IMPORTED' if 'farm.lint.rules' in sys.modules else 'RULES-NOT-IMPORTED')\nsys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    out, _, marker = proc.stdout.rstrip("\n").rpartition("\n")
    return proc.returncode, out, marker == "RULES-IMPORTED"


def test_directory_answer_is_remembered_and_an_edit_of_one_file_invalidates_it(tmp_path: Path) -> None:
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    argv = ("lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "cache"))
    cold = farm(*argv, cwd=tmp_path)
    assert cold[0] == 1 and cold[2] and f"{GATE}:7" in cold[1]
    warm = farm(*argv, cwd=tmp_path)
    assert warm == (cold[0], cold[1], False)  # the same answer, without the rules

    # one file edited in place, same size: the gate now covers every declared arch
    gate = src / GATE
    text = gate.read_text()
    gate.write_text(text.replace(">= 890", ">= 800"))
    assert len(gate.read_text()) == len(text)
    after = farm(*argv, cwd=tmp_path)
    fresh = farm("lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "fresh"), cwd=tmp_path)
    assert after[2]  # recomputed
    assert after[:2] == fresh[:2] != cold[:2]
    assert f"{GATE}:7" not in after[1]


def test_added_and_removed_files_invalidate_it(tmp_path: Path) -> None:
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    argv = ("lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "cache"), "--json")
    assert farm(*argv, cwd=tmp_path)[2]
    assert not farm(*argv, cwd=tmp_path)[2]
    (src / GATE).unlink()
    code, out, recomputed = farm(*argv, cwd=tmp_path)
    assert recomputed and code == 0 and json.loads(out)["passed"] is True


def test_files_too_fresh_to_trust_are_not_remembered(tmp_path: Path, capsys) -> None:
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    os.utime(src / GATE)  # one file modified just now
    cache = tmp_path / "cache"
    assert main(["lint", str(src), "--arch-list", LIST, "--cache-dir", str(cache)]) == 1
    assert not list(cache.rglob("cmd-*.json"))
    capsys.readouterr()


def test_package_answer_is_remembered_until_its_recipe_changes(tmp_path: Path) -> None:
    root = tmp_path / "farm"
    (root / "packages").mkdir(parents=True)
    shutil.copy(REPO / "_defaults.yml", root / "_defaults.yml")
    shutil.copytree(DATA / "sage_fp8", root / "src" / "sage")
    recipe = root / "packages" / "sage.yml"
    recipe.write_text("name: sage\nversion: '1.0'\nsource: {path: src/sage}\nlinks_torch: true\n"
                      "arch:\n  list: '8.0;8.6;9.0+PTX'\n")
    aged(root)
    cold = farm("lint", "sage", "--root", str(root), cwd=root)
    assert cold[0] == 1 and cold[2]
    assert farm("lint", "sage", "--root", str(root), cwd=root) == (cold[0], cold[1], False)
    recipe.write_text(recipe.read_text().replace("'8.0;8.6;9.0+PTX'", "'8.0;8.6;8.9;9.0+PTX'"))
    code, out, recomputed = farm("lint", "sage", "--root", str(root), cwd=root)
    assert recomputed and code == 0 and "PASSED" in out
