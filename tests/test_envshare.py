"""farm.builder.envshare: a new build environment's files that are the same as a ready sibling's
become hard links to them. Real venvs with a real wheel installed by pip from a local wheelhouse
(pip copies, as it copies torch), and by uv from its cache (which it links)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from farm.builder import envshare
from farm.builder.buildenv import SPEC_FILE, EnvSpec, ensure_env, find_uv, marker_record, ready_siblings
from farm.builder.envshare import FileFacts, why_not
from tests.support.wheelmaker import make_wheel

PY = ".".join(map(str, sys.version_info[:3]))
EXE = os.path.realpath(sys.executable)
SPEC = EnvSpec(PY, EXE, ("tinypkg",))
DATA = bytes(range(256)) * 8192  # 2 MB, the same in every build of tinypkg
SITE = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
INIT = b"from pathlib import Path\nHERE = Path(__file__).parent\n"
# the console script farm's repair step runs by name: a ready environment must have it
ENTRY_POINTS = b"[console_scripts]\nauditwheel = tinypkg:main\n"


def _wheelhouse(folder: Path, variant: bytes) -> Path:
    """tinypkg 1.0: a data file and two modules the same in every build, one file of the same size
    whose bytes depend on ``variant``; and otherpkg 1.0, for a second environment's contents."""
    make_wheel(folder, "tinypkg", "1.0", {
        "tinypkg/__init__.py": INIT + b"def main():\n    print('tinypkg')\n",
        "tinypkg/mod.py": b"VALUE = 1\n",
        "tinypkg/other.py": b"VALUE = 2\n",
        "tinypkg/data.bin": DATA,
        "tinypkg/variant.bin": variant * 1000,
        "tinypkg-1.0.dist-info/entry_points.txt": ENTRY_POINTS,
    }, tag="py3-none-any")
    make_wheel(folder, "otherpkg", "1.0", {"otherpkg/__init__.py": b"VALUE = 3\n"}, tag="py3-none-any")
    return folder


@pytest.fixture
def wheelhouses(tmp_path: Path) -> tuple[Path, Path]:
    return _wheelhouse(tmp_path / "wh1", b"a" * 64), _wheelhouse(tmp_path / "wh2", b"b" * 64)


def _pip_env() -> dict[str, str]:
    """pip with no configuration of the host: only the wheelhouse given on the command line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV", "PYTHONPATH"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _pip_venv(path: Path, wheelhouse: Path, spec: EnvSpec = SPEC, ready: bool = True) -> Path:
    """A venv with tinypkg installed by pip (farm's pip driving the venv's interpreter, as farm
    installs torch from pip's indexes when uv made the venv), ready as ``ensure_env`` leaves it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(path / "bin" / "python"), "install", "--quiet",
                    "--find-links", str(wheelhouse), "tinypkg"], check=True, env=_pip_env())
    if ready:
        (path / SPEC_FILE).write_text(json.dumps(marker_record(spec, path)))
    return path


def _inode(path: Path) -> tuple[int, int]:
    st = path.lstat()
    return (st.st_dev, st.st_ino)


def _import(env: Path, code: str) -> str:
    out = subprocess.run([str(env / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    return out.stdout.strip()


def _facts(**kw: int) -> FileFacts:
    base = {"size": 10, "mode": 0o100644, "uid": 0, "gid": 0, "mtime": 100, "dev": 1, "ino": 1, "nlink": 1}
    return FileFacts(**{**base, **kw})


def test_only_files_that_may_be_one_file_are_planned() -> None:
    mine = _facts()
    assert why_not("a.so", mine, _facts(ino=2)) is None
    assert why_not("a.so", mine, _facts(ino=2, mtime=5)) is None  # pip stamps install times: a .so still links
    assert why_not("a.so", mine, mine) == "already the same file"
    assert why_not("a.so", _facts(nlink=2), _facts(ino=2)) == "already linked (by the installer)"
    assert why_not("a.so", mine, _facts(ino=2, dev=2)) == "on another file system"
    assert why_not("a.so", mine, _facts(ino=2, size=11)) == "other bytes"
    assert why_not("a.so", _facts(size=0), _facts(ino=2, size=0)) == "empty"
    assert why_not("a.so", mine, _facts(ino=2, mode=0o100755)) == "other permissions or owner"
    assert why_not("a.so", mine, _facts(ino=2, uid=1000)) == "other permissions or owner"
    assert why_not("m.py", mine, _facts(ino=2, mtime=101)) == "a source whose bytecode records its mtime"
    assert why_not("m.py", mine, _facts(ino=2)) is None

    # one source per inode, in sibling order; a file the installer already linked is counted, not read
    a, b = {"x": _facts(ino=2), "y": _facts(ino=3)}, {"x": _facts(ino=2), "y": _facts(ino=4)}
    decided = envshare.plan({"x": mine, "y": _facts(ino=9), "z": _facts(ino=5, nlink=3, size=7)}, [a, b])
    assert [(c.rel, [i for i, _ in c.sources]) for c in decided.candidates] == [("x", [0]), ("y", [0, 1])]
    assert decided.already == 7


def test_identical_files_become_one_inode_and_the_environment_still_works(tmp_path: Path, wheelhouses) -> None:
    wh1, wh2 = wheelhouses
    root = tmp_path / "envs"
    first = _pip_venv(root / "first", wh1)
    new = _pip_venv(root / "new", wh2, ready=False)
    pkg, old_pkg = new / SITE / "tinypkg", first / SITE / "tinypkg"
    assert _inode(pkg / "data.bin") != _inode(old_pkg / "data.bin")  # pip copied

    report = envshare.share(new, [first])

    assert _inode(pkg / "data.bin") == _inode(old_pkg / "data.bin")
    assert (pkg / "data.bin").stat().st_nlink == 2
    assert report.saved >= len(DATA)
    assert report.stopped is None
    # the same size, other bytes: never linked, each keeps its own
    assert _inode(pkg / "variant.bin") != _inode(old_pkg / "variant.bin")
    assert (pkg / "variant.bin").read_bytes() == b"b" * 64000
    assert (old_pkg / "variant.bin").read_bytes() == b"a" * 64000
    # bin/ (scripts naming their own interpreter) and bytecode (naming its path) are never touched
    assert (new / "bin" / "auditwheel").stat().st_nlink == 1
    assert all(p.stat().st_nlink == 1 for p in (pkg / "__pycache__").iterdir())
    assert not list(new.rglob("*.tmp"))  # no temp link left behind

    code = "import tinypkg; print((tinypkg.HERE / 'data.bin').read_bytes() == bytes(range(256)) * 8192)"
    assert _import(new, code) == "True"
    assert subprocess.run([str(new / "bin" / "auditwheel")], capture_output=True, text=True,
                          check=True).stdout.strip() == "tinypkg"


def test_a_source_is_linked_only_with_its_mtime_so_its_bytecode_stays_valid(tmp_path: Path, wheelhouses) -> None:
    wh1, _ = wheelhouses
    first = _pip_venv(tmp_path / "first", wh1)
    new = _pip_venv(tmp_path / "new", wh1, ready=False)
    pkg, old_pkg = new / SITE / "tinypkg", first / SITE / "tinypkg"
    # pip stamps each file with its install time; make one source's the same in both, one's not
    mtime = (pkg / "mod.py").stat().st_mtime
    os.utime(old_pkg / "mod.py", (mtime, mtime))
    os.utime(old_pkg / "other.py", (mtime - 100, mtime - 100))
    pycs = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (pkg / "__pycache__").iterdir()}

    envshare.share(new, [first])

    assert _inode(pkg / "mod.py") == _inode(old_pkg / "mod.py")
    assert _inode(pkg / "other.py") != _inode(old_pkg / "other.py")
    assert _import(new, "import tinypkg.mod, tinypkg.other; print(tinypkg.mod.VALUE + tinypkg.other.VALUE)") == "3"
    # Python found every .pyc valid: none was compiled again (it would have been written anew)
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (pkg / "__pycache__").iterdir()} == pycs


def test_only_ready_siblings_of_the_same_python_and_torch_are_linked_to(tmp_path: Path, wheelhouses) -> None:
    wh1, _ = wheelhouses
    root = tmp_path / "envs"
    new_spec = EnvSpec(PY, EXE, ("tinypkg", "build"))
    ready = _pip_venv(root / SPEC.slug, wh1)
    unready = _pip_venv(root / EnvSpec(PY, EXE, ("tinypkg", "a")).slug, wh1, ready=False)  # interrupted install
    broken = _pip_venv(root / EnvSpec(PY, EXE, ("tinypkg", "b")).slug, wh1, ready=False)
    (broken / SPEC_FILE).write_text("{")
    odd = _pip_venv(root / EnvSpec(PY, EXE, ("tinypkg", "c")).slug, wh1, ready=False)
    (odd / SPEC_FILE).write_text(json.dumps({**SPEC.to_json(), "requirements": [1], "path": str(odd)}))
    torch_spec = EnvSpec(PY, EXE, ("tinypkg",), "torch==2.8.0", "pip")
    other_torch = _pip_venv(root / torch_spec.slug, wh1, spec=torch_spec)
    misnamed = _pip_venv(root / "py-renamed", wh1)  # a ready marker in a folder not named for it
    (root / "link-to-ready").symlink_to(ready)
    new = root / new_spec.slug
    _pip_venv(new, wh1, ready=False)

    assert ready_siblings(new_spec, root, new) == [ready]
    envshare.share(new, ready_siblings(new_spec, root, new))
    data = new / SITE / "tinypkg" / "data.bin"
    assert _inode(data) == _inode(ready / SITE / "tinypkg" / "data.bin")
    for other in (unready, broken, odd, other_torch, misnamed):
        assert (other / SITE / "tinypkg" / "data.bin").stat().st_nlink == 1

    # a sibling whose marker is fine but whose scripts run another folder's interpreter is not ready
    shutil.rmtree(ready / "bin")
    assert ready_siblings(new_spec, root, new) == []


def test_links_are_never_followed(tmp_path: Path, wheelhouses) -> None:
    wh1, _ = wheelhouses
    first = _pip_venv(tmp_path / "envs" / "first", wh1)
    new = _pip_venv(tmp_path / "envs" / "new", wh1, ready=False)
    theirs, mine = first / SITE / "tinypkg", new / SITE / "tinypkg"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.bin").write_bytes(DATA)
    shutil.copytree(theirs, outside / "tinypkg")  # the installed package, copied out of every environment
    # the sibling's data file a link out of the environment, its package folder another
    (theirs / "data.bin").unlink()
    (theirs / "data.bin").symlink_to(outside / "data.bin")
    (first / SITE / "linked_pkg").symlink_to(outside / "tinypkg", target_is_directory=True)
    shutil.copytree(outside / "tinypkg", new / SITE / "linked_pkg")
    # the new environment's own link stays a link
    (mine / "alias.bin").symlink_to(mine / "variant.bin")

    envshare.share(new, [first])

    assert (mine / "data.bin").stat().st_nlink == 1
    assert (outside / "data.bin").stat().st_nlink == 1
    assert all(p.lstat().st_nlink == 1 for p in (new / SITE / "linked_pkg").rglob("*") if p.is_file())
    assert all(p.lstat().st_nlink == 1 for p in (outside / "tinypkg").rglob("*") if p.is_file())
    assert (mine / "alias.bin").is_symlink()


def test_a_file_changed_after_it_was_listed_is_not_linked(tmp_path: Path) -> None:
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(DATA)
    b.write_bytes(DATA)
    a_facts, b_facts = FileFacts.of(a.lstat()), FileFacts.of(b.lstat())
    assert envshare.same_bytes(a, a_facts, b, b_facts)
    b.rename(tmp_path / "b.old")  # kept, so that its inode number is not reused at once
    b.write_bytes(DATA)  # replaced: another inode than the one listed
    assert not envshare.same_bytes(a, a_facts, b, b_facts)
    assert not envshare.link_over(b, b_facts, a, a_facts)
    assert a.stat().st_nlink == 1
    assert not list(tmp_path.glob(".*.tmp"))
    b.unlink()
    assert not envshare.link_over(b, b_facts, a, a_facts)  # gone: the copy stays
    assert a.read_bytes() == DATA


def test_another_file_system_keeps_the_copy(tmp_path: Path, wheelhouses) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on another file system than the tests' temp folder")
    wh1, _ = wheelhouses
    new = _pip_venv(tmp_path / "new", wh1, ready=False)
    sibling = Path(tempfile.mkdtemp(dir=shm))
    try:
        first = _pip_venv(sibling / "first", wh1)
        report = envshare.share(new, [first])  # planned out: nothing read, nothing linked
        assert (report.files, report.saved, report.stopped) == (0, 0, None)
        data = new / SITE / "tinypkg" / "data.bin"
        theirs = first / SITE / "tinypkg" / "data.bin"
        with pytest.raises(OSError, match="cross-device"):  # EXDEV, had it been tried
            envshare.link_over(theirs, FileFacts.of(theirs.lstat()), data, FileFacts.of(data.lstat()))
        assert data.read_bytes() == DATA
        assert not list(data.parent.glob(".*.tmp"))
    finally:
        shutil.rmtree(sibling)


@pytest.mark.slow  # four venvs made by ensure_env: two by venv + pip (ensurepip), two by uv
def test_ensure_env_links_a_new_environment_to_its_ready_sibling(tmp_path: Path, wheelhouses) -> None:
    wh1, _ = wheelhouses
    both = EnvSpec(PY, EXE, ("tinypkg", "otherpkg"))
    environ = {**_pip_env(), "PIP_FIND_LINKS": str(wh1)}
    root = tmp_path / "envs"
    said: list[str] = []
    first = ensure_env(SPEC, root, log=said.append, environ=environ, uv="")
    assert not [line for line in said if "saved" in line]  # no sibling yet: nothing to say
    said.clear()
    second = ensure_env(both, root, log=said.append, environ=environ, uv="")
    (line,) = [line for line in said if "saved" in line]
    # tinypkg's data, and pip's own files but its sources (ensurepip stamps them with the install time)
    saved = re.match(rf"build environment {second.path.name}: (\d+) MB saved, \d+ files ", line)
    assert saved
    assert int(saved[1]) >= 2
    assert "hard-linked to 1 ready environment of the same Python and torch (0 MB already links" in line
    data = "tinypkg/data.bin"
    assert _inode(second.path / SITE / data) == _inode(first.path / SITE / data)
    assert (second.path / SPEC_FILE).is_file()
    assert _import(second.path, "import tinypkg, otherpkg; print(len((tinypkg.HERE / 'data.bin').read_bytes()))") \
        == str(len(DATA))
    assert ensure_env(both, root, log=said.append, environ=environ, uv="").reused

    # uv links what it installs from its cache: those files are left as uv made them
    uv = find_uv()
    if uv is None:
        pytest.skip("uv is not installed")
    uv_env = {**environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_OFFLINE": "1", "UV_FIND_LINKS": str(wh1)}
    said.clear()
    a = ensure_env(SPEC, tmp_path / "uv-envs", log=said.append, environ=uv_env, uv=uv)
    b = ensure_env(both, tmp_path / "uv-envs", log=said.append, environ=uv_env, uv=uv)
    (line,) = [line for line in said if "saved" in line]
    assert line.startswith(f"build environment {b.path.name}: 0 MB saved, ")
    assert "(2 MB already links" in line
    assert _inode(b.path / SITE / data) == _inode(a.path / SITE / data)
    assert (b.path / SITE / data).stat().st_nlink == 3  # uv's cache, a and b
