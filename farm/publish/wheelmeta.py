"""Reading one ``.dist-info`` member of a wheel (``_build_info.json``, ``METADATA``) through
:class:`farm.binary.wheelfile.SafeWheel`, which validates the whole archive first."""

from __future__ import annotations

from pathlib import Path

from farm.binary.wheelfile import SafeWheel
from farm.errors import WheelError


def read_member(path: Path, name: str) -> bytes | None:
    """The bytes of ``<dist-info>/<name>``, or None when the wheel has no such member."""
    with SafeWheel(Path(path)) as wheel:
        dist_info = wheel.dist_info()
        if dist_info is None:
            raise WheelError("expected exactly one .dist-info directory", where=Path(path).name,
                             hint="rebuild the wheel; the wheel spec allows exactly one")
        member = f"{dist_info}/{name}"
        if member not in wheel.names():
            return None
        return wheel.read(member)
