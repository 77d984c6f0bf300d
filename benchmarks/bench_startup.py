"""What each start-up speed trick buys of the user's command, as whole processes.

A trick (switching the cyclic garbage collector off and leaving through ``os._exit``, not importing
:mod:`dataclasses`, :mod:`typing` or :mod:`json`, importing jsonschema only to validate) is kept in
farm only where it buys >= 20% of the command a user types; below that, plain Python is worth more
than the milliseconds. This benchmark measures each share, so the decision is made on numbers.

The user's commands, each by the ``farm`` console script of a regular install (see
``_harness.installed_farm``):

- ``farm inspect LIB``: ``libcublasLt.so`` from ``nvidia-cublas`` (what ``bench_fatbin.py`` fetches);
- ``farm doctor --device 9.0 --driver 580.65.06 --json`` in the same light install (no farm wheel
  installed: nothing to validate);
- ``farm lint demo_ext`` in this repository, its answer remembered (``farm.lint.memo``): the warm
  run a maintainer gets after the first;
- ``farm matrix --no-lint`` in this repository (its recipes and ledger): the matrix alone.

The anchor of every share is the command as this tree installs it, and a trick's share is what
it alone would buy of it: the CPU it saves where it is measured, over the anchor's. Each trick is
applied or undone from outside farm's code, by a launcher in the same environment that runs the
same dispatch:

- ``gc off + os._exit``: the collector disabled before farm is imported, ``os._exit`` once the
  output is flushed; ``gc on + normal exit``: ``sys.exit(main())``, the interpreter's own teardown.
  Their difference is that trick's share, whether the farm under test has it or not.
- ``import X first``: the module imported before farm (for the lint, the modules its cold path
  imports: rules, recipes, sources). On a farm that avoids X the difference is
  what not importing X buys (a lower bound for dataclasses: its per-class code generation is not
  in it); on a farm that imports X anyway it is noise around 0.

``--rev LABEL=REV`` also installs a git revision (``--rev tricks=1620ccd``: the code before the
tricks went back to plain Python; ``--rev sealed=0673ea8``: the sealed lint answers, verified
without importing hashlib) and measures it the same way, so the whole difference between
the two is printed too. Each command runs ``--runs`` times, all taking turns; shares use the
minimum CPU time (user + system) of each series. Exit status 1 when a trick that farm has today
would buy < 20% alone (it should go), or one it does without would buy >= 20% (it should stay),
unless the share is within 3 points of 20% (borderline: the machine's load moves a share that much).

    python benchmarks/bench_startup.py [--runs 15] [--rev LABEL=REV ...] [--cache DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, installed_farm, interleaved, measure, table
from bench_fatbin import fetch_library

from farm.filestamp import RACY_NS

THRESHOLD = 0.20  # a trick is kept where it alone buys at least this share of the command
# a share this close to THRESHOLD is within what a shared machine's load moves it by between runs:
# reported as borderline, decided by the code's plainness, not counted as wrong
BORDER = 0.03

# launchers: the console script's own two lines (pip's script imports re and sys), with a trick
# applied or undone around them; {prelude} is an import made before farm's
_CONSOLE = """import re, sys
{prelude}from farm.cli import console
sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
sys.exit(console())
"""
_GC_OFF_OS_EXIT = """import gc, os, re, sys
gc.disable()
from farm.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
"""
_GC_ON_NORMAL_EXIT = """import re, sys
from farm.cli import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass(frozen=True)
class Trick:
    name: str
    command: str  # the user's command it is measured on
    with_trick: str  # the launcher variant that has the trick
    without: str  # the one that does not
    kept: bool  # whether farm has it today (then it must buy >= THRESHOLD, and is marked where it lives)


TRICKS = (
    Trick("gc off + os._exit", "farm inspect LIB", "gc off + os._exit", "gc on + normal exit", kept=False),
    Trick("not importing dataclasses", "farm inspect LIB", "as installed", "import dataclasses first", kept=False),
    Trick("not importing typing", "farm inspect LIB", "as installed", "import typing first", kept=False),
    Trick("not importing json", "farm inspect LIB", "as installed", "import json first", kept=False),
    # measured over a farm that imports dataclasses, typing and json already: the readers' own
    # imports of those belong to the tricks above
    Trick("cuobjdump's, the wheel's and zstd's modules imported where used", "farm inspect LIB",
          "import dataclasses, typing, json first", "import those and the other readers first", kept=False),
    Trick("jsonschema imported only to validate", "farm doctor", "as installed", "import jsonschema first",
          kept=True),
    Trick("the cache seal's hashes without importing hashlib", "farm lint demo_ext (warm)", "as installed",
          "import hashlib and hmac first", kept=False),
    Trick("the lint's cold path imported only on a miss", "farm lint demo_ext (warm)", "as installed",
          "import the lint's cold path first", kept=True),
    Trick("the matrix's lint imported only to lint", "farm matrix --no-lint", "as installed",
          "import the matrix's lint first", kept=True),
    Trick("gc off while the ledger index and the matrix are built", "farm matrix --no-lint", "as installed",
          "gc.disable and gc.freeze made no-ops", kept=False),
)
# what a cold `farm lint PKG` imports that a warm one does not
_LINT_COLD_PATH = ("json", "dataclasses", "pathlib", "farm.lint.api", "farm.lint.rules", "farm.lint.compiled",
                   "farm.model.config", "farm.model.cells", "farm.model.archrequest", "farm.source.fetch",
                   "farm.schedule.matrixlint", "farm.progress")
# what `farm inspect LIB` with the native reader does not use: cuobjdump (subprocess), the wheel
# reader (zipfile), the zstd codec
_OTHER_READERS = ("farm.binary.cuobjdump", "farm.binary.wheelfile", "zstandard")
# what `farm matrix` imports to lint the packages it schedules
_MATRIX_LINT = ("farm.builder.builders", "farm.source.fetch", "farm.lint.api")


def launchers(farm: Path) -> dict[str, list[str]]:
    """Variant label -> argv prefix, for the farm whose console script is ``farm``."""
    python = farm.with_name("python")
    folder = farm.parent.parent / "launchers"
    folder.mkdir(exist_ok=True)
    sources = {"as installed (launcher)": _CONSOLE.format(prelude=""),
               "gc off + os._exit": _GC_OFF_OS_EXIT, "gc on + normal exit": _GC_ON_NORMAL_EXIT}
    sources["import hashlib and hmac first"] = _CONSOLE.format(prelude="import hashlib, hmac\n")
    for module in ("dataclasses", "typing", "json", "jsonschema"):
        sources[f"import {module} first"] = _CONSOLE.format(prelude=f"import {module}\n")
    sources["import the lint's cold path first"] = _CONSOLE.format(
        prelude="".join(f"import {module}\n" for module in _LINT_COLD_PATH))
    # farm's own gc.disable()/gc.freeze() calls undone from outside (the collector stays on)
    sources["gc.disable and gc.freeze made no-ops"] = _CONSOLE.format(
        prelude="import gc\ngc.disable = gc.freeze = lambda: None\n")
    sources["import dataclasses, typing, json first"] = _CONSOLE.format(prelude="import dataclasses, typing, json\n")
    sources["import those and the other readers first"] = _CONSOLE.format(
        prelude="".join(f"import {module}\n" for module in ("dataclasses", "typing", "json", *_OTHER_READERS)))
    sources["import the matrix's lint first"] = _CONSOLE.format(
        prelude="".join(f"import {module}\n" for module in _MATRIX_LINT))
    out = {"as installed": [str(farm)]}
    for label, source in sources.items():
        script = folder / ("".join(c if c.isalnum() else "_" for c in label) + ".py")
        script.write_text(source)
        out[label] = [str(python), str(script)]
    return out


def installed_revision(cache: Path, rev: str) -> Path:
    """The console script of a regular install of git revision ``rev`` of this repository."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                         capture_output=True, text=True, check=True).stdout.strip()
    tree = cache / f"rev-{sha[:12]}"
    if not (tree / "src" / "pyproject.toml").exists():
        (tree / "src").mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile() as archive:
            subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", sha], stdout=archive, check=True)
            archive.seek(0)
            with tarfile.open(fileobj=archive) as tar:
                tar.extractall(tree / "src", filter="data")
    return installed_farm(tree, source=tree / "src")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--rev", action="append", default=[], metavar="LABEL=REV",
                        help="also measure this git revision (e.g. tricks=1620ccd)")
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "bench")
    args = parser.parse_args()

    lib = fetch_library("13", args.cache)
    farms = {"this tree": installed_farm(args.cache)}
    for item in args.rev:
        label, _, rev = item.partition("=")
        farms[label] = installed_revision(args.cache / "revs", rev or label)
    print(f"library: {lib.name} ({lib.stat().st_size / 1e6:.0f} MB)")
    time.sleep(RACY_NS / 1e9)  # farm's modules are inputs of a remembered lint: old enough to trust
    commands: dict[str, list[str]] = {}
    for farm_label, farm in farms.items():
        variants = launchers(farm)
        lint_cache = farm.parent.parent / "lint-cache"
        shutil.rmtree(lint_cache, ignore_errors=True)
        user = {"farm inspect LIB": ["inspect", str(lib)],
                "farm doctor": ["doctor", "--device", "9.0", "--driver", "580.65.06", "--json"],
                "farm lint demo_ext (warm)": ["lint", "demo_ext", "--root", str(REPO), "--cache-dir", str(lint_cache)],
                "farm matrix --no-lint": ["matrix", "--no-lint", "--root", str(REPO), "--cache-dir", str(lint_cache)]}
        measure([str(farm), *user["farm lint demo_ext (warm)"]])  # the cold run, which remembers its answer
        if not list((lint_cache / "lint").glob("cmd-*")):
            raise SystemExit(f"{farm_label}: farm lint demo_ext remembered no answer: the warm runs would be cold")
        for command, argv in user.items():
            wanted = {"as installed", "as installed (launcher)"} | {
                v for t in TRICKS if t.command == command for v in (t.with_trick, t.without)}
            for variant in sorted(wanted):
                commands[f"{farm_label}: {command}: {variant}"] = [*variants[variant], *argv]
    results = interleaved(commands, args.runs, ok=(0, 1))
    print(table(list(results.values())))
    print()

    def cpu(farm_label: str, command: str, variant: str) -> float:
        return results[f"{farm_label}: {command}: {variant}"].cpu[0]

    saved: dict[str, float] = {}  # per trick, the most CPU it buys on any farm measured
    for farm_label in farms:
        print(f"{farm_label}:")
        for command in user:
            base = cpu(farm_label, command, "as installed")
            launcher = cpu(farm_label, command, "as installed (launcher)")
            print(f"  {command}: {base * 1000:.1f} ms CPU as installed; through a launcher {launcher / base:.3f} of it")
        for t in TRICKS:
            base = cpu(farm_label, t.command, "as installed")
            here = cpu(farm_label, t.command, t.without) - cpu(farm_label, t.command, t.with_trick)
            saved[t.name] = max(saved.get(t.name, here), here)
            print(f"  {t.name}: buys {here * 1000:+.1f} ms, {here / base:+.1%} of this farm's {t.command}")
        print()
    labels = list(farms)
    for command in user:
        first = cpu(labels[0], command, "as installed")
        for other in labels[1:]:
            theirs = cpu(other, command, "as installed")
            print(f"{command}: {other} / {labels[0]}, CPU (min): {theirs / first:.3f} "
                  f"({theirs * 1000:.1f} ms against {first * 1000:.1f} ms)")
    if len(farms) == 1:
        print("(an import this farm makes anyway costs it nothing more: give --rev with a revision that "
              "avoids them to measure what not importing them buys)")
    # A trick alone: this tree's command (the anchor) with only that trick, which saves what it
    # saved where it was measured.
    print()
    ok = True
    for t in TRICKS:
        anchor = cpu(labels[0], t.command, "as installed")
        share = saved[t.name] / anchor
        borderline = abs(share - THRESHOLD) < BORDER
        met = (share >= THRESHOLD) == t.kept or borderline
        ok &= met
        verdict = "borderline" if borderline else "right" if met else "WRONG"
        print(f"{t.name}: alone buys {saved[t.name] * 1000:.1f} ms, {share:.1%} of {t.command} "
              f"({anchor * 1000:.1f} ms; kept only at >= {THRESHOLD:.0%}): farm "
              f"{'keeps it' if t.kept else 'does without'}: {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
