"""farm.source.fetch: git (a real repository over file://), sdist (a real index server on 127.0.0.1),
path, and the unpacking guards."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.errors import SourceError
from farm.model.config import GitSource, PathSource, SdistSource
from farm.source import fetch as fetch_module
from farm.source.fetch import content_digest, fetch, tree_sha256, unpack
from tests.support import loopback


def _git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "HOME": str(cwd), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | Path]:
    """A repository with a tagged commit, a later commit, and a submodule."""
    base = tmp_path_factory.mktemp("git")
    sub = base / "sub"
    sub.mkdir()
    _git(sub, "init", "-q", "-b", "main")
    (sub / "vendored.h").write_text("#pragma once\n")
    _git(sub, "add", ".")
    _git(sub, "commit", "-q", "-m", "sub")
    repo = base / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "setup.py").write_text("# v1\n")
    _git(repo, "submodule", "-q", "add", sub.as_uri(), "third_party/sub")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "v1")
    _git(repo, "tag", "v1.0")
    tagged = _git(repo, "rev-parse", "HEAD")
    (repo / "setup.py").write_text("# v2\n")
    _git(repo, "commit", "-q", "-am", "v2")
    return {"url": repo.as_uri(), "tagged": tagged, "head": _git(repo, "rev-parse", "HEAD")}


def test_git_tag_is_fetched_and_resolved_to_its_commit(upstream, tmp_path) -> None:
    tree = fetch(GitSource(str(upstream["url"]), "v1.0"), tmp_path, package="demo")
    assert tree.identity == upstream["tagged"]
    assert (tree.root / "setup.py").read_text() == "# v1\n"
    assert not (tree.root / "third_party" / "sub" / "vendored.h").exists()  # submodules not asked for
    assert tree.description == {"kind": "git", "repo": upstream["url"], "ref": "v1.0", "commit": upstream["tagged"]}


def test_git_submodules_when_asked(upstream, tmp_path) -> None:
    tree = fetch(GitSource(str(upstream["url"]), "v1.0", submodules=True), tmp_path)
    assert (tree.root / "third_party" / "sub" / "vendored.h").is_file()


def test_git_commit_pin_and_cache_reuse(upstream, tmp_path) -> None:
    source = GitSource(str(upstream["url"]), str(upstream["head"]))
    first = fetch(source, tmp_path)
    assert first.identity == upstream["head"]
    heard: list[str] = []
    second = fetch(source, tmp_path, progress=heard.append)  # from the cache: no network step
    assert (second.root, heard) == (first.root, [])
    (first.root / "setup.py").write_text("# forged\n")  # a file changed after the install
    third = fetch(source, tmp_path, progress=heard.append)
    assert heard == [f"the source: fetching {upstream['url']} at {upstream['head']}"]
    assert (third.root / "setup.py").read_text() == "# v2\n"


def test_git_damaged_ref_pointer_resolves_the_ref_again(upstream, tmp_path) -> None:
    source = GitSource(str(upstream["url"]), "v1.0")
    first = fetch(source, tmp_path)
    (pointer,) = (tmp_path / "git").glob("ref-*.json")
    pointer.write_text('{"commit": ')  # a torn write
    again = fetch(source, tmp_path)
    assert again.identity == first.identity
    assert f'"commit": "{first.identity}"'.encode() in pointer.read_bytes()


def test_git_url_rewrites_of_the_user_are_what_git_fetches(upstream, tmp_path, monkeypatch) -> None:
    """A ``url.<base>.insteadOf`` in the user's git config (a mirror of an unreachable host) is
    reported by git_fetch_url as what git fetches, and fetch() really fetches the pin through it."""
    config = tmp_path / "gitconfig"
    repo = str(upstream["url"]).removeprefix("file://")
    config.write_text(f'[url "{repo}"]\n\tinsteadOf = https://unreachable.invalid/o/repo\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    assert fetch_module.git_fetch_url("https://unreachable.invalid/o/repo") == repo
    assert fetch_module.git_fetch_url("https://unreachable.invalid/o/other") == "https://unreachable.invalid/o/other"
    tree = fetch(GitSource("https://unreachable.invalid/o/repo", "v1.0"), tmp_path / "cache")
    assert tree.identity == upstream["tagged"]


def test_git_unreachable_repo_is_a_source_error_naming_package_and_repo(tmp_path) -> None:
    missing = (tmp_path / "nowhere").as_uri()
    with pytest.raises(SourceError) as info:
        fetch(GitSource(missing, "v1.0"), tmp_path / "cache", package="pointnet2_ops")
    text = str(info.value)
    assert "pointnet2_ops" in text
    assert missing in text
    assert "v1.0" in text
    assert info.value.exit_code == 3
    assert not list((tmp_path / "cache" / "git").glob("*/tree"))  # nothing that looks fetched


def test_git_missing_ref_is_a_source_error(upstream, tmp_path) -> None:
    with pytest.raises(SourceError, match="v9.9"):
        fetch(GitSource(str(upstream["url"]), "v9.9"), tmp_path, package="demo")


def test_a_git_that_keeps_writing_is_stopped_at_the_cap_with_its_children(tmp_path, monkeypatch) -> None:
    """A git run that never ends on its own, writing some 6 MB/s into its folder (a shell alias
    stands for a server that streams a pack forever): stopped once the folder passes the cap, its
    whole process group killed, so nothing writes on afterwards."""
    monkeypatch.setattr(fetch_module, "GIT_MAX_BYTES", 1 << 20)
    writer = "!while :; do head -c 65536 /dev/zero; sleep 0.01; done > blob"
    started = time.monotonic()
    with pytest.raises(SourceError, match="passed 1 MiB of git data and checkout") as info:
        fetch_module._git(["-c", f"alias.fill={writer}", "fill"], tmp_path, "package 'big'",
                          "git fetch of git://example.invalid/big at v1", time.monotonic() + 60)
    assert time.monotonic() - started < 10
    assert "package 'big': git fetch of git://example.invalid/big at v1" in str(info.value)
    size = (tmp_path / "blob").stat().st_size
    time.sleep(0.3)
    assert (tmp_path / "blob").stat().st_size == size  # the shell and its loop are gone too


def test_path_source_identity_is_a_content_hash(tmp_path) -> None:
    src = tmp_path / "src"
    (src / "csrc").mkdir(parents=True)
    (src / "csrc" / "k.cu").write_text("__global__ void k() {}\n")
    tree = fetch(PathSource(src, "src"), tmp_path / "cache")
    assert tree.root == src
    assert tree.identity == tree_sha256(src)
    assert tree.description == {"kind": "path", "path": "src", "tree_sha256": tree.identity}
    (src / "csrc" / "k.cu").write_text("__global__ void k() { }\n")
    assert fetch(PathSource(src, "src"), tmp_path / "cache").identity != tree.identity


def test_path_source_missing_is_an_error(tmp_path) -> None:
    with pytest.raises(SourceError, match="not a directory"):
        fetch(PathSource(tmp_path / "absent", "absent"), tmp_path, package="demo")


# ------------------------------------------------------------------------------------------------
# sdist through a PEP 503 index served on 127.0.0.1
# ------------------------------------------------------------------------------------------------
def _targz(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
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


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A static PEP 503 index served by http.server; files put under it are downloadable."""
    root = tmp_path / "index"
    root.mkdir()
    with loopback.serve(root) as url:
        monkeypatch.setenv("PIP_INDEX_URL", f"{url}simple")
        yield root


def _publish(index_root: Path, project: str, filename: str, data: bytes, *, listed_sha: str | None = None) -> str:
    sha = hashlib.sha256(data).hexdigest()
    (index_root / "files").mkdir(exist_ok=True)
    (index_root / "files" / filename).write_bytes(data)
    page = index_root / "simple" / project
    page.mkdir(parents=True, exist_ok=True)
    (page / "index.html").write_text(
        f'<html><body><a href="../../files/{filename}#sha256={listed_sha or sha}">{filename}</a></body></html>')
    return sha


def test_sdist_download_verify_unpack(index, tmp_path) -> None:
    data = _targz({"demo_ext-1.0/setup.py": b"# demo\n", "demo_ext-1.0/csrc/k.cu": b"__global__ void k(){}\n"})
    sha = _publish(index, "demo-ext", "demo_ext-1.0.tar.gz", data)
    tree = fetch(SdistSource("demo_ext", "1.0", sha), tmp_path / "cache", package="demo_ext")
    assert tree.identity == sha
    assert (tree.root / "csrc" / "k.cu").is_file()
    assert (tree.root / "setup.py").is_file()
    assert tree.description == {"kind": "sdist", "name": "demo_ext", "version": "1.0", "sha256": sha}
    # Cached: the index can go away.
    (index / "files" / "demo_ext-1.0.tar.gz").unlink()
    assert fetch(SdistSource("demo_ext", "1.0", sha), tmp_path / "cache").root == tree.root


def test_sdist_pin_mismatch_is_refused_and_nothing_cached(index, tmp_path) -> None:
    data = _targz({"demo_ext-1.0/setup.py": b"# demo\n"})
    _publish(index, "demo-ext", "demo_ext-1.0.tar.gz", data)
    wrong = "0" * 64
    with pytest.raises(SourceError, match="pinned sha256") as info:
        fetch(SdistSource("demo_ext", "1.0", wrong), tmp_path / "cache", package="demo_ext")
    assert "demo_ext" in str(info.value)
    assert not [p for p in (tmp_path / "cache" / "sdist").iterdir() if not p.name.endswith(".lock")]


def test_sdist_whose_bytes_differ_from_the_index_hash_is_refused(index, tmp_path) -> None:
    data = _targz({"demo_ext-1.0/setup.py": b"# demo\n"})
    pinned = "1" * 64  # the index claims this hash, the bytes have another
    _publish(index, "demo-ext", "demo_ext-1.0.tar.gz", data, listed_sha=pinned)
    with pytest.raises(SourceError, match="recipe pins"):
        fetch(SdistSource("demo_ext", "1.0", pinned), tmp_path / "cache")
    assert not [p for p in (tmp_path / "cache" / "sdist").iterdir() if not p.name.endswith(".lock")]


def test_sdist_unknown_project_and_bad_pin(index, tmp_path) -> None:
    with pytest.raises(SourceError, match="not on the index"):
        fetch(SdistSource("nothing-here", "1.0", "2" * 64), tmp_path)
    with pytest.raises(SourceError, match="not a sha256"):
        fetch(SdistSource("demo", "1.0", "abc"), tmp_path)


@pytest.mark.parametrize(
    ("members", "links"),
    [
        ({"demo-1.0/../../evil.txt": b"x"}, None),
        ({"/etc/evil.txt": b"x"}, None),
        ({"demo-1.0/setup.py": b"x"}, {"demo-1.0/escape": "../../../etc/passwd"}),
        ({"demo-1.0/setup.py": b"x"}, {"demo-1.0/abs": "/etc/passwd"}),
    ],
)
def test_unpack_refuses_escapes(tmp_path, members, links) -> None:
    archive = tmp_path / "demo-1.0.tar.gz"
    archive.write_bytes(_targz(members, links))
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(SourceError):
        unpack(archive, dest)
    assert not (tmp_path / "evil.txt").exists()


def test_unsafe_sdist_through_fetch_caches_nothing(index, tmp_path) -> None:
    data = _targz({"demo-1.0/setup.py": b"x"}, {"demo-1.0/escape": "../../../../etc/passwd"})
    sha = _publish(index, "demo", "demo-1.0.tar.gz", data)
    with pytest.raises(SourceError, match="leaves the tree"):
        fetch(SdistSource("demo", "1.0", sha), tmp_path / "cache")
    assert not list((tmp_path / "cache" / "sdist").glob("*/tree"))


@pytest.mark.parametrize("name", ["demo-1.0.zip", "demo-1.0.tar.gz"])
def test_unpack_of_a_corrupt_or_truncated_archive_is_a_source_error(tmp_path, name) -> None:
    archive = tmp_path / name
    whole = _targz({"demo-1.0/setup.py": bytes(range(256)) * 400})
    archive.write_bytes(b"not a zip" if name.endswith(".zip") else whole[: len(whole) // 2])
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(SourceError, match="not a readable"):
        unpack(archive, dest)


def test_a_damaged_cache_marker_means_fetch_again(index, tmp_path) -> None:
    data = _targz({"demo-1.0/setup.py": b"# demo\n"})
    sha = _publish(index, "demo", "demo-1.0.tar.gz", data)
    tree = fetch(SdistSource("demo", "1.0", sha), tmp_path / "cache")
    (tree.root.parent / ".farm-source.json").write_text("{truncated")
    again = fetch(SdistSource("demo", "1.0", sha), tmp_path / "cache")  # from the cached archive
    assert again.identity == sha
    assert (again.root / "setup.py").read_text() == "# demo\n"


def test_a_forged_cache_marker_is_never_believed(index, tmp_path) -> None:
    """A restored cache whose marker names another identity or a root elsewhere (a clean tree, so
    the lint passes): the marker is not sealed with this user's key, so the source is fetched again."""
    data = _targz({"demo-1.0/setup.py": b"# demo\n"})
    sha = _publish(index, "demo", "demo-1.0.tar.gz", data)
    tree = fetch(SdistSource("demo", "1.0", sha), tmp_path / "cache")
    elsewhere = tmp_path / "clean"
    elsewhere.mkdir()
    marker = tree.root.parent / ".farm-source.json"
    marker.write_text(json.dumps({"root": str(elsewhere), "identity": "0" * 64, "description": {}}))
    again = fetch(SdistSource("demo", "1.0", sha), tmp_path / "cache")
    assert again.identity == sha
    assert again.root != elsewhere
    assert (again.root / "setup.py").exists()


def _forge_file(root: Path) -> None:
    (root / "setup.py").write_bytes(b"# forged\n")


def _forge_added(root: Path) -> None:
    (root / "csrc" / "extra.cu").write_text("__global__ void planted() {}\n")


def _forge_removed(root: Path) -> None:
    (root / "csrc" / "k.cu").unlink()


def _forge_exec(root: Path) -> None:
    (root / "setup.py").chmod(0o755)


def _forge_dir_link(root: Path, elsewhere: Path) -> None:
    (root / "csrc" / "more").symlink_to(elsewhere)  # a link to a folder: the build copies it


def _forge_tool_folder(root: Path) -> None:
    (root / ".tox").mkdir()
    (root / ".tox" / "hook.py").write_text("import os\n")


def _forge_empty_dir(root: Path) -> None:
    (root / "csrc" / "empty").mkdir()


@pytest.mark.parametrize("forge", [_forge_file, _forge_added, _forge_removed, _forge_exec, _forge_dir_link,
                                   _forge_tool_folder, _forge_empty_dir],
                         ids=["changed", "added", "removed", "exec-bit", "dir-link", "tool-folder", "empty-dir"])
def test_a_restored_tree_with_a_forged_entry_is_fetched_again(index, tmp_path, forge) -> None:
    """A source cache restored from elsewhere (an Actions cache, an earlier job) whose sealed marker
    is genuine but whose files changed since the install: the tree is unpacked again from the
    pinned archive, never built as it is."""
    data = _targz({"demo-1.0/setup.py": b"# demo\n", "demo-1.0/csrc/k.cu": b"__global__ void k(){}\n"})
    sha = _publish(index, "demo", "demo-1.0.tar.gz", data)
    tree = fetch(SdistSource("demo", "1.0", sha), tmp_path / "cache")
    clean = content_digest(tree.root)
    if forge is _forge_dir_link:
        (tmp_path / "outside").mkdir()
        forge(tree.root, tmp_path / "outside")
    else:
        forge(tree.root)
    assert content_digest(tree.root) != clean
    again = fetch(SdistSource("demo", "1.0", sha), tmp_path / "cache")
    assert again.root == tree.root
    assert content_digest(again.root) == clean
    assert (again.root / "setup.py").read_bytes() == b"# demo\n"
    assert sorted(p.relative_to(again.root).as_posix() for p in again.root.rglob("*")) == [
        "csrc", "csrc/k.cu", "setup.py"]


def test_a_tree_replaced_by_a_link_to_a_copy_is_fetched_again(index, tmp_path) -> None:
    """The same files behind a link: the link's target could change after the check."""
    data = _targz({"demo-1.0/setup.py": b"# demo\n"})
    sha = _publish(index, "demo", "demo-1.0.tar.gz", data)
    for moved in ("tree", "entry"):  # the tree folder, or the cache entry holding it and its marker
        tree = fetch(SdistSource("demo", "1.0", sha), tmp_path / "cache")
        path = tree.root if moved == "tree" else tree.root.parent
        elsewhere = tmp_path / f"elsewhere-{moved}"
        path.rename(elsewhere)
        path.symlink_to(elsewhere)
        again = fetch(SdistSource("demo", "1.0", sha), tmp_path / "cache")
        assert not again.root.is_symlink()
        assert not again.root.parent.is_symlink()
        assert (again.root / "setup.py").read_bytes() == b"# demo\n"
        assert (elsewhere / ("setup.py" if moved == "tree" else "tree/setup.py")).is_file()  # never followed


def test_a_tree_holding_a_fifo_is_never_believed(index, tmp_path) -> None:
    data = _targz({"demo-1.0/setup.py": b"# demo\n"})
    sha = _publish(index, "demo", "demo-1.0.tar.gz", data)
    tree = fetch(SdistSource("demo", "1.0", sha), tmp_path / "cache")
    os.mkfifo(tree.root / "pipe")  # a build that copied it would hang reading it
    assert content_digest(tree.root) is None
    again = fetch(SdistSource("demo", "1.0", sha), tmp_path / "cache")
    assert not (again.root / "pipe").exists()
