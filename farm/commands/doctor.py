"""``farm doctor [--python PY] [--device X.Y]... [--driver V] [--index-url URL] [--json]``: will the
CUDA extensions installed here run on this machine's GPUs and driver, with this torch?

Run in the user's environment. Needs no toolkit and imports no torch: GPUs and driver come from
the driver's libraries (NVML, libcuda, then nvidia-smi), wheels from their provenance and the
native fatbin reader, torch from its metadata. ``--device``/``--driver`` answer for another
machine. Exit 1 when something will fail, with the fix; 4 when nothing was found to fail but the
GPU or the driver was unknown ("cannot tell", not "nothing will fail"). A fix names the farm index
given (``--index-url``, else ``FARM_INDEX_URL``), else the one each wheel was installed from by URL.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable

from farm.doctor.catalog import try_fetch
from farm.doctor.diagnose import Diagnosis, Severity, diagnose, requirements_of
from farm.doctor.environment import python_paths, scan
from farm.doctor.machine import given, probe
from farm.errors import EXIT_CANNOT_TELL, EXIT_DEFECT, EXIT_OK, FarmError
from farm.model.driver import Device
from farm.model.drivers import DriverVersion, minimum_driver, table
from farm.table import format_table


def _typed(parse: Callable[[str], object]) -> Callable[[str], object]:
    """argparse reports only its own error types as usage errors (exit 2, with the usage line)."""
    def convert(text: str) -> object:
        try:
            return parse(text)
        except FarmError as exc:
            raise argparse.ArgumentTypeError(f"{exc.message} ({exc.hint})" if exc.hint else exc.message) from None
    return convert


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--python", metavar="PY",
                        help="the python of the environment to check (default: the one running farm)")
    parser.add_argument("--device", action="append", type=_typed(Device.parse), metavar="X.Y",
                        help="answer for a GPU of this compute capability instead of this machine's (repeatable)")
    parser.add_argument("--driver", type=_typed(DriverVersion.parse), metavar="VERSION",
                        help="answer for this driver version (e.g. 550.54) instead of this machine's")
    parser.add_argument("--index-url", metavar="URL", default=os.environ.get("FARM_INDEX_URL") or None,
                        help="the root of the farm index the fixes install from (its compat/wheels.json names "
                             "the wheel to install instead; default: $FARM_INDEX_URL, else the index each wheel "
                             "was installed from by URL)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


_MARK = {Severity.FAIL: "FAIL", Severity.WARN: "warn", Severity.OK: "ok", Severity.INFO: "info"}


def to_json(d: Diagnosis) -> dict[str, object]:
    env, machine = d.environment, d.machine
    return {
        "machine": machine.to_json(),
        "python": env.python,
        "torch": {"version": env.torch.version, "cuda": env.torch.cuda} if env.torch else None,
        "packages": [
            {"dist": p.dist, "version": p.version, "location": p.location,
             "provenance": p.build_info.provenance if p.build_info else "inspected",
             "cell": p.build_info.cell.to_dict() if p.build_info else None,
             "minimum_driver": [r.describe() for r in requirements_of(p, machine.platform)],
             "extensions": [{"path": e.path, "found": e.found.canonical(), "ptx_isa": e.ptx_isa,
                             "ptx_bytes": e.ptx_bytes, "modified": e.modified} for e in p.extensions]}
            for p in env.packages
        ],
        "verdicts": [v.to_json() for v in d.verdicts],
        "findings": [f.to_json() for f in d.findings],
        "failed": d.failed,
        "answer": _answer(d),
        "unchecked": list(d.unchecked),
    }


def _answer(d: Diagnosis) -> str:
    return "will fail" if d.failed else "cannot tell" if d.cannot_tell else "nothing will fail"


def render(d: Diagnosis) -> str:
    m, env = d.machine, d.environment
    driver = f"driver {m.driver} (JIT reads PTX up to CUDA {table().newest_cuda(m.driver) or '?'})" if m.driver \
        else "driver unknown"
    gpus = ", ".join(str(g) for g in m.gpus) or "no GPU"
    torch = f"torch {env.torch.version} (CUDA {env.torch.cuda or 'unknown'})" if env.torch else "no torch"
    lines = [f"machine ({m.source}): {gpus}; {driver}", f"environment: {env.python}; {torch}"]
    for p in env.packages:
        c = p.build_info.cell if p.build_info else None
        prov = (f"farm {p.build_info.provenance}: CUDA {c.cuda}, torch {c.torch}, {c.python}, {c.platform}"
                if p.build_info and c else "no farm provenance: inspected")
        need = minimum_driver(requirements_of(p, m.platform))
        lines.append(f"\n{p.dist} {p.version} ({prov})" + (f"; needs {need.describe()}" if need else ""))
        rows = [(e.path, e.found.canonical(), e.ptx_isa or "-") for e in p.extensions]
        if rows:
            lines.append(format_table(("extension", "images", "PTX ISA"), rows))
    if d.verdicts:
        rows2 = [(v.package, v.extension.rsplit("/", 1)[-1], str(v.gpu.device),
                  v.choice.target.name if v.choice.target else "-", v.choice.kind.value,
                  "yes" if v.stub_risk else "-") for v in d.verdicts]
        lines.append("\n" + format_table(("package", "extension", "GPU", "image", "kind", "stub risk"), rows2))
    lines.append("")
    for f in d.findings:
        if f.severity is Severity.OK:
            continue
        head = " ".join(x for x in (f.package, f.where) if x)
        lines.append(f"{_MARK[f.severity]}: {head + ': ' if head else ''}{f.what}")
        if f.fix:
            lines.append(f"  fix: {f.fix}")
    fails = sum(f.severity is Severity.FAIL for f in d.findings)
    warns = sum(f.severity is Severity.WARN for f in d.findings)
    checked = sum(len(p.extensions) for p in env.packages)
    if fails:
        lines.append(f"\n{fails} will fail, {warns} warning(s)")
    elif d.cannot_tell:
        lines.append(f"\ncannot tell whether {checked} CUDA extension(s) run here: not checked: "
                     + "; ".join(d.unchecked) + f"{f' ({warns} warning(s))' if warns else ''}")
    else:
        lines.append(f"\nnothing will fail ({checked} CUDA extension(s) checked"
                     + (f", {warns} warning(s))" if warns else ")"))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    machine = given(args.device or [], args.driver) if args.device or args.driver else probe()
    paths, tag = python_paths(args.python) if args.python else (None, None)
    env = scan(paths, args.python, tag)
    indexes = {args.index_url} if args.index_url else {p.index_url for p in env.packages if p.index_url}
    catalogs, errors = {}, {}
    for url in sorted(indexes):
        catalog, why = try_fetch(url)
        if catalog is not None:
            catalogs[url] = catalog
        if why is not None:
            errors[url] = why
    d = diagnose(machine, env, index_url=args.index_url, catalogs=catalogs, catalog_errors=errors)
    if args.json:
        print(json.dumps(to_json(d), indent=2))
    else:
        print(render(d))
    return EXIT_DEFECT if d.failed else EXIT_CANNOT_TELL if d.cannot_tell else EXIT_OK
