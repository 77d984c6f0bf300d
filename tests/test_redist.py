"""The toolkit from NVIDIA's redistributable archives, against a redist tree served on 127.0.0.1.

The tree is made from NVIDIA's real CUDA 13.0 wheels repacked in NVIDIA's archive layout
(tests/support/redisttree.py), once per session: its nvcc compiles, and a real build is asserted.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from farm.cli import main
from farm.errors import ToolError
from farm.model.config import ToolkitConfig, ToolkitLine
from farm.provenance.buildinfo import BuildInfo
from farm.toolkit.assemble import ensure_toolkit
from farm.toolkit.manifest import parse_manifest
from farm.toolkit.request import request_for
from tests.support import redisttree
from tests.support.buildroot import DEMO_RECIPE, REPO, make_root

KERNEL = r"""
#include <cuda_runtime.h>
__global__ void twice(int* x) { x[threadIdx.x] *= 2; }
extern "C" int launch(int* x) { twice<<<1, 32>>>(x); return (int)cudaGetLastError(); }
"""
CUDA13 = ["cuda_nvcc", "cuda_crt", "libnvvm", "cuda_cudart", "cuda_cccl", "cuda_cuobjdump"]


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(root folder, base URL): the redist trees under root, served on 127.0.0.1 for the session."""
    root = tmp_path_factory.mktemp("redist")
    wheels = redisttree.download_wheels(tmp_path_factory.mktemp("wheels"))
    redisttree.build_tree(root / "good", wheels, release="13.0.2")
    # CUDA 12's layout: nvvm/ and include/crt inside cuda_nvcc, no cuda_crt or libnvvm component.
    # libnvvm.so (for JIT users, not nvcc's compile path) is left out to keep the repack quick.
    legacy = root / "legacy"
    doc = json.loads((root / "good" / "redistrib_13.0.2.json").read_text())
    files = [f for comp in ("cuda_nvcc", "cuda_crt", "libnvvm") for f in redisttree._wheel_files(wheels[comp])
             if not f[0].startswith("lib/libnvvm")]
    entries = {"cuda_nvcc": ("13.0.88", redisttree.pack(legacy, "cuda_nvcc", "13.0.88", files))}
    for comp in ("cuda_cudart", "cuda_cccl", "cuda_cuobjdump"):
        rel = doc[comp]["linux-x86_64"]["relative_path"]
        (legacy / rel).parent.mkdir(parents=True, exist_ok=True)
        (legacy / rel).symlink_to(root / "good" / rel)
        entries[comp] = (doc[comp]["version"], doc[comp]["linux-x86_64"])
    redisttree.write_manifest(legacy, "13.0.1", entries)
    with redisttree.serve(root) as url:
        yield root, url


@pytest.fixture(scope="session")
def redist_toolkit(served: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """``farm toolkit --source redist`` from the served tree: (its --json, prefix)."""
    _, url = served
    prefix = tmp_path_factory.mktemp("tk") / "13.0"
    out = _farm("toolkit", "--cuda", "13.0", "--source", "redist", "--release", "13.0.2",
                "--redist-url", url + "good/", "--prefix", str(prefix), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), prefix


def _farm(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``farm`` as a maintainer runs it: a process of its own, from the repository root."""
    return subprocess.run([sys.executable, "-c", "import sys; from farm.cli import main; sys.exit(main())", *argv],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False)


def _config(release: str, components: list[str]) -> ToolkitConfig:
    line = ToolkitLine("13.0", release, None, "redist", tuple(components), {}, "test")
    return ToolkitConfig(torch_components=(), lines={"13.0": line})


def _mirror(served, name: str, replace_files: dict[str, bytes]) -> str:
    root, url = served
    redisttree.mirror_with(root / name, root / "good", replace_files)
    return f"{url}{name}/"


def _archive(served, comp: str) -> tuple[str, bytes]:
    root, _ = served
    doc = json.loads((root / "good" / "redistrib_13.0.2.json").read_text())
    rel = doc[comp]["linux-x86_64"]["relative_path"]
    return rel, (root / "good" / rel).read_bytes()


def _nothing_usable(prefix: Path) -> None:
    assert not prefix.exists()
    leftovers = [p.name for p in prefix.parent.iterdir() if p.name.startswith(f".{prefix.name}.")]
    assert leftovers == [], leftovers  # no staging folder, no .part file


# -- a CUDA_HOME from the archives ----------------------------------------------------------------
def test_assembles_a_cuda_home_whose_nvcc_reports_the_line(redist_toolkit, served) -> None:
    data, _prefix = redist_toolkit
    _, url = served
    home = Path(data["cuda_home"])
    assert data["source"] == "redist"
    assert data["release"] == "13.0.2"
    assert data["version"] == "13.0.88"
    assert data["manifest_url"] == url + "good/redistrib_13.0.2.json"
    manifest = (served[0] / "good" / "redistrib_13.0.2.json").read_bytes()
    assert data["manifest_sha256"] == hashlib.sha256(manifest).hexdigest()
    doc = json.loads(manifest)
    assert [c["name"] for c in data["components"]] == CUDA13
    for comp in data["components"]:  # each archive's sha256, as the manifest lists it
        assert comp["sha256"] == doc[comp["name"]]["linux-x86_64"]["sha256"]
        assert comp["version"] == doc[comp["name"]]["version"]
    version = subprocess.run([str(home / "bin/nvcc"), "--version"], capture_output=True, text=True, check=True)
    assert "release 13.0," in version.stdout
    assert (home / "lib64").resolve() == (home / "lib").resolve()
    assert (home / "lib" / "libcudart.so").readlink() == Path("libcudart.so.13")  # the dev link -lcudart needs
    # these archives (repacked wheels) ship no driver stub: farm makes the one -lcuda needs
    assert "libcuda.so.1" in subprocess.run(["readelf", "-d", str(home / "lib64/stubs/libcuda.so")],
                                            capture_output=True, text=True, check=True).stdout
    assert (home / "nvvm" / "bin" / "cicc").is_file()
    assert (home / "include" / "crt" / "host_defines.h").is_file()
    assert (home / "licenses" / "cuda_nvcc" / "LICENSE").is_file()  # top-level files do not collide


def test_its_nvcc_compiles_and_links(redist_toolkit, tmp_path) -> None:
    data, _ = redist_toolkit
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    so = tmp_path / "libk.so"
    subprocess.run([data["nvcc"], "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_80,code=sm_80",
                    str(src), "-o", str(so)], check=True, capture_output=True, text=True)
    listing = subprocess.run([data["cuobjdump"], "--list-elf", str(so)], capture_output=True, text=True, check=True)
    assert "sm_80" in listing.stdout


def test_a_second_call_is_cached_and_needs_no_network(redist_toolkit) -> None:
    data, prefix = redist_toolkit
    out = _farm("toolkit", "--cuda", "13.0", "--source", "redist", "--release", "13.0.2",
                "--redist-url", "http://127.0.0.1:9/gone/", "--prefix", str(prefix), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == data
    assert "assembling" not in out.stderr


def test_the_cuda12_layout_nvvm_and_crt_inside_cuda_nvcc(served, tmp_path) -> None:
    _, url = served
    request = request_for(_config("13.0.1", ["cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_cuobjdump"]), "13.0",
                          redist_url=url + "legacy/")
    toolkit = ensure_toolkit(request, tmp_path / "tk")
    assert [c.name for c in toolkit.components] == ["cuda_nvcc", "cuda_cudart", "cuda_cccl", "cuda_cuobjdump"]
    assert (toolkit.cuda_home / "nvvm" / "bin" / "cicc").is_file()
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    subprocess.run([str(toolkit.nvcc), "-c", "-gencode=arch=compute_80,code=sm_80", str(src), "-o",
                    str(tmp_path / "k.o")], check=True, capture_output=True, text=True)


def test_two_concurrent_calls_assemble_once(served, tmp_path) -> None:
    _, url = served
    prefix = tmp_path / "tk"
    argv = ["toolkit", "--cuda", "13.0", "--source", "redist", "--release", "13.0.2", "--redist-url", url + "good/",
            "--prefix", str(prefix), "--json"]
    code = "import sys; from farm.cli import main; sys.exit(main())"
    rel, _ = _archive(served, "cuda_nvcc")
    before = redisttree.SERVED.count(f"/good/{rel}")
    procs = [subprocess.Popen([sys.executable, "-c", code, *argv], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert json.loads(outs[0][0]) == json.loads(outs[1][0])
    # one download: the other call waited on the lock and found the toolkit ready
    assert redisttree.SERVED.count(f"/good/{rel}") - before == 1


# -- what is refused, and leaves nothing usable --------------------------------------------------
def test_one_flipped_byte_exits_3_naming_component_url_and_both_hashes(served, tmp_path) -> None:
    rel, data = _archive(served, "cuda_cudart")
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0x01
    url = _mirror(served, "flipped", {rel: bytes(flipped)})
    prefix = tmp_path / "tk"
    out = _farm("toolkit", "--cuda", "13.0", "--source", "redist", "--release", "13.0.2", "--redist-url", url,
                "--prefix", str(prefix))
    assert out.returncode == 3, out.stderr
    assert "cuda_cudart" in out.stderr
    assert url + rel in out.stderr
    assert hashlib.sha256(bytes(flipped)).hexdigest() in out.stderr
    assert hashlib.sha256(data).hexdigest() in out.stderr
    _nothing_usable(prefix)


def test_a_truncated_archive_is_refused(served, tmp_path) -> None:
    rel, data = _archive(served, "cuda_cccl")
    url = _mirror(served, "truncated", {rel: data[: len(data) - 4096]})
    prefix = tmp_path / "tk"
    with pytest.raises(ToolError, match="does not match the manifest") as err:
        ensure_toolkit(request_for(_config("13.0.2", CUDA13), "13.0", redist_url=url), prefix)
    assert err.value.exit_code == 3
    _nothing_usable(prefix)


def test_an_interrupted_download_is_never_used(served, tmp_path) -> None:
    rel, _ = _archive(served, "cuda_nvcc")
    redisttree.CUT.add(f"/good/{rel}")
    prefix = tmp_path / "tk"
    killed = tmp_path / ".tk.staging-999999999-a1b2"  # an earlier assembly, killed midway
    (killed / "cuda").mkdir(parents=True)
    request = request_for(_config("13.0.2", CUDA13), "13.0", redist_url=served[1] + "good/")
    try:
        with pytest.raises(ToolError, match="cuda_nvcc"):
            ensure_toolkit(request, prefix)
    finally:
        redisttree.CUT.discard(f"/good/{rel}")
    _nothing_usable(prefix)


def _evil_tree(served, name: str, member: tarfile.TarInfo) -> str:
    root, url = served
    tree = root / name
    entry = redisttree.pack(tree, "cuda_evil", "1.0", [("include/evil.h", None, b"//\n")], extra_members=[member])
    redisttree.mirror_with(tree, root / "good", {})
    doc = json.loads((root / "good" / "redistrib_13.0.2.json").read_text())
    doc["cuda_evil"] = {"name": "evil", "license": "x", "version": "1.0", "linux-x86_64": entry}
    (tree / "redistrib_13.0.2.json").unlink()
    (tree / "redistrib_13.0.2.json").write_text(json.dumps(doc))
    return f"{url}{name}/"


@pytest.mark.parametrize("kind", ["traversal", "absolute", "link-out"])
def test_an_unsafe_member_is_refused_before_anything_is_unpacked(served, tmp_path, kind) -> None:
    stem = "cuda_evil-linux-x86_64-1.0-archive"
    if kind == "traversal":
        member = tarfile.TarInfo(f"{stem}/../../../../evil.txt")
    elif kind == "absolute":
        member = tarfile.TarInfo(str(tmp_path / "evil.txt"))
    else:
        member = tarfile.TarInfo(f"{stem}/lib/libevil.so")
        member.type, member.linkname = tarfile.SYMTYPE, "../../../../../etc/passwd"
    if member.isfile():
        member.size = 1
    url = _evil_tree(served, f"evil-{kind}", member)
    prefix = tmp_path / "tk"
    with pytest.raises(ToolError, match="unsafe member|links outside") as err:
        ensure_toolkit(request_for(_config("13.0.2", ["cuda_evil"]), "13.0", redist_url=url), prefix)
    assert "cuda_evil" in str(err.value)
    _nothing_usable(prefix)
    assert not (tmp_path / "evil.txt").exists()


def test_an_unknown_component_lists_the_manifest_keys_with_did_you_mean(served, tmp_path) -> None:
    _, url = served
    out = _farm("toolkit", "--cuda", "13.0", "--source", "redist", "--release", "13.0.2", "--redist-url",
                url + "good/", "--prefix", str(tmp_path / "tk"), "--component", "cuda_nvtxx")
    assert out.returncode == 2
    assert "did you mean 'cuda_nvtx'" in out.stderr
    assert "cuda_cccl, cuda_crt, cuda_cudart" in out.stderr
    assert not (tmp_path / "tk").exists()


def test_a_missing_release_lists_the_pinned_ones(served, tmp_path) -> None:
    _, url = served
    out = _farm("toolkit", "--cuda", "13.0", "--source", "redist", "--release", "13.0.9", "--redist-url",
                url + "good/", "--prefix", str(tmp_path / "tk"))
    assert out.returncode == 3
    assert "redistrib_13.0.9.json" in out.stderr
    assert "12.8: 12.8.1" in out.stderr


def test_a_manifest_that_is_not_json_or_lacks_the_platform(served, tmp_path) -> None:
    url = _mirror(served, "notjson", {"redistrib_13.0.2.json": b"<html>not found</html>"})
    out = _farm("toolkit", "--cuda", "13.0", "--source", "redist", "--release", "13.0.2", "--redist-url", url,
                "--prefix", str(tmp_path / "tk"))
    assert out.returncode == 3
    assert f"{url}redistrib_13.0.2.json is not a CUDA redistrib manifest" in out.stderr
    _, good = served
    out = _farm("toolkit", "--cuda", "13.0", "--source", "redist", "--release", "13.0.2", "--redist-url",
                good + "good/", "--prefix", str(tmp_path / "tk"), "--platform", "windows-x86_64")
    assert out.returncode == 3
    assert "has no windows-x86_64 archive of cuda_nvcc" in out.stderr
    assert not (tmp_path / "tk").exists()


def test_a_pinned_manifest_sha256_is_enforced(served, tmp_path) -> None:
    request = request_for(_config("13.0.2", CUDA13), "13.0", redist_url=served[1] + "good/")
    with pytest.raises(ToolError, match="pinned " + "0" * 64):
        ensure_toolkit(replace(request, manifest_sha256="0" * 64), tmp_path / "tk")
    assert not (tmp_path / "tk").exists()


def test_the_manifest_parser_reads_nvidias_shape_and_refuses_others() -> None:
    doc: dict[str, Any] = {"release_date": "2025-10-01", "release_label": "13.0.2", "release_product": "cuda",
           "cuda_nvcc": {"name": "CUDA NVCC", "license": "CUDA Toolkit", "version": "13.0.88",
                         "linux-x86_64": {"relative_path": "cuda_nvcc/linux-x86_64/x-archive.tar.xz",
                                          "sha256": "a" * 64, "md5": "b" * 32, "size": "1234"}}}
    m = parse_manifest(json.dumps(doc).encode(), url="u", sha256="c" * 64)
    assert m.components["cuda_nvcc"].archives["linux-x86_64"].size == 1234
    assert m.components["cuda_nvcc"].archives["linux-x86_64"].stem == "x-archive"
    doc["cuda_nvcc"]["linux-x86_64"]["relative_path"] = "../../etc/passwd"
    with pytest.raises(ToolError, match="leaves the redist root"):
        parse_manifest(json.dumps(doc).encode(), url="u", sha256="c" * 64)


# -- a real build with the redist toolkit -----------------------------------------------------------
def test_farm_build_with_the_redist_toolkit_writes_an_asserted_wheel_naming_its_components(served, tmp_path,
                                                                                           capsys, monkeypatch) -> None:
    _, url = served
    root = tmp_path / "farm"
    make_root(root, {"demo_ext": DEMO_RECIPE.format(arch="8.0")},
              {"examples/demo_ext": REPO / "examples" / "demo_ext"})
    monkeypatch.setenv("FARM_CUDA_REDIST_URL", url + "good/")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    rc = main(["build", "demo_ext", "--cuda", "13.0", "--builder", "native", "--toolkit-source", "redist",
               "--root", str(root), "--out", str(tmp_path / "out"), "--json"])
    assert rc == 0, capsys.readouterr().err
    (wheel,) = (tmp_path / "out").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        raw = zf.read(next(n for n in zf.namelist() if n.endswith("_build_info.json")))
    info = json.loads(raw)
    assert BuildInfo.from_json(raw).to_json() == raw  # the toolkit record reads and writes back byte for byte
    assert info["assertion"]["result"] == "passed"
    assert info["provenance"] == "asserted"
    toolkit = info["toolchain"]["toolkit"]
    assert toolkit["source"] == "redist"
    assert toolkit["release"] == "13.0.2"
    assert toolkit["manifest_url"] == url + "good/redistrib_13.0.2.json"
    doc = json.loads((served[0] / "good" / "redistrib_13.0.2.json").read_text())
    assert {c["name"]: c["sha256"] for c in toolkit["components"]} == {
        name: doc[name]["linux-x86_64"]["sha256"] for name in CUDA13}
    ledger = json.loads(Path(str(wheel) + ".ledger.json").read_text())
    assert ledger["toolchain"]["toolkit"] == toolkit


# -- Windows: .zip archives, lib/x64, assembled on any host -------------------------------------------
@pytest.fixture(scope="session")
def windows_tree(served: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    root, url = served
    wheels = redisttree.download_wheels(tmp_path_factory.mktemp("winwheels"), windows=True)
    redisttree.build_tree(root / "win", {c: w for c, w in wheels.items() if c != "cuda_nvtx"},
                          release="13.0.2", platform="windows-x86_64")
    return url + "win/"


def test_a_windows_toolkit_from_zip_archives(windows_tree, tmp_path) -> None:
    prefix = tmp_path / "tk"
    out = _farm("toolkit", "--cuda", "13.0", "--source", "redist", "--release", "13.0.2", "--platform", "win_amd64",
                "--redist-url", windows_tree, "--prefix", str(prefix), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    home = Path(data["cuda_home"])
    assert data["nvcc"].endswith("bin/nvcc.exe")
    assert (home / "bin" / "cuobjdump.exe").is_file()
    assert (home / "lib" / "x64" / "cudart.lib").is_file()
    assert not (home / "lib64").exists()
    # nvcc.exe cannot run here: the manifest's cuda_nvcc version stands in, and is of the line
    assert data["version"] == "13.0.88"
    assert [c["name"] for c in data["components"]] == CUDA13


def test_a_zip_member_outside_its_top_folder_is_refused(served, tmp_path) -> None:
    root, url = served
    tree = root / "evil-zip"
    entry = redisttree.pack(tree, "cuda_evil", "1.0", [("include/evil.h", None, b"//\n")],
                            extra_members=[tarfile.TarInfo("cuda_evil-windows-x86_64-1.0-archive/../../evil.txt")],
                            platform="windows-x86_64")
    redisttree.write_manifest(tree, "13.0.2", {"cuda_evil": ("1.0", entry)}, platform="windows-x86_64")
    request = request_for(_config("13.0.2", ["cuda_evil"]), "13.0", platform="windows-x86_64", redist_url=url + "evil-zip/")
    with pytest.raises(ToolError, match="unsafe member"):
        ensure_toolkit(request, tmp_path / "tk")
    _nothing_usable(tmp_path / "tk")
