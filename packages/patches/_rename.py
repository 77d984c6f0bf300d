"""Shared by farm's rename patches: publish a fork under its own name, beside upstream's.

``rename_distribution``: only the distribution (setup.py's ``name=`` and pyproject.toml's
``[project] name``); the modules keep their names, so the fork replaces upstream when installed.
``rename_package``: the import package too (its folder, every Python file under it, setup.py's
package and extension names, strings such as a cache folder ``~/.flex_gemm``), so both install
side by side. Run in the package's build folder; idempotent; a tree that matches neither the
upstream shape nor the patched one stops the build with a message naming the file.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_PYPROJECT_NAME = r'(?m)^(name\s*=\s*["\']){old}(["\'])'
_SETUP_NAME = r'(\bname\s*=\s*["\']){old}(["\'])'


def _sub(path: Path, pattern: str, replacement: str) -> int:
    if not path.is_file():
        return 0
    text = path.read_text(encoding="utf-8")
    new, count = re.subn(pattern, replacement, text)
    if count:
        path.write_text(new, encoding="utf-8")
    return count


def _names_already(path: Path, new: str) -> bool:
    return path.is_file() and re.search(_SETUP_NAME.format(old=re.escape(new)), path.read_text(encoding="utf-8")) \
        is not None


def rename_distribution(old: str, new: str, label: str) -> None:
    setup, pyproject = Path("setup.py"), Path("pyproject.toml")
    done = _sub(setup, _SETUP_NAME.format(old=re.escape(old)), rf"\g<1>{new}\g<2>")
    done += _sub(pyproject, _PYPROJECT_NAME.format(old=re.escape(old)), rf"\g<1>{new}\g<2>")
    if done:
        print(f"{label}: distribution {old} renamed {new}")
    elif _names_already(setup, new) or _sub(pyproject, _PYPROJECT_NAME.format(old=re.escape(new)), r"\g<0>"):
        print(f"{label}: already renamed {new}")
    else:
        sys.exit(f"{label}: setup.py no longer names the distribution {old}; review the patch")


def rename_package(old: str, new: str, label: str) -> None:
    folder, target = Path(old), Path(new)
    if folder.is_dir() and not target.exists():
        folder.rename(target)
        print(f"{label}: package folder {old}/ renamed {new}/")
    elif not target.is_dir():
        sys.exit(f"{label}: no package folder {old}/ (nor {new}/) in {Path.cwd().name}; review the patch")
    word = rf"\b{re.escape(old)}\b"  # o_voxel, not o_voxel_vb: a second run changes nothing
    count = 0
    for path in (Path("setup.py"), *sorted(target.rglob("*.py"))):
        count += _sub(path, word, new)
    count += _sub(Path("pyproject.toml"), _PYPROJECT_NAME.format(old=re.escape(old)), rf"\g<1>{new}\g<2>")
    if not _names_already(Path("setup.py"), new):
        sys.exit(f"{label}: setup.py does not name the distribution {new} after the rename; review the patch")
    print(f"{label}: {count} reference(s) to {old} renamed {new}" if count else f"{label}: already renamed {new}")
