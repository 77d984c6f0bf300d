"""The local version label a farm wheel carries: ``cu128torch2.8``, or ``cu128`` without torch.

One builder (:func:`local_label`) and one parser (:func:`parse_local_label`): the stamp writes the
label, and postbuild, backfill and the index read a cell back from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NO_TORCH = "none"

# cu + the CUDA line's digits (major is two digits since CUDA 10: cu128 is 12.8, cu1210 is 12.10),
# then torch and its minor for a torch-linked package.
_LABEL = re.compile(r"cu(?P<major>[1-9]\d)(?P<minor>\d+)(?:torch(?P<torch>\d+\.\d+))?")


@dataclass(frozen=True)
class LocalLabel:
    cuda: str  # "12.8"
    torch: str  # "2.8", or "none" for a package that does not link torch

    @property
    def cu(self) -> str:
        return cu_tag(self.cuda)

    def __str__(self) -> str:
        return local_label(self.cuda, self.torch)


def cu_tag(cuda: str) -> str:
    """``12.8`` -> ``cu128``."""
    return "cu" + cuda.replace(".", "")


def local_label(cuda: str, torch: str) -> str:
    """``cu128torch2.8`` for a torch-linked cell, ``cu128`` when ``torch`` is ``none``."""
    return cu_tag(cuda) + (f"torch{torch}" if torch != NO_TORCH else "")


def parse_local_label(text: str | None) -> LocalLabel | None:
    """The cell a label names, or None when ``text`` is not a farm label (``+cpu``, none at all)."""
    m = _LABEL.fullmatch(text or "")
    return LocalLabel(f"{m['major']}.{int(m['minor'])}", m["torch"] or NO_TORCH) if m else None
