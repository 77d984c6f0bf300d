"""A CUDA redist tree in NVIDIA's layout, made from NVIDIA's real CUDA 13 PyPI wheels, served on 127.0.0.1.

NVIDIA's download site is not reachable from the test machines; its layout is: one
``redistrib_<release>.json`` per release, and per component and platform one archive
``<comp>/<platform>/<comp>-<platform>-<version>-archive.tar.xz`` unpacking to one top folder of
the same stem with ``bin/ include/ lib/`` (and for CUDA 12's ``cuda_nvcc`` also ``nvvm/`` and
``include/crt``). The wheels' ``nvidia/cu13/`` trees are those folders' contents, so repacking
them gives archives whose nvcc really compiles.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support import loopback

# component -> the CUDA 13.0 wheel (the versions _defaults.yml pins for the 13.0 line)
WHEELS: dict[str, str] = {
    "cuda_nvcc": "nvidia-cuda-nvcc==13.0.88",
    "cuda_crt": "nvidia-cuda-crt==13.0.88",
    "libnvvm": "nvidia-nvvm==13.0.88",
    "cuda_cudart": "nvidia-cuda-runtime==13.0.96",
    "cuda_cccl": "nvidia-cuda-cccl==13.0.85",
    "cuda_cuobjdump": "nvidia-cuda-cuobjdump==13.2.51",
    "cuda_nvtx": "nvidia-nvtx==13.0.85",
}
PLATFORM = "linux-x86_64"


def download_wheels(dest: Path, *, windows: bool = False) -> dict[str, Path]:
    """The wheels (Linux x86_64, or win_amd64), fetched by pip (its cache and configuration) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    target = ["--platform", "win_amd64", "--python-version", "3.11"] if windows else []
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *target,
                    "--disable-pip-version-check", "-q", "-d", str(dest), *WHEELS.values()],
                   check=True, capture_output=True, text=True)
    out = {}
    for comp, req in WHEELS.items():
        name, version = req.split("==")
        (wheel,) = dest.glob(f"{name.replace('-', '_')}-{version}-*.whl")
        out[comp] = wheel
    return out


def _wheel_files(wheel: Path) -> Iterator[tuple[str, zipfile.ZipInfo, bytes]]:
    """(path under nvidia/cu13/, info, data) of every file the wheel installs there."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.filename.startswith("nvidia/cu13/") and not info.is_dir():
                yield info.filename[len("nvidia/cu13/"):], info, zf.read(info)


def _add(tf: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode = len(data), mode
    tf.addfile(ti, io.BytesIO(data))


def pack(root: Path, comp: str, version: str, files: Sequence[tuple[str, zipfile.ZipInfo | None, bytes]],
         *, extra_members: Sequence[tarfile.TarInfo] = (), platform: str = PLATFORM) -> dict[str, object]:
    """Write one archive in NVIDIA's layout (.zip for Windows); return its manifest entry."""
    stem = f"{comp}-{platform}-{version}-archive"
    windows = platform.startswith("windows")
    rel = f"{comp}/{platform}/{stem}.{'zip' if windows else 'tar.xz'}"
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if windows:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            zf.writestr(f"{stem}/LICENSE", b"NVIDIA Software License (test repack)\n")
            for name, _, data in files:
                zf.writestr(f"{stem}/{name}", data)
            for member in extra_members:
                zf.writestr(member.name, b"x")
    else:
        with tarfile.open(path, "w:xz", preset=0) as tf:  # a fast preset: the test packs ~300 MB
            _add(tf, f"{stem}/LICENSE", b"NVIDIA Software License (test repack)\n")
            for name, info, data in files:
                executable = info is not None and (info.external_attr >> 16) & 0o111
                _add(tf, f"{stem}/{name}", data,
                     0o755 if executable or name.startswith(("bin/", "nvvm/bin/")) else 0o644)
            for member in extra_members:
                tf.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    data = path.read_bytes()
    return {"relative_path": rel, "sha256": hashlib.sha256(data).hexdigest(),
            "md5": hashlib.md5(data).hexdigest(), "size": str(len(data))}  # NVIDIA writes sizes as strings


def write_manifest(root: Path, release: str, entries: Mapping[str, tuple[str, dict[str, object]]],
                   *, platform: str = PLATFORM) -> Path:
    doc: dict[str, object] = {"release_date": "2026-01-01", "release_label": release, "release_product": "cuda"}
    for comp, (version, entry) in entries.items():
        doc[comp] = {"name": comp.replace("_", " ").upper(), "license": "CUDA Toolkit", "version": version,
                     platform: entry}
    path = root / f"redistrib_{release}.json"
    path.write_text(json.dumps(doc, indent=4))
    return path


def build_tree(root: Path, wheels: Mapping[str, Path], *, release: str, cuda12_layout: bool = False,
               platform: str = PLATFORM) -> None:
    """The CUDA 13 layout (cuda_crt and libnvvm apart), or CUDA 12's (both inside cuda_nvcc)."""
    contents = {comp: list(_wheel_files(w)) for comp, w in wheels.items()}
    if cuda12_layout:
        contents["cuda_nvcc"] += contents.pop("cuda_crt") + contents.pop("libnvvm")
    entries = {}
    for comp, files in contents.items():
        version = WHEELS[comp].split("==")[1]
        entries[comp] = (version, pack(root, comp, version, files, platform=platform))
    write_manifest(root, release, entries, platform=platform)


CUT: set[str] = set()  # URL paths the server cuts off halfway (an interrupted download)
SERVED: list[str] = []  # every path requested, in order


class _Quiet(loopback.QuietHandler):
    def do_GET(self) -> None:
        SERVED.append(self.path)
        if self.path not in CUT:
            return super().do_GET()
        data = Path(self.translate_path(self.path)).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True
        return None


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """``root`` over HTTP on 127.0.0.1, each request counted in SERVED; yields the base URL (ending in /)."""
    with loopback.serve(root, _Quiet) as url:
        yield url


def mirror_with(root: Path, src: Path, replace: Mapping[str, bytes]) -> None:
    """A copy of tree ``src`` at ``root`` (links for speed) with some files' bytes replaced."""
    for path in src.rglob("*"):
        if path.is_dir():
            continue
        rel = path.relative_to(src).as_posix()
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if rel in replace:
            dest.write_bytes(replace[rel])
        else:
            dest.symlink_to(path)
