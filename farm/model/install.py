"""How a user installs a farm wheel from a farm index: where the compatibility pages and their
catalogue live under the index's root, and the commands.

A command names the wheel, and each farm wheel it pins, by URL and sha256 (PEP 508 direct
references), and adds no index: every other requirement comes from the index the user already
installs from, so no project name is looked up in two places (docs/users.md, "Why the commands
name files"). torch, which a wheel pins by minor, comes from PyTorch's own index for the wheel's
CUDA line, in a step of its own. Shared by the pages (farm.publish.compat, and their script
farm/publish/static/install.js) and by ``farm doctor``'s fixes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PAGE_DIR = "compat"
FIND_PAGE = f"{PAGE_DIR}/find.html"
CATALOG = f"{PAGE_DIR}/wheels.json"  # the records of the pages, for tools (farm doctor --index-url)
CATALOG_VERSION = 2  # 2: each record carries its file's URL and sha256, and the farm wheels it pins
TORCH_INDEX = "https://download.pytorch.org/whl"  # PyTorch's own index, one channel per CUDA line


def _quote(arg: str) -> str:
    return f'"{arg}"'  # double quotes read the same in sh, PowerShell and cmd; a URL holds no " or $


def install_args(rec: Mapping[str, Any], root: str) -> list[str]:
    """The requirements that install a wheel: it and each farm wheel it pins (``project``, ``url``
    under the index root, ``sha256``), by URL and hash. ``root``: the index's URL, ending in ``/``."""
    return [f"{w['project']} @ {root}{w['url']}#sha256={w['sha256']}" for w in (rec, *rec.get("pins", ()))]


def commands(rec: Mapping[str, Any], root: str) -> tuple[str, str]:
    """The pip and uv commands that install a wheel from the index at ``root``."""
    args = " ".join(_quote(a) for a in install_args(rec, root))
    return f"pip install {args}", f"uv pip install {args}"


def torch_step(cuda: str | None, torch: str | None) -> str | None:
    """The torch a wheel was built against, from PyTorch's index for its CUDA line (only that
    index, only for torch): what to install first when it is not installed yet."""
    if not torch or torch == "none" or not cuda:
        return None
    return f"pip install {_quote(f'torch=={torch}.*')} --index-url {TORCH_INDEX}/cu{cuda.replace('.', '')}"
