"""``farm rebuild WHEEL``: a wheel's cell built again from its provenance, and the two files compared.

Fast: what is refused before anything is built (no farm provenance, another configuration, with
the commit the ledger names), and a wheel found on an index served on 127.0.0.1 (by its file
name, on the index's root or a channel), its download checked against the index's sha256. Slow
(real builds): demo_ext built by `farm build`, published to the static index target by `farm
upload`, served on 127.0.0.1 and rebuilt from there: the same file (exit 0); rebuilt from a
source that changed under the same recipe: exit 1, naming the `.so`'s sections and the
provenance's `source.tree_sha256`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from farm.cli import main
from farm.provenance.ledgerline import dumps_entry
from tests.support.buildroot import DEMO_RECIPE, REPO, cache_dir_of, make_root
from tests.support.ledgermaker import make_entry
from tests.support.loopback import serve
from tests.support.wheelmaker import make_wheel, stamped_wheel

DEMO = DEMO_RECIPE.format(arch="8.0")


def _demo_root(root: Path) -> Path:
    make_root(root, {"demo_ext": DEMO}, {"examples/demo_ext": REPO / "examples" / "demo_ext"})
    return root


def _stamped(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    """A demo_ext wheel with an asserted provenance from another configuration (the recipe's
    sha256 differs), recorded in the ledger with the commit of the run that built it."""
    entry = make_entry(cuda="13.0", torch="none", python="cp311", arch="sm_80")
    entry["recipe_sha256"] = "1" * 64
    wheel = stamped_wheel(tmp_path / "wheels", entry)
    return wheel, entry


def _page(folder: Path, wheel: Path, sha256: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(wheel, folder / wheel.name)
    (folder / "index.html").write_text(f'<a href="{wheel.name}#sha256={sha256}">{wheel.name}</a>\n')


def test_a_wheel_without_farm_provenance_is_refused(tmp_path, capsys) -> None:
    wheel = make_wheel(tmp_path, "demo_ext", "0.1.0", {"demo_ext/__init__.py": b""}, tag="cp311-cp311-linux_x86_64")
    assert main(["rebuild", str(wheel), "--root", str(_demo_root(tmp_path / "root"))]) == 2
    assert "carries no asserted farm provenance" in capsys.readouterr().err
    assert main(["rebuild", str(tmp_path / "absent.whl"), "--root", str(tmp_path / "root")]) == 2


def test_another_configuration_is_refused_with_the_commit_that_built_it(tmp_path, capsys) -> None:
    root = _demo_root(tmp_path / "root")
    wheel, entry = _stamped(tmp_path)
    (root / "ledger.jsonl").write_text(dumps_entry(entry) + "\n")
    assert main(["rebuild", str(wheel), "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "another configuration than the one that built the wheel: packages/demo_ext.yml" in err
    assert f"check out commit {'0' * 40}" in err


def test_a_wheel_on_an_index_is_found_by_its_name_and_checked_by_its_sha256(tmp_path, capsys) -> None:
    root = _demo_root(tmp_path / "root")
    wheel, _ = _stamped(tmp_path)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    site = tmp_path / "site"
    _page(site / "cu130" / "demo-ext", wheel, digest)  # a farm index: the wheel's channel under its root
    _page(site / "wrong" / "demo-ext", wheel, "0" * 64)
    cache = tmp_path / "cache"
    with serve(site) as url:
        for index in (url, f"{url}cu130/"):  # the root, or the channel pip is given
            assert main(["rebuild", wheel.name, "--index", index, "--root", str(root), "--cache-dir", str(cache)]) == 2
            assert "another configuration" in capsys.readouterr().err  # downloaded, then read
        assert (cache / "rebuild" / "downloads" / wheel.name).read_bytes() == wheel.read_bytes()
        assert main(["rebuild", wheel.name, "--index", f"{url}wrong/", "--root", str(root),
                     "--cache-dir", str(cache)]) == 2
        assert f"the index says {'0' * 64}" in capsys.readouterr().err
        assert main(["rebuild", "demo_ext-0.2.0+cu130-cp311-cp311-linux_x86_64.whl", "--index", url,
                     "--root", str(root)]) == 2
        assert "is not on the index" in capsys.readouterr().err
        assert main(["rebuild", f"{url}cu130/demo-ext/{wheel.name}", "--root", str(root), "--cache-dir",
                     str(cache)]) == 2  # a URL: downloaded the same way
        assert "another configuration" in capsys.readouterr().err
    assert main(["rebuild", wheel.name, "--index", url, "--root", str(root)]) == 3  # the server is gone


@pytest.mark.slow
def test_a_published_wheel_rebuilt_from_the_index_is_the_same_file_and_a_moved_source_is_named(
        tmp_path, pypi_toolkit, capsys) -> None:
    root = _demo_root(tmp_path / "root")
    cache = cache_dir_of(pypi_toolkit)
    assert main(["build", "demo_ext", "--root", str(root), "--builder", "native", "--cuda", "13.0",
                 "--cache-dir", str(cache), "--out", str(tmp_path / "dist"), "--overwrite"]) == 0
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    index = root / "public" / "index"  # _defaults.yml's index target
    assert main(["upload", str(tmp_path / "dist"), "--root", str(root), "--target", "index"]) == 0
    capsys.readouterr()
    with serve(index) as url:
        code = main(["rebuild", wheel.name, "--index", url, "--root", str(root), "--cache-dir", str(cache),
                     "--json"])
        out = json.loads(capsys.readouterr().out)
        assert code == 0, out
        assert out["identical"] is True
        assert out["a"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
        # the source changed under the same recipe (a path source): the rebuild is another file, and says where
        run_cu = root / "examples" / "demo_ext" / "csrc" / "run.cu"
        run_cu.write_text(run_cu.read_text().replace("iota_kernel", "iota2_kernel"))
        code = main(["rebuild", wheel.name, "--index", url, "--root", str(root), "--cache-dir", str(cache)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "demo_ext/_C.cpython-" in out
    assert "section .nv_fatbin" in out or "section .text" in out
    assert "source.tree_sha256:" in out
