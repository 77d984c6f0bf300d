"""farm.source.fetch, ``source.vendor``: trees placed into a recipe's source from pinned archives
served on 127.0.0.1 (a URL, or an sdist of a PEP 503 index), verified before unpacking, bounded,
refused when they would leave their folder or overwrite upstream files, cached and re-checked; and
from a git repository at a commit, served by ``git daemon`` on 127.0.0.1 as GitHub serves a
repository to git (the pinned commit fetched, checked out, placed without its ``.git``)."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.errors import ConfigError, SourceError
from farm.load.recipes import load_config
from farm.model.config import ArchiveOrigin, GitSource, PathSource, SdistSource, VendorSource
from farm.provenance import buildinfo
from farm.source import fetch as fetchmod
from farm.source.fetch import fetch, is_cached
from tests.support import gitremote, loopback

GLM_HEADER = b"#define GLM_VERSION_MAJOR 1\n#define GLM_VERSION_MINOR 0\n#define GLM_VERSION_PATCH 1\n"


def _tar(members: dict[str, bytes], links: dict[str, str] | None = None, *, mode: str = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:  # type: ignore[call-overload]
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tf.addfile(info)
    return buf.getvalue()


GLM = {"glm-1.0.1/glm/detail/setup.hpp": GLM_HEADER, "glm-1.0.1/glm/glm.hpp": b'#include "detail/setup.hpp"\n',
       "glm-1.0.1/copying.txt": b"MIT\n"}


@pytest.fixture
def upstream(tmp_path: Path) -> PathSource:
    """A package whose submodule folder is the empty placeholder a git checkout leaves."""
    root = tmp_path / "pkg"
    (root / "csrc" / "third_party" / "glm").mkdir(parents=True)
    (root / "setup.py").write_text("# pkg\n")
    (root / "csrc" / "k.cu").write_text("#include <glm/glm.hpp>\n__global__ void k() {}\n")
    return PathSource(root, "pkg")


@pytest.fixture
def files(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served on 127.0.0.1 (a release-download server); yields (folder, base URL)."""
    root = tmp_path / "served"
    root.mkdir()
    with loopback.serve(root) as url:
        yield root, url


def _put(files: tuple[Path, str], name: str, data: bytes) -> tuple[str, str]:
    (files[0] / name).write_bytes(data)
    return files[1] + name, hashlib.sha256(data).hexdigest()


def _entry(url: str, sha: str, path: str = "csrc/third_party/glm", subdir: str | None = None) -> VendorSource:
    return VendorSource(path, ArchiveOrigin(url, sha), subdir, "packages/pkg.yml:5")


def _leftovers(cache: Path) -> list[Path]:
    """Trees and archives left in the cache (lock files and empty folders aside)."""
    return [p for p in cache.rglob("*") if p.name == "tree" or (p.parent.parent.name == "vendor" and p.is_file())]


def test_an_archive_is_verified_placed_described_and_cached(upstream, files, tmp_path) -> None:
    url, sha = _put(files, "glm-1.0.1.tar.xz", _tar(GLM, mode="w:xz"))
    cache = tmp_path / "cache"
    vendor = (_entry(url, sha),)
    assert not is_cached(upstream, cache, vendor)
    tree = fetch(upstream, cache, package="pkg", vendor=vendor)
    glm = tree.root / "csrc" / "third_party" / "glm"
    assert (glm / "glm" / "detail" / "setup.hpp").read_bytes() == GLM_HEADER  # the one top folder is placed
    assert (glm / "copying.txt").is_file()
    assert (tree.root / "csrc" / "k.cu").is_file()
    assert not (upstream.path / "csrc" / "third_party" / "glm" / "glm").exists()  # the upstream tree is untouched
    base = fetch(upstream, cache)
    assert tree.identity != base.identity
    assert tree.description == {**base.description, "vendor": [
        {"kind": "archive", "path": "csrc/third_party/glm", "url": url, "sha256": sha, "subdir": None}]}
    record = buildinfo.source_from(tree.description)  # provenance reads exactly this
    assert record is not None
    assert record.to_dict() == tree.description
    assert is_cached(upstream, cache, vendor)
    (files[0] / "glm-1.0.1.tar.xz").unlink()  # cached: the server can go away
    assert fetch(upstream, cache, vendor=vendor).root == tree.root


def test_another_pin_is_another_tree(upstream, files, tmp_path) -> None:
    url, sha = _put(files, "glm-1.0.1.tar.gz", _tar(GLM))
    other_url, other_sha = _put(files, "glm-1.0.2.tar.gz", _tar({**GLM, "glm-1.0.1/glm/new.hpp": b"//\n"}))
    one = fetch(upstream, tmp_path / "c", vendor=(_entry(url, sha),))
    two = fetch(upstream, tmp_path / "c", vendor=(_entry(other_url, other_sha),))
    assert one.identity != two.identity
    assert one.root != two.root
    assert not (one.root / "csrc/third_party/glm/glm/new.hpp").exists()
    assert (two.root / "csrc/third_party/glm/glm/new.hpp").exists()


def test_subdir_takes_one_folder_of_the_archive(upstream, files, tmp_path) -> None:
    url, sha = _put(files, "glm.zip.tar.gz", _tar(GLM))
    tree = fetch(upstream, tmp_path / "c", vendor=(_entry(url, sha, path="csrc/third_party/glm/glm", subdir="glm"),))
    assert (tree.root / "csrc/third_party/glm/glm/detail/setup.hpp").is_file()
    assert not (tree.root / "csrc/third_party/glm/copying.txt").exists()


def test_an_archive_of_several_top_folders_is_placed_whole(upstream, files, tmp_path) -> None:
    url, sha = _put(files, "flat.tar.gz", _tar({"glm/glm.hpp": b"//\n", "doc/readme.txt": b"x\n"}))
    tree = fetch(upstream, tmp_path / "c", vendor=(_entry(url, sha),))
    assert (tree.root / "csrc/third_party/glm/glm/glm.hpp").is_file()
    assert (tree.root / "csrc/third_party/glm/doc/readme.txt").is_file()


def test_a_pin_mismatch_is_refused_before_unpacking_and_caches_nothing(upstream, files, tmp_path) -> None:
    url, _ = _put(files, "glm-1.0.1.tar.gz", _tar(GLM))
    cache = tmp_path / "cache"
    with pytest.raises(SourceError, match="the recipe pins") as err:
        fetch(upstream, cache, package="pkg", vendor=(_entry(url, "0" * 64),))
    text = str(err.value)
    for part in ("package 'pkg'", "source.vendor 'csrc/third_party/glm'", "packages/pkg.yml:5"):
        assert part in text
    assert err.value.exit_code == 3
    assert _leftovers(cache) == []


class _Endless(loopback.QuietHandler):
    """A server that streams bytes and never ends the body (no Content-Length)."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        try:
            while True:
                self.wfile.write(bytes(1 << 16))
        except OSError:
            pass  # the client hung up at its bound


def test_a_server_that_never_stops_is_cut_at_the_bound(upstream, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(fetchmod, "MAX_VENDOR_BYTES", 1 << 20)
    with loopback.serve(handler=_Endless) as url, pytest.raises(SourceError, match="larger than 1 MiB"):
        fetch(upstream, tmp_path / "c", vendor=(_entry(f"{url}glm.tar.gz", "0" * 64),))
    assert _leftovers(tmp_path / "c") == []


def test_an_archive_unpacking_beyond_the_bound_is_refused(upstream, files, tmp_path, monkeypatch) -> None:
    url, sha = _put(files, "bomb.tar.xz", _tar({"bomb/zeros.h": bytes(1 << 20)}, mode="w:xz"))
    monkeypatch.setattr(fetchmod, "MAX_VENDOR_UNPACKED", 1 << 16)
    with pytest.raises(SourceError, match="unpacks to 1,048,576 bytes"):
        fetch(upstream, tmp_path / "c", vendor=(_entry(url, sha),))
    assert not list((tmp_path / "c").rglob("zeros.h"))
    monkeypatch.setattr(fetchmod, "MAX_VENDOR_MEMBERS", 2)
    url, sha = _put(files, "many.tar.gz", _tar({f"many/{i}.h": b"" for i in range(5)}))
    with pytest.raises(SourceError, match="more than 2 members"):
        fetch(upstream, tmp_path / "c", vendor=(_entry(url, sha),))


@pytest.mark.parametrize(
    ("members", "links", "subdir", "message"),
    [
        ({"glm-1.0.1/../../evil.h": b"x"}, None, None, "escapes the archive"),
        ({"/tmp/evil.h": b"x"}, None, None, "escapes the archive"),
        ({"glm-1.0.1/glm/a.h": b"x"}, {"glm-1.0.1/glm/etc": "/etc"}, None, "leaves the tree"),
        # inside the archive, but outside the folder placed: it would point into the package's tree
        ({"glm-1.0.1/glm/a.h": b"x", "glm-1.0.1/LICENSE": b"x"}, {"glm-1.0.1/glm/up": "../LICENSE"}, "glm",
         "leaves the vendored folder"),
    ],
)
def test_an_archive_that_would_leave_its_folder_is_refused(upstream, files, tmp_path, members, links, subdir,
                                                             message) -> None:
    url, sha = _put(files, "bad.tar.gz", _tar(members, links))
    path = "csrc/third_party/glm" + ("/glm" if subdir else "")
    with pytest.raises(SourceError, match=message):
        fetch(upstream, tmp_path / "c", vendor=(_entry(url, sha, path=path, subdir=subdir),))
    assert not (tmp_path / "evil.h").exists()
    assert not list((tmp_path / "c" / "vendored").glob("*/tree"))


@pytest.mark.parametrize(
    ("links", "subdir"),
    [(None, "include"), ({"glm-1.0.1/inc": "glm"}, "inc")],  # a link is no folder
)
def test_a_subdir_the_archive_lacks_is_the_recipes_error(upstream, files, tmp_path, links, subdir) -> None:
    """The pinned archive is fine; the recipe names a folder it does not hold: bad input (exit 2),
    naming the recipe's line, nothing cached."""
    url, sha = _put(files, "glm.tar.gz", _tar({"glm-1.0.1/glm/a.h": b"x"}, links))
    entry = _entry(url, sha, path="csrc/third_party/glm/glm", subdir=subdir)
    with pytest.raises(ConfigError, match=f"has no folder '{subdir}' \\(it holds glm") as err:
        fetch(upstream, tmp_path / "c", vendor=(entry,))
    assert err.value.exit_code == 2
    assert err.value.where == entry.where
    assert not list((tmp_path / "c" / "vendored").glob("*/tree"))


def test_links_inside_the_folder_are_kept(upstream, files, tmp_path) -> None:
    url, sha = _put(files, "glm.tar.gz", _tar(GLM, {"glm-1.0.1/glm/alias.hpp": "glm.hpp"}))
    tree = fetch(upstream, tmp_path / "c", vendor=(_entry(url, sha),))
    assert (tree.root / "csrc/third_party/glm/glm/alias.hpp").read_bytes() == GLM["glm-1.0.1/glm/glm.hpp"]


def test_a_path_holding_upstream_files_is_never_overwritten(upstream, files, tmp_path) -> None:
    url, sha = _put(files, "glm.tar.gz", _tar(GLM))
    with pytest.raises(ConfigError, match=r"already has 2 entries at 'csrc' \(k.cu, third_party\).*overwrite upstream files"):
        fetch(upstream, tmp_path / "c", vendor=(_entry(url, sha, path="csrc"),))
    with pytest.raises(ConfigError, match="already has a file or link at 'setup.py'") as err:
        fetch(upstream, tmp_path / "c", vendor=(_entry(url, sha, path="setup.py"),))
    assert err.value.exit_code == 2


def test_a_path_through_a_link_of_the_source_is_refused(upstream, files, tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (upstream.path / "third").symlink_to(outside)
    url, sha = _put(files, "glm.tar.gz", _tar(GLM))
    with pytest.raises(ConfigError, match="'third' is a link or a file in the source"):
        fetch(upstream, tmp_path / "c", vendor=(_entry(url, sha, path="third/glm"),))
    assert list(outside.iterdir()) == []


def test_a_damaged_cached_archive_is_hashed_again_and_fetched_afresh(upstream, files, tmp_path) -> None:
    url, sha = _put(files, "glm.tar.gz", _tar(GLM))
    cache = tmp_path / "cache"
    vendor = (_entry(url, sha),)
    fetch(upstream, cache, vendor=vendor)
    for marker in (cache / "vendored").glob("*/.farm-source.json"):
        marker.unlink()  # the composed tree is gone: it is made again from the cached archive
    (archive,) = (cache / "vendor" / sha).iterdir()
    archive.write_bytes(_tar({"glm-1.0.1/glm/glm.hpp": b"#error replaced\n"}))  # a restored cache's other bytes
    tree = fetch(upstream, cache, vendor=vendor)
    assert (tree.root / "csrc/third_party/glm/glm/glm.hpp").read_bytes() == GLM["glm-1.0.1/glm/glm.hpp"]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == sha


def test_a_forged_composed_tree_is_never_believed(upstream, files, tmp_path) -> None:
    """A cache restored from elsewhere: a marker not sealed with this user's key names a clean tree
    without the vendored folder; it is made again."""
    url, sha = _put(files, "glm.tar.gz", _tar(GLM))
    cache = tmp_path / "cache"
    vendor = (_entry(url, sha),)
    tree = fetch(upstream, cache, vendor=vendor)
    (tree.root.parent / ".farm-source.json").write_text(json.dumps(
        {"root": "tree", "identity": tree.identity, "description": tree.description}))
    assert not is_cached(upstream, cache, vendor)
    again = fetch(upstream, cache, vendor=vendor)
    assert (again.root / "csrc/third_party/glm/glm/glm.hpp").is_file()


def test_an_sdist_of_the_index_is_vendored(upstream, tmp_path, monkeypatch) -> None:
    """The index is a static PEP 503 tree served on 127.0.0.1, as pip's index is read."""
    root = tmp_path / "index"
    data = _tar({"PyGLM-2.8.3/PyGLM_lib/glm/glm/glm.hpp": b"//\n", "PyGLM-2.8.3/setup.py": b""})
    sha = hashlib.sha256(data).hexdigest()
    (root / "files").mkdir(parents=True)
    (root / "files" / "pyglm-2.8.3.tar.gz").write_bytes(data)
    (root / "simple" / "pyglm").mkdir(parents=True)
    (root / "simple" / "pyglm" / "index.html").write_text(
        f'<a href="../../files/pyglm-2.8.3.tar.gz#sha256={sha}">pyglm-2.8.3.tar.gz</a>')
    entry = VendorSource("csrc/third_party/glm", SdistSource("PyGLM", "2.8.3", sha), "PyGLM_lib/glm", "p.yml:5")
    with loopback.serve(root) as url:
        monkeypatch.setenv("PIP_INDEX_URL", f"{url}simple")
        tree = fetch(upstream, tmp_path / "c", vendor=(entry,))
    assert (tree.root / "csrc/third_party/glm/glm/glm.hpp").is_file()
    assert tree.description["vendor"] == [{"kind": "sdist", "path": "csrc/third_party/glm", "name": "PyGLM",
                                          "version": "2.8.3", "sha256": sha, "subdir": "PyGLM_lib/glm"}]


def test_a_corrupt_xz_archive_is_a_source_error(tmp_path) -> None:
    archive = tmp_path / "glm.tar.xz"
    archive.write_bytes(lzma.compress(b"not a tar")[:20])
    (tmp_path / "out").mkdir()
    with pytest.raises(SourceError, match="not a readable"):
        fetchmod.unpack(archive, tmp_path / "out")


# ------------------------------------------------------------------------------------------------
# a git repository at a commit (what a build script would otherwise clone: sageattn3's CUTLASS)
# ------------------------------------------------------------------------------------------------
def _commit(repo: Path, files: dict[str, str], links: dict[str, str] | None = None) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    for name, target in (links or {}).items():
        (repo / name).symlink_to(target)
    gitremote.git(repo, "add", "-A")
    gitremote.git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "c")
    return gitremote.git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def cutlass(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository under ``served/`` with two commits (the pinned one and a later one on its branch);
    yields (folder, first commit, second commit)."""
    repo = tmp_path / "served" / "cutlass"
    repo.mkdir(parents=True)
    gitremote.git(repo, "init", "-q", "-b", "main")
    first = _commit(repo, {"include/cutlass/cutlass.h": "// v1\n", "tools/util/include/u.h": "//\n",
                           "README.md": "cutlass\n"})
    second = _commit(repo, {"include/cutlass/cutlass.h": "// v2\n"})
    return repo, first, second


def _git_entry(url: str, commit: str, path: str = "csrc/cutlass", subdir: str | None = None) -> VendorSource:
    return VendorSource(path, GitSource(url, commit), subdir, "packages/pkg.yml:7")


def test_a_git_commit_is_placed_without_its_git_folder_described_and_cached(upstream, cutlass, tmp_path) -> None:
    _, first, second = cutlass
    cache = tmp_path / "cache"
    with gitremote.daemon(tmp_path / "served") as base:
        vendor = (_git_entry(f"{base}cutlass", first),)
        assert not is_cached(upstream, cache, vendor)
        tree = fetch(upstream, cache, package="pkg", vendor=vendor)
        later = fetch(upstream, cache, package="pkg", vendor=(_git_entry(f"{base}cutlass", second),))
    placed = tree.root / "csrc" / "cutlass"
    assert (placed / "include" / "cutlass" / "cutlass.h").read_text() == "// v1\n"  # the pin, not the branch's head
    assert (later.root / "csrc" / "cutlass" / "include" / "cutlass" / "cutlass.h").read_text() == "// v2\n"
    assert later.identity != tree.identity
    assert not (placed / ".git").exists()
    assert (tree.root / "csrc" / "k.cu").is_file()
    assert tree.description["vendor"] == [
        {"kind": "git", "path": "csrc/cutlass", "repo": f"{base}cutlass", "commit": first, "subdir": None}]
    record = buildinfo.source_from(tree.description)  # provenance reads exactly this
    assert record is not None
    assert record.to_dict() == tree.description
    assert is_cached(upstream, cache, vendor)
    assert fetch(upstream, cache, vendor=vendor).root == tree.root  # the daemon has stopped: cached


def test_a_git_subdir_takes_one_folder_of_the_checkout(upstream, cutlass, tmp_path) -> None:
    _, first, _ = cutlass
    with gitremote.daemon(tmp_path / "served") as base:
        tree = fetch(upstream, tmp_path / "c", vendor=(_git_entry(f"{base}cutlass", first, subdir="include"),))
    assert (tree.root / "csrc/cutlass/cutlass/cutlass.h").is_file()
    assert not (tree.root / "csrc/cutlass/README.md").exists()


def test_a_commit_the_repository_lacks_is_refused_and_nothing_placed(upstream, cutlass, tmp_path) -> None:
    cache = tmp_path / "cache"
    with gitremote.daemon(tmp_path / "served") as base, pytest.raises(SourceError) as err:
        fetch(upstream, cache, package="pkg", vendor=(_git_entry(f"{base}cutlass", "0" * 40),))
    text = str(err.value)
    for part in ("package 'pkg'", "source.vendor 'csrc/cutlass'", "packages/pkg.yml:7", f"{base}cutlass", "failed"):
        assert part in text
    assert err.value.exit_code == 3
    assert not list((cache / "vendored").glob("*/tree"))


def test_a_git_link_leaving_the_placed_folder_is_refused(upstream, tmp_path) -> None:
    repo = tmp_path / "served" / "evil"
    repo.mkdir(parents=True)
    gitremote.git(repo, "init", "-q", "-b", "main")
    commit = _commit(repo, {"include/a.h": "//\n"}, {"include/up": "../../../setup.py"})
    with gitremote.daemon(tmp_path / "served") as base, pytest.raises(SourceError, match="leaves the vendored folder"):
        fetch(upstream, tmp_path / "c", vendor=(_git_entry(f"{base}evil", commit),))
    assert not list((tmp_path / "c" / "vendored").glob("*/tree"))


# ------------------------------------------------------------------------------------------------
# the real archive gsplat_maskgaussian pins (network: Debian's archive)
# ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_recipe_pin_is_glm_1_0_1(tmp_path) -> None:
    """The archive packages/gsplat_maskgaussian.yml pins, fetched from Debian's archive: it verifies
    against the pin and its headers say GLM 1.0.1."""
    recipe = load_config(Path(__file__).resolve().parent.parent, packages=["gsplat_maskgaussian"]).recipe(
        "gsplat_maskgaussian")
    (entry,) = recipe.vendor
    assert isinstance(entry.origin, ArchiveOrigin)
    try:
        urllib.request.urlopen(entry.origin.url, timeout=20).close()
    except OSError as exc:
        pytest.skip(f"Debian's archive cannot be reached here: {exc}")
    base = tmp_path / "base"
    base.mkdir()
    tree = fetch(PathSource(base, "base"), tmp_path / "cache", vendor=(entry,))
    setup = (tree.root / entry.path / "glm" / "detail" / "setup.hpp").read_text()
    for line in ("#define GLM_VERSION_MAJOR 1", "#define GLM_VERSION_MINOR 0", "#define GLM_VERSION_PATCH 1",
                 '#define GLM_VERSION_MESSAGE "GLM: version 1.0.1"'):
        assert line in setup
    assert (tree.root / entry.path / "glm" / "glm.hpp").is_file()
