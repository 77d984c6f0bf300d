"""``farm explain ARCH_LIST|PATH [--device X.Y]``: the driver model applied to an arch list, or to
what a ``.so`` or a wheel really contains (its runnable fatbins, read by the native reader), with
the drivers it needs (the CUDA runtime of a farm wheel's cell, the ISA of its PTX)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from farm.binary.fatbin import ptx_isa
from farm.binary.inspection import inspect_file, inspect_wheel
from farm.errors import ArchError
from farm.model.arch import ArchList, Kind
from farm.model.devices import products
from farm.model.driver import (
    KNOWN_DEVICES,
    Choice,
    Device,
    explain,
    pick_worst,
)
from farm.model.drivers import Requirement, requirements, table
from farm.provenance.buildinfo import BUILD_INFO_NAME, BuildInfo
from farm.publish.wheelmeta import read_member
from farm.table import format_table

if TYPE_CHECKING:
    from farm.binary.inspection import SoInspection


def _device(text: str) -> Device:
    """``--device``: argparse reports a bad value as a usage error (exit 2) only from its own type."""
    try:
        return Device.parse(text)
    except ArchError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", metavar="ARCH_LIST|PATH",
                        help="an arch list such as '8.0;8.6;9.0+PTX', or a .so/.pyd file or wheel to read")
    parser.add_argument("--device", action="append", type=_device, metavar="X.Y",
                        help="only this compute capability (repeatable); default: every known device")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def choices_json(choices: list[Choice]) -> list[dict[str, object]]:
    return [{"device": str(c.device), "image": c.target.name if c.target else None, "kind": c.kind.value,
             "cuda_arch": c.cuda_arch} for c in choices]


def render_choices(choices: list[Choice]) -> str:
    rows = [(str(c.device), products(c.device), c.target.name if c.target else "-", c.kind.value,
             c.cuda_arch or "-", c.describe()) for c in choices]
    return format_table(("device", "e.g.", "image", "kind", "__CUDA_ARCH__", "what happens"), rows)


_BINARY_SUFFIXES = (".whl", ".so", ".pyd")


def _is_path(what: str) -> bool:
    path = Path(what)
    return path.suffix in _BINARY_SUFFIXES or ".so." in path.name or ("/" in what and path.exists())


def _driver_requirements(path: Path, sos: list[SoInspection]) -> list[Requirement]:
    """The drivers a wheel or .so needs: its CUDA line and nvcc from a farm wheel's provenance;
    a bare .so's PTX ISA from its PTX (its runtime's line is not recorded in it)."""
    has_ptx = any(t.kind is Kind.PTX for so in sos for t in so.found)
    if path.suffix != ".whl":
        isa = next((i for so in sos if (i := ptx_isa(path, so.runnable))), None)
        return requirements(None, isa, has_ptx=has_ptx)
    data = read_member(path, BUILD_INFO_NAME)
    if data is None:
        return []
    info = BuildInfo.from_json(data, where=f"{path}: {BUILD_INFO_NAME}")
    nvcc = info.toolchain.nvcc if info.toolchain else None
    return requirements(info.cell.cuda, table().ptx_isa(nvcc) if nvcc else None, has_ptx=has_ptx,
                        platform=info.cell.platform)


def _run_path(args: argparse.Namespace) -> int:
    path = Path(args.what)
    devices = args.device or KNOWN_DEVICES
    sos = inspect_wheel(path).extensions if path.suffix == ".whl" else (inspect_file(path),)
    out = []
    for so in sos:
        units = so.units
        found = ArchList.of(t for u in units for t in u)
        notes = []
        if any(f.offset in so.stubs for f in so.runnable):
            notes.append("a device-link stub's empty cubins are left out")
        if len(set(units)) > 1:
            notes.append("its translation units hold different images: each device shows the unit that fares worst")
        # per device, the image of the unit that fares worst
        out.append((so, found, [pick_worst(units, d) for d in devices] if so.has_device_code else [], notes))
    needs = _driver_requirements(path, [so for so, *_ in out])
    if args.json:
        print(json.dumps({"path": str(path), "extensions": [
            {"path": so.path, "found": found.canonical(), "notes": notes, "devices": choices_json(choices)}
            for so, found, choices, notes in out], "driver": [r.describe() for r in needs]}, indent=2))
        return 0
    if not out:
        print(f"{path}: no extension modules")
    for r in needs:
        print(f"needs {r.describe()}; older: {r.error}")
    for so, found, choices, notes in out:
        if not so.has_device_code:
            print(f"{so.path}: no device code (host-only): no GPU runs anything from it")
            continue
        print(f"{so.path}: {found.canonical()}" + "".join(f"\n  ({note})" for note in notes))
        print(render_choices(choices))
    return 0


def run(args: argparse.Namespace) -> int:
    if _is_path(args.what):
        return _run_path(args)
    archs = ArchList.parse(args.what, where="ARCH_LIST")
    choices = explain(archs, args.device or KNOWN_DEVICES)
    if args.json:
        print(json.dumps({"arch_list": archs.canonical(), "devices": choices_json(choices)}, indent=2))
    else:
        print(f"arch list: {archs.canonical()}")
        print(render_choices(choices))
    return 0
