"""Write small, valid wheels for tests (METADATA, WHEEL, RECORD with real hashes)."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.utils import parse_wheel_filename

from farm.provenance.ledgerline import dumps_entry
from farm.provenance.ledgerwrite import FRAGMENT_SUFFIX


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def make_wheel(
    out_dir: Path,
    dist: str,
    version: str,
    files: Mapping[str, bytes | Path],
    *,
    tag: str = "cp311-cp311-linux_x86_64",
    build: str | None = None,
    executables: tuple[str, ...] = (),
    requires: tuple[str, ...] = (),
) -> Path:
    """A wheel holding ``files`` (archive path -> bytes or a file to copy)."""
    name = f"{dist}-{version}" + (f"-{build}" if build else "") + f"-{tag}.whl"
    dist_info = f"{dist}-{version}.dist-info"
    py, abi, plat = tag.split("-")
    metadata = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    wheel_meta = "Wheel-Version: 1.0\nGenerator: farm-tests\nRoot-Is-Purelib: false\n"
    wheel_meta += (f"Build: {build}\n" if build else "") + f"Tag: {py}-{abi}-{plat}\n"
    payload: dict[str, bytes] = {
        path: (src.read_bytes() if isinstance(src, Path) else src) for path, src in files.items()
    }
    payload[f"{dist_info}/METADATA"] = metadata.encode()
    payload[f"{dist_info}/WHEEL"] = wheel_meta.encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    record_lines = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in payload.items():
            info = zipfile.ZipInfo(arc, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            mode = 0o755 if arc in executables else 0o644
            info.external_attr = (0o100000 | mode) << 16
            zf.writestr(info, data)
            record_lines.append(f"{arc},{_record_hash(data)},{len(data)}")
        record_lines.append(f"{dist_info}/RECORD,,")
        zf.writestr(f"{dist_info}/RECORD", "\n".join(record_lines) + "\n")
    return path


def stamped_wheel(dest: Path, entry: dict[str, Any], *, run_id: str = "1",
                  extensions: Mapping[str, bytes] | None = None) -> Path:
    """The wheel ``entry`` (a ledger entry, tests/support/ledgermaker.py) names, carrying that provenance
    as its ``_build_info.json`` (no CUDA code, unless ``extensions``: archive path -> bytes, whose
    hashes the provenance then records), and its ledger fragment beside it, as a build job
    leaves them; ``entry`` gets the wheel's sha256 and size."""
    name, version, build, tags = parse_wheel_filename(entry["filename"])
    tag = next(iter(tags))
    entry["dist"] = name.replace("-", "_")
    entry["run"] = {"provider": "github", "repository": "farm-wheels/farm", "commit": "0" * 40,
                    "run_id": run_id, "attempt": "1"}
    if extensions:
        entry["extensions"] = {path: hashlib.sha256(data).hexdigest() for path, data in extensions.items()}
    info = {k: v for k, v in entry.items() if k not in ("filename", "sha256", "size", "published")}
    dist_info = f"{entry['dist']}-{version}.dist-info"
    wheel = make_wheel(dest, entry["dist"], str(version), {
        f"{entry['dist']}/__init__.py": b"",
        **(extensions or {}),
        f"{dist_info}/_build_info.json": json.dumps(info, indent=1).encode(),
    }, tag=f"{tag.interpreter}-{tag.abi}-{tag.platform}", build=str(build[0]) if build else None)
    assert wheel.name == entry["filename"], (wheel.name, entry["filename"])
    data = wheel.read_bytes()
    entry["sha256"], entry["size"] = hashlib.sha256(data).hexdigest(), len(data)
    # the build job's fragment, in the ledger's line format (farm's publisher validates it)
    (dest / f"{wheel.name}{FRAGMENT_SUFFIX}").write_text(dumps_entry(entry) + "\n")
    return wheel
