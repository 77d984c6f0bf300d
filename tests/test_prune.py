"""farm.builder.prune and ``farm cache prune``: a cache laid out as the builders write it (toolkit
stamps, environment specs, fetched sources, work folders), a ledger of recent cells, and what the
prune keeps, removes and reports."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from farm import cacheseal
from farm.builder.prune import InUse, apply_prune, in_use, plan_prune
from farm.cli import main
from farm.model.cells import Cell
from farm.source.fetch import fetch, vendored_key
from tests.support import gitremote, loopback
from tests.support.buildroot import DEMO_RECIPE, make_root
from tests.support.ledgermaker import make_entry

OLD = time.time() - 10 * 86400
COMMIT_USED = "a" * 40
COMMIT_OLD = "b" * 40
SDIST_USED = "c" * 64


def _age(path: Path) -> None:
    for dirpath, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            os.utime(os.path.join(dirpath, name), (OLD, OLD), follow_symlinks=False)
    os.utime(path, (OLD, OLD))


def _toolkit(cache: Path, line: str, release: str, components: list[str], size: int = 1000) -> Path:
    folder = cache / "toolkit" / line / f"pypi-{release}-linux-x86_64-{abs(hash(tuple(components))) % 10**8:08d}"
    folder.mkdir(parents=True)
    request = {"cuda": line, "source": "pypi", "release": release, "platform": "linux-x86_64",
               "components": components}
    # sealed as the assembler seals its ready stamp: an unsealed one is never believed
    (folder / ".farm-toolkit.json").write_bytes(
        cacheseal.seal(json.dumps({"key": "k", "request": request}).encode(), f"toolkit-stamp:{folder.name}"))
    (folder / "blob").write_bytes(b"x" * size)
    _age(folder)
    return folder


def _env(cache: Path, python: str, torch: str | None, size: int = 2000) -> Path:
    folder = cache / "envs" / f"py{python[:4]}-torch{torch or 'none'}-0123456789abcdef"
    (folder / "lib").mkdir(parents=True)
    (folder / "farm-env.json").write_text(json.dumps({"python": python, "python_exe": "/usr/bin/python3",
                                                      "requirements": ["build"],
                                                      "torch": f"torch=={torch}" if torch else None,
                                                      "torch_index": None, "layout": 1}))
    (folder / "lib" / "blob").write_bytes(b"y" * size)
    _age(folder)
    return folder


def _tree(base: Path, size: int = 300) -> Path:
    (base / "tree").mkdir(parents=True)
    (base / "tree" / "setup.py").write_bytes(b"z" * size)
    _age(base)
    return base


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    cache = tmp_path / ".cache"
    _toolkit(cache, "13.0", "13.0.2", ["cuda_nvcc", "cuda_cudart"])
    _toolkit(cache, "12.8", "12.8.1", ["cuda_nvcc"], size=5000)
    _env(cache, "3.11.7", "2.8.0")
    _env(cache, "3.12.1", None, size=7000)
    _tree(cache / "sources" / "git" / COMMIT_USED)
    _tree(cache / "sources" / "git" / COMMIT_OLD, size=900)
    (cache / "sources" / "git" / "ref-0123.json").write_bytes(cacheseal.seal(
        json.dumps({"url": "u", "ref": "v1", "commit": COMMIT_OLD}).encode(), "source-ref:ref-0123.json"))
    _tree(cache / "sources" / "sdist" / SDIST_USED)
    cell = Cell("pkg", "1.0", "13.0", "2.8", "cp311", "linux_x86_64")
    _tree(cache / "build" / cell.id, size=50)
    _tree(cache / "build" / Cell("old", "1.0", "12.8", "none", "cp312", "linux_x86_64").id, size=70)
    return cache


def _recent() -> list[dict[str, Any]]:
    entry = make_entry("pkg", "1.0", cuda="13.0", torch="2.8", python="cp311")
    entry["source"] = {"kind": "git", "repo": "o/pkg", "ref": "v1", "commit": COMMIT_USED}
    entry["toolchain"] = {"nvcc": "13.0.88", "torch": "2.8.0+cu130", "python": "3.11.7", "builder": "native",
                          "cibuildwheel": None,
                          "toolkit": {"source": "pypi", "release": "13.0.2",
                                      "components": [{"name": "cuda_cudart", "version": "1", "sha256": None},
                                                     {"name": "cuda_nvcc", "version": "1", "sha256": None}]}}
    return [entry]


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_what_recent_cells_use_is_kept_and_the_rest_goes(cache: Path) -> None:
    used = in_use(_recent(), sdists=[SDIST_USED])
    plan = plan_prune(cache, used)
    toolkit_13 = next((cache / "toolkit" / "13.0").iterdir())
    kept = {i.path for i in plan.items if i.keep}
    assert kept == {toolkit_13, cache / "envs" / "py3.11-torch2.8.0-0123456789abcdef",
                    cache / "sources" / "git" / COMMIT_USED, cache / "sources" / "sdist" / SDIST_USED,
                    cache / "build" / "pkg-1.0-cu130-torch2.8-cp311-linux_x86_64"}
    # the 12.8 toolkit, the torch-free 3.12 environment, the old commit and the old work folder go
    gone = {i.path for i in plan.removed}
    assert gone == {next((cache / "toolkit" / "12.8").iterdir()), cache / "envs" / "py3.12-torchnone-0123456789abcdef",
                    cache / "sources" / "git" / COMMIT_OLD,
                    cache / "build" / "old-1.0-cu128-notorch-cp312-linux_x86_64"}
    expected = sum(_bytes(p) for p in gone)
    assert plan.freed == expected > 5000 + 7000 + 900
    assert apply_prune(plan) == expected
    assert not any(p.exists() for p in gone)
    assert not (cache / "sources" / "git" / "ref-0123.json").exists()  # its pointer went with it
    assert all(p.exists() for p in kept)
    # a stamp this user did not seal names no request: that toolkit is not taken as in use
    forged = cache / "toolkit" / "13.0" / "pypi-13.0.2-linux-x86_64-forged"
    forged.mkdir()
    (forged / ".farm-toolkit.json").write_text(json.dumps({"request": {"source": "pypi", "release": "13.0.2",
                                                          "platform": "linux-x86_64",
                                                          "components": ["cuda_nvcc", "cuda_cudart"]}}))
    _age(forged)
    assert forged in {i.path for i in plan_prune(cache, used).removed}
    assert not list(cache.rglob(".pruning-*"))
    forged.rename(forged.with_name("gone"))
    assert [i.path.name for i in plan_prune(cache, used).removed] == ["gone"]  # nothing else is left


def test_a_folder_in_use_or_just_changed_is_kept(cache: Path) -> None:
    envs = cache / "envs"
    free = next(p for p in envs.iterdir() if "3.12" in p.name)
    with FileLock(str(envs / f".{free.name}.lock")):  # a build is making or reusing it now
        plan = plan_prune(cache, InUse(), kinds=["envs"])
        assert {i.path.name: i.keep for i in plan.items}[free.name] == "in use: a running build holds its lock"
    os.utime(free / "lib", None)  # written to a moment ago
    plan = plan_prune(cache, InUse(), kinds=["envs"])
    assert "changed within" in ({i.path.name: i.keep for i in plan.items}[free.name] or "")
    assert {i.kind for i in plan.items} == {"envs"}


def test_a_file_hard_linked_by_several_environments_is_freed_only_with_its_last_link(tmp_path: Path,
                                                                                     capsys) -> None:
    """Build environments of one torch share its files by hard links (farm.builder.envshare): a
    file counts once, and removing environments frees only the files no kept one links."""
    cache = tmp_path / ".cache"
    kept = _env(cache, "3.11.7", "2.8.0")  # the recent cell's
    old = [_env(cache, "3.11.7", "2.7.0"), _env(cache, "3.11.7", "2.7.1")]
    (kept / "lib" / "torch.so").write_bytes(b"t" * 5000)
    (old[0] / "lib" / "old.so").write_bytes(b"o" * 3000)
    for folder in old:
        os.link(kept / "lib" / "torch.so", folder / "lib" / "torch.so")
        if folder != old[0]:
            os.link(old[0] / "lib" / "old.so", folder / "lib" / "old.so")
    for folder in (kept, *old):
        _age(folder)
    make_root(tmp_path, {})
    (tmp_path / "ledger.jsonl").write_text("".join(json.dumps(e) + "\n" for e in _recent()))

    own = _bytes(kept) - 5000  # each environment's marker and blob: single links
    assert own == _bytes(old[0]) - 8000 == _bytes(old[1]) - 8000

    plan = plan_prune(cache, in_use(_recent()), kinds=["envs"])
    assert [i.path for i in plan.removed] == old
    assert [i.size for i in plan.removed] == [own + 5000 + 3000] * 2  # what each holds
    assert [i.frees for i in plan.removed] == [own + 3000, own]  # old.so once; torch.so stays with `kept`
    assert plan.freed == 2 * own + 3000
    assert plan.kept == own + 5000

    assert main(["cache", "prune", "--kind", "envs", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"(frees {(own + 3000) / 1000:.1f} kB: the rest is shared by hard links with other folders)" in out
    assert f"freed {(2 * own + 3000) / 1000:.1f} kB ({2 * own + 3000} bytes) in 2 entries" in out
    assert not any(folder.exists() for folder in old)
    assert (kept / "lib" / "torch.so").stat().st_nlink == 1
    assert (kept / "lib" / "torch.so").read_bytes() == b"t" * 5000


def test_farm_cache_prune_dry_run_reports_and_removes_nothing(cache: Path, tmp_path: Path, capsys) -> None:
    root = tmp_path
    make_root(root, {})
    with (root / "ledger.jsonl").open("w") as out:
        for entry in _recent():
            out.write(json.dumps(entry) + "\n")
    before = sorted(p.relative_to(cache) for p in cache.rglob("*"))
    assert main(["cache", "prune", "--dry-run", "--root", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dry_run"]
    assert report["bytes_freed"] > 5000 + 7000
    assert sorted(p.relative_to(cache) for p in cache.rglob("*")) == before
    assert main(["cache", "prune", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "freed" in out
    assert f"({report['bytes_freed']} bytes)" in out
    assert not (cache / "sources" / "git" / COMMIT_OLD).exists()
    assert (cache / "sources" / "git" / COMMIT_USED).exists()


def test_bad_bounds_are_bad_input(tmp_path: Path) -> None:
    assert main(["cache", "prune", "--keep-recent", "-1", "--root", str(tmp_path)]) == 2


def test_vendored_trees_and_archives_are_kept_by_the_sources_that_use_them(cache: Path) -> None:
    """A composed tree (source.vendor) is kept when a recent cell's provenance or a recipe names
    its base and entries (keyed as the fetch keys it), its archive when its sha256 is used."""
    glm = {"kind": "archive", "path": "third_party/glm", "url": "https://example.org/glm.tar.xz",
           "sha256": "d" * 64, "subdir": None}
    used_key = vendored_key(COMMIT_USED, [glm])
    for folder in (used_key, vendored_key(COMMIT_USED, [{**glm, "sha256": "e" * 64}])):
        _tree(cache / "sources" / "vendored" / folder)
    for sha in ("d" * 64, "e" * 64):
        (cache / "sources" / "vendor" / sha).mkdir(parents=True)
        (cache / "sources" / "vendor" / sha / "glm.tar.xz").write_bytes(b"a" * 100)
        _age(cache / "sources" / "vendor" / sha)
    recent = _recent()
    recent[0]["source"]["vendor"] = [glm]
    plan = plan_prune(cache, in_use(recent), kinds=["sources"])
    kept = {i.path for i in plan.items if i.keep}
    assert cache / "sources" / "vendored" / used_key in kept
    assert cache / "sources" / "vendor" / ("d" * 64) in kept
    gone = {i.path.relative_to(cache / "sources").as_posix() for i in plan.removed}
    assert gone == {f"git/{COMMIT_OLD}", f"sdist/{SDIST_USED}", f"vendored/{vendored_key(COMMIT_USED, [{**glm, 'sha256': 'e' * 64}])}",
                    f"vendor/{'e' * 64}"}
    # a recipe's pins keep them too, without any ledger entry
    plan = plan_prune(cache, in_use([], vendored=[used_key], archives=["d" * 64]), kinds=["sources"])
    assert {cache / "sources" / "vendored" / used_key, cache / "sources" / "vendor" / ("d" * 64)} <= {
        i.path for i in plan.items if i.keep}


def test_farm_cache_prune_keeps_what_todays_recipe_vendors(tmp_path: Path) -> None:
    """A recipe with source.vendor (its archive served on 127.0.0.1), fetched as a build fetches
    it: the prune keeps the composed tree and the archive; once the recipe pins another archive,
    both go."""
    served = tmp_path / "served"
    served.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.addfile(tarfile.TarInfo("glm-1.0.1/glm/glm.hpp"), io.BytesIO(b""))
    (served / "glm.tar.gz").write_bytes(buf.getvalue())
    sha = hashlib.sha256(buf.getvalue()).hexdigest()
    root = tmp_path / "root"
    (root / "examples" / "demo_ext").mkdir(parents=True)

    def recipe(pin: str) -> str:
        return DEMO_RECIPE.format(arch="8.0").replace(
            "  path: examples/demo_ext\n", "  path: examples/demo_ext\n  vendor:\n    - path: third_party/glm\n"
            f"      archive: {{url: '{base}glm.tar.gz', sha256: {pin}}}\n")

    with loopback.serve(served) as base:
        config = make_root(root, {"demo_ext": recipe(sha)})
        demo = config.recipe("demo_ext")
        tree = fetch(demo.source, root / ".cache" / "sources", vendor=demo.vendor)
    args = ["cache", "prune", "--root", str(root), "--kind", "sources", "--min-age", "0"]
    assert main(args) == 0
    assert tree.root.is_dir()
    assert (root / ".cache" / "sources" / "vendor" / sha).is_dir()
    (root / "packages" / "demo_ext.yml").write_text(recipe("f" * 64))
    assert main(args) == 0
    assert not tree.root.exists()
    assert not (root / ".cache" / "sources" / "vendor" / sha).exists()


def test_a_vendored_git_checkout_is_kept_by_the_cell_and_the_recipe_that_pin_it(tmp_path: Path) -> None:
    """A recipe whose source.vendor is a git commit (``git daemon`` on 127.0.0.1), fetched as a
    build fetches it: the checkout (cached as a git source of that commit) and the composed tree
    stay while the recipe pins it, and while a recent cell's provenance names it; neither, it goes."""
    commit = gitremote.one_commit_repo(tmp_path / "served" / "lib", {"lib.h": "//\n"})
    root = tmp_path / "root"
    (root / "examples" / "demo_ext").mkdir(parents=True)

    def recipe(vendor: bool) -> str:
        body = DEMO_RECIPE.format(arch="8.0")
        return body.replace("  path: examples/demo_ext\n", "  path: examples/demo_ext\n  vendor:\n"
                            f"    - {{path: third_party/lib, git: {{repo: '{base}lib', ref: {commit}}}}}\n") if vendor else body

    with gitremote.daemon(tmp_path / "served") as base:
        config = make_root(root, {"demo_ext": recipe(True)})
        demo = config.recipe("demo_ext")
        tree = fetch(demo.source, root / ".cache" / "sources", vendor=demo.vendor)
    checkout = root / ".cache" / "sources" / "git" / commit
    assert (checkout / "tree" / "lib.h").is_file()
    assert (tree.root / "third_party" / "lib" / "lib.h").is_file()
    args = ["cache", "prune", "--root", str(root), "--kind", "sources", "--min-age", "0"]
    assert main(args) == 0
    assert checkout.is_dir()
    assert tree.root.is_dir()
    # the recipe no longer vendors it, a recent cell's provenance still does: the checkout stays
    (root / "packages" / "demo_ext.yml").write_text(recipe(False))
    entry = {"source": {"kind": "path", "path": "examples/demo_ext", "tree_sha256": "d" * 64,
                        "vendor": [{"kind": "git", "path": "third_party/lib", "repo": "x", "commit": commit,
                                    "subdir": None}]}}
    plan = plan_prune(root / ".cache", in_use([entry]), kinds=["sources"], min_age_s=0)
    assert checkout in {i.path for i in plan.items if i.keep}
    assert main(args) == 0
    assert not checkout.exists()
    assert not tree.root.exists()


def test_image_probes_are_kept_while_the_host_holds_their_image(cache: Path, tmp_path: Path, capsys) -> None:
    """``images/`` holds a probe per engine and image ID: kept while the engine still holds the
    image (asked by ID, never pulled), removed with the same age and dry-run rules otherwise."""
    import shutil
    import subprocess

    from farm.builder.images import held_probes

    probes = cache / "images"
    probes.mkdir()
    gone = probes / f"podman-{'e' * 64}.json"  # an image removed from the host
    odd = probes / "notes.json"  # not a probe farm names
    for path in (gone, odd):
        path.write_bytes(b"{}" * 100)
        os.utime(path, (OLD, OLD))
    held = None
    if shutil.which("podman"):
        out = subprocess.run(["podman", "images", "--quiet", "--no-trunc"], capture_output=True, text=True,
                             check=False, timeout=60)
        image_id = next(iter(out.stdout.split()), "").removeprefix("sha256:")
        if out.returncode == 0 and image_id:
            held = probes / f"podman-{image_id}.json"
            held.write_bytes(b"{}")
            os.utime(held, (OLD, OLD))
    assert held_probes(cache) == (frozenset({held.name}) if held else frozenset())

    plan = plan_prune(cache, InUse(images=held_probes(cache)), kinds=["images"])
    assert {i.path for i in plan.removed} == {gone, odd}
    assert all(i.kind == "images" for i in plan.items)
    assert plan.freed == 400
    root = tmp_path / "root"
    make_root(root, {})
    assert main(["cache", "prune", "--kind", "images", "--root", str(root), "--cache-dir", str(cache)]) == 0
    assert "freed 400 B (400 bytes) in 2 entries" in capsys.readouterr().out
    assert sorted(probes.iterdir()) == ([held] if held else [])
    assert not list(probes.glob(".pruning-*"))
    if held is None:
        pytest.skip("podman holds no image here: the kept side is unproven")
