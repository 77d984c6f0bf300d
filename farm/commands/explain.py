"""``farm explain ARCH_LIST [--device X.Y]``: the driver model applied to an arch list."""

from __future__ import annotations

import argparse
import json

from ..arch import ArchList
from ..driver import DEVICE_EXAMPLES, KNOWN_DEVICES, Choice, Device, explain
from ..table import format_table


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", metavar="ARCH_LIST", help="an arch list such as '8.0;8.6;9.0+PTX'")
    parser.add_argument("--device", action="append", type=Device.parse, metavar="X.Y",
                        help="only this compute capability (repeatable); default: every known device")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def choices_json(choices: list[Choice]) -> list[dict[str, object]]:
    return [
        {
            "device": str(c.device),
            "image": c.target.name if c.target else None,
            "kind": c.kind.value,
            "cuda_arch": c.cuda_arch,
        }
        for c in choices
    ]


def render_choices(choices: list[Choice]) -> str:
    rows = [
        (str(c.device), DEVICE_EXAMPLES.get(c.device, ""), c.target.name if c.target else "-",
         c.kind.value, c.cuda_arch or "-", c.describe())
        for c in choices
    ]
    return format_table(("device", "e.g.", "image", "kind", "__CUDA_ARCH__", "what happens"), rows)


def run(args: argparse.Namespace) -> int:
    archs = ArchList.parse(args.what, where="ARCH_LIST")
    choices = explain(archs, args.device or KNOWN_DEVICES)
    if args.json:
        print(json.dumps({"arch_list": archs.canonical(), "devices": choices_json(choices)}, indent=2))
    else:
        print(f"arch list: {archs.canonical()}")
        print(render_choices(choices))
    return 0
