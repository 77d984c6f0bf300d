"""`farm lint`'s remembered answers: used only while every file is as it was, never stale."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from farm.cli import main
from farm.lint.memo import RACY_NS
from farm.lint.version import RULES_VERSION
from farm.schedule import packagelint

DATA = Path(__file__).parent / "data" / "lint"
GATE = "csrc/qattn/qk_int_sv_f8_cuda_sm89.cu"
LIST = "8.0;8.6;9.0+PTX"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="module")
def farm_code_old_enough() -> None:
    """farm's own modules are inputs of every remembered answer, and no answer is remembered while
    an input is younger than RACY_NS: right after an edit, a checkout or a merge, wait that out."""
    newest = max(path.stat().st_mtime_ns for path in (REPO / "farm").rglob("*.py"))
    wait = (newest + RACY_NS - time.time_ns()) / 1e9
    if wait > 0:
        time.sleep(wait + 0.05)


def aged(tree: Path) -> Path:
    """Every file of ``tree`` last modified a minute ago: old enough for its timestamp to be trusted."""
    past = time.time() - 60
    for path in [*tree.rglob("*"), tree]:
        os.utime(path, (past, past))
    return tree


Farm = Callable[..., tuple[int, str, bool]]


@pytest.fixture
def farm(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Farm:
    """``farm(*ARGV, cwd=DIR)``: `farm ARGV` run in DIR: exit code, stdout, and whether the answer
    was computed (the lint ran) rather than remembered."""
    computed: list[object] = []
    lint = packagelint.lint

    def counted(*args: Any) -> tuple[int, str, str]:
        computed.append(args)
        return lint(*args)

    monkeypatch.setattr(packagelint, "lint", counted)

    def run(*argv: str, cwd: Path) -> tuple[int, str, bool]:
        monkeypatch.chdir(cwd)
        before = len(computed)
        code = main(list(argv))
        return code, capsys.readouterr().out.rstrip("\n"), len(computed) > before

    return run


def farm_process(*argv: str, cwd: Path, package: Path) -> tuple[int, str, bool]:
    """`farm ARGV` in a fresh process with farm imported from ``package``: exit code, stdout, and
    whether the rules were imported."""
    code = ("import sys\nfrom farm.cli import main\nrc = main(sys.argv[1:])\n"
            "print('RULES-IMPORTED' if 'farm.lint.rules' in sys.modules else 'RULES-NOT-IMPORTED')\nsys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(package)}, check=False)
    out, _, marker = proc.stdout.rstrip("\n").rpartition("\n")
    return proc.returncode, out, marker == "RULES-IMPORTED"


def test_directory_answer_is_remembered_and_an_edit_of_one_file_invalidates_it(tmp_path: Path, farm: Farm) -> None:
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    argv = ("lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "cache"))
    cold = farm(*argv, cwd=tmp_path)
    assert cold[0] == 1
    assert cold[2]
    assert f"{GATE}:7" in cold[1]
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


def test_added_and_removed_files_invalidate_it(tmp_path: Path, farm: Farm) -> None:
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    argv = ("lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "cache"), "--json")
    assert farm(*argv, cwd=tmp_path)[2]
    assert not farm(*argv, cwd=tmp_path)[2]
    (src / GATE).unlink()
    code, out, recomputed = farm(*argv, cwd=tmp_path)
    assert recomputed
    assert code == 0
    assert json.loads(out)["passed"] is True


def test_files_too_fresh_to_trust_are_not_remembered(tmp_path: Path, capsys) -> None:
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    os.utime(src / GATE)  # one file modified just now
    cache = tmp_path / "cache"
    assert main(["lint", str(src), "--arch-list", LIST, "--cache-dir", str(cache)]) == 1
    assert not list(cache.rglob("cmd-*"))
    capsys.readouterr()


def test_package_answer_is_remembered_until_its_recipe_changes(tmp_path: Path, farm: Farm) -> None:
    root = tmp_path / "farm"
    (root / "packages").mkdir(parents=True)
    shutil.copy(REPO / "_defaults.yml", root / "_defaults.yml")
    shutil.copytree(DATA / "sage_fp8", root / "src" / "sage")
    recipe = root / "packages" / "sage.yml"
    recipe.write_text("name: sage\nversion: '1.0'\nsource: {path: src/sage}\nlinks_torch: true\n"
                      "arch:\n  list: '8.0;8.6;9.0+PTX'\n")
    aged(root)
    cold = farm("lint", "sage", "--root", str(root), cwd=root)
    assert cold[0] == 1
    assert cold[2]
    assert farm("lint", "sage", "--root", str(root), cwd=root) == (cold[0], cold[1], False)
    recipe.write_text(recipe.read_text().replace("'8.0;8.6;9.0+PTX'", "'8.0;8.6;8.9;9.0+PTX'"))
    code, out, recomputed = farm("lint", "sage", "--root", str(root), cwd=root)
    assert recomputed
    assert code == 0
    assert "PASSED" in out


def scope(out: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(out)["reports"][0]["scope"]
    return found


def test_a_new_file_anywhere_is_a_miss(tmp_path: Path, farm: Farm) -> None:
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    argv = ("lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "cache"), "--json")
    cold = farm(*argv, cwd=tmp_path)
    assert cold[2]
    assert not farm(*argv, cwd=tmp_path)[2]
    # a header nothing includes, in a new directory two levels down: the lint counts it
    (src / "csrc" / "qattn" / "extra").mkdir()
    (src / "csrc" / "qattn" / "extra" / "unused.h").write_text("// not included\n")
    code, out, recomputed = farm(*argv, cwd=tmp_path)
    assert recomputed
    assert code == cold[0]
    assert scope(out)["files_total"] == scope(cold[1])["files_total"] + 1

    aged(src)
    assert farm(*argv, cwd=tmp_path)[2]  # remembered again once old enough to trust
    assert not farm(*argv, cwd=tmp_path)[2]
    (src / "csrc" / "qattn" / "extra" / "more.h").write_text("// in a directory that is new since the first run\n")
    code, out, recomputed = farm(*argv, cwd=tmp_path)
    assert recomputed
    assert scope(out)["files_total"] == scope(cold[1])["files_total"] + 2


def test_a_renamed_file_is_a_miss(tmp_path: Path, farm: Farm) -> None:
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    argv = ("lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "cache"))
    cold = farm(*argv, cwd=tmp_path)
    assert cold[0] == 1
    assert not farm(*argv, cwd=tmp_path)[2]
    (src / GATE).rename(src / GATE.replace(".cu", ".cu.orig"))  # no longer a translation unit
    code, out, recomputed = farm(*argv, cwd=tmp_path)
    assert recomputed
    assert code == 0
    assert f"{GATE}:7" not in out


def test_an_edit_that_keeps_the_mtime_is_a_miss(tmp_path: Path, farm: Farm) -> None:
    """The timestamp put back after an edit (``touch -r``, ``cp -p``, a restore): ctime still moves."""
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    argv = ("lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "cache"))
    cold = farm(*argv, cwd=tmp_path)
    assert not farm(*argv, cwd=tmp_path)[2]
    gate = src / GATE
    before = gate.stat()
    gate.write_text(gate.read_text().replace(">= 890", ">= 800"))
    os.utime(gate, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert gate.stat().st_mtime_ns == before.st_mtime_ns
    assert gate.stat().st_size == before.st_size
    _, out, recomputed = farm(*argv, cwd=tmp_path)
    assert recomputed
    assert out != cold[1]
    assert f"{GATE}:7" not in out


def test_a_file_the_lint_never_reads_does_not_change_the_answer(tmp_path: Path, farm: Farm) -> None:
    """Only what the lint read is stat'ed again (plus every directory listing): an edited file
    that nothing compiles is still a hit, and the answer is the one a fresh lint gives."""
    src = shutil.copytree(DATA / "sage_fp8", tmp_path / "src")
    (src / "docs").mkdir()
    (src / "docs" / "notes.md").write_text("sm_80 only\n")
    aged(src)
    argv = ("lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "cache"))
    cold = farm(*argv, cwd=tmp_path)
    (src / "docs" / "notes.md").write_text("sm_80 and sm_89, see __CUDA_ARCH__\n")
    assert farm(*argv, cwd=tmp_path) == (cold[0], cold[1], False)
    fresh = farm("lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "fresh"), cwd=tmp_path)
    assert fresh[:2] == cold[:2]
    assert fresh[2]


def test_another_arch_list_is_another_answer(tmp_path: Path, farm: Farm) -> None:
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    cache = str(tmp_path / "cache")
    failing = farm("lint", str(src), "--arch-list", LIST, "--cache-dir", cache, cwd=tmp_path)
    passing = farm("lint", str(src), "--arch-list", "8.0;8.6;8.9;9.0+PTX", "--cache-dir", cache, cwd=tmp_path)
    assert failing[0] == 1
    assert passing[0] == 0
    assert passing[2]
    assert farm("lint", str(src), "--arch-list", LIST, "--cache-dir", cache, cwd=tmp_path) == (1, failing[1], False)
    assert farm("lint", str(src), "--arch-list", "8.0;8.6;8.9;9.0+PTX", "--cache-dir", cache,
                cwd=tmp_path) == (0, passing[1], False)


def test_a_changed_rules_version_or_lint_code_is_a_miss(tmp_path: Path) -> None:
    """farm's own modules are inputs of every answer: a bumped rules version (or any edit of the
    code, an upgrade) is a miss, and the new code answers."""
    package = tmp_path / "site"
    shutil.copytree(REPO / "farm", package / "farm", ignore=shutil.ignore_patterns("__pycache__"))
    aged(package)
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    argv = ("lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "cache"), "--json")
    cold = farm_process(*argv, cwd=tmp_path, package=package)
    assert cold[2]
    assert json.loads(cold[1])["reports"][0]["lint_version"].startswith(f"{RULES_VERSION}+")
    assert farm_process(*argv, cwd=tmp_path, package=package) == (cold[0], cold[1], False)
    version = package / "farm" / "lint" / "version.py"
    bumped = str(int(RULES_VERSION) + 1)
    version.write_text(version.read_text().replace(f'RULES_VERSION = "{RULES_VERSION}"', f'RULES_VERSION = "{bumped}"'))
    code, out, recomputed = farm_process(*argv, cwd=tmp_path, package=package)
    assert recomputed
    assert code == cold[0]
    assert json.loads(out)["reports"][0]["lint_version"].startswith(f"{bumped}+")


def test_a_warm_run_imports_neither_the_rules_nor_the_recipes(tmp_path: Path) -> None:
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    argv = ["lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "cache")]
    # the cold path (farm.schedule.packagelint), imported on a miss only
    heavy = ["farm.schedule.packagelint", "farm.lint.rules", "farm.lint.compiled", "farm.lint.version",
             "farm.model.config", "farm.source.fetch", "yaml"]
    code = (f"import sys\nfrom farm.cli import main\nrc = main({argv!r})\n"
            f"print([m for m in {heavy!r} if m in sys.modules])")
    run = [sys.executable, "-c", code]
    # coverage's start-up in a measured child imports json, hashlib and dataclasses itself
    measured = ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")
    env = {**{k: v for k, v in os.environ.items() if k not in measured}, "PYTHONPATH": str(REPO)}
    cold = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, env=env, check=True)
    assert "farm.lint.rules" in cold.stdout.splitlines()[-1]
    warm = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, env=env, check=True)
    assert warm.stdout.splitlines()[-1] == "[]"


def test_an_unreadable_or_foreign_entry_is_a_miss(tmp_path: Path, farm: Farm) -> None:
    src = aged(shutil.copytree(DATA / "sage_fp8", tmp_path / "src"))
    argv = ("lint", str(src), "--arch-list", LIST, "--cache-dir", str(tmp_path / "cache"))
    cold = farm(*argv, cwd=tmp_path)
    (entry,) = (tmp_path / "cache" / "lint").glob("cmd-*")
    data = entry.read_bytes()
    assert LIST.encode() in data
    assert LIST.encode().lower() != LIST.encode()
    for broken in (b"", data[: len(data) // 2], b"\x00" * 64, data.replace(LIST.encode(), LIST.encode().lower())):
        entry.write_bytes(broken)
        assert farm(*argv, cwd=tmp_path) == (cold[0], cold[1], True)  # recomputed, and stored again
        assert entry.read_bytes() == data


def test_an_input_with_nothing_to_stat_is_never_remembered(tmp_path: Path) -> None:
    """farm installed as bytecode only: its code cannot be stat'ed, so no answer can be trusted later."""
    from farm.lint.memo import Memo

    modules = tmp_path / "site" / "farm"
    modules.mkdir(parents=True)
    (modules / "__init__.pyc").write_bytes(b"")
    aged(tmp_path / "site")
    memo = Memo(tmp_path / "cache", what="x")
    memo.depend(modules, only=".py")
    memo.remember(0, "text", "{}")
    assert not (tmp_path / "cache").exists()
