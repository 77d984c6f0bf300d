"""The farm's sessions. Each one parses nothing itself: its arguments after ``--`` go to the
``farm`` command of the same name (see ``farm COMMAND --help``), which does the work.

    nox -s matrix -- [PKG...] [--cuda 12.8] [--github-output]
    nox -s build -- demo_ext --cuda 13.0 --python 3.11 --builder native
    nox -s cache-plan -- --json
    nox -s rebuild -- WHEEL --index https://wheels.example/   # the same file again, or what differs
    nox -s simulate -- --runners 60 [--epochs 3] [--warm] [--json]
    nox -s tests
    nox -s tests -- -m "not slow"        # the fast tier: no nvcc, no wheel builds, no big downloads, 2 workers a core
    nox -s tests_fast                    # the fast tier on every supported Python this machine has
    nox -s tests_lowest                  # the fast tier on the lowest versions pyproject.toml allows
    nox -s lint_code typecheck           # ruff and mypy
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import nox
import nox.command

nox.options.default_venv_backend = "uv|venv"  # uv where it is installed (seconds, not minutes); venv otherwise
nox.options.reuse_venv = "yes"
nox.options.download_python = "never"
nox.options.sessions = ["matrix"]

ROOT = Path(__file__).resolve().parent
TEST_CUDA = "13.0"


def _run_farm(session: nox.Session, command: str) -> None:
    """Run ``farm COMMAND`` with the session's arguments. On failure nox itself would exit 1
    whatever farm said; end with farm's own code instead, so 1 (defects), 2 (bad input) and
    3 (environment) mean the same from a session as from the CLI. A failed farm
    command therefore ends the whole nox run, as CI wants."""
    try:
        session.run("farm", command, *session.posargs)
    except nox.command.CommandFailed as exc:
        code = exc.return_code or 1
        session.log(f"farm {command} failed with exit code {code}")
        raise SystemExit(code) from None


def _install(session: nox.Session, *specs: str) -> None:
    """``session.install(*specs)``, skipped while neither the specs nor what an install reads
    (pyproject.toml) changed since this venv last ran it. farm is installed editable, so its
    code is always the checkout's own; a new dependency, extra or entry point reinstalls."""
    venv = getattr(session.virtualenv, "location", None)
    if venv is None:  # no venv of nox's own (--no-venv): always install
        session.install(*specs)
        return
    project = b"".join(p.read_bytes() for p in [*sorted(ROOT.glob("setup.*")), ROOT / "pyproject.toml"])
    want = hashlib.sha256(json.dumps(specs).encode() + b"\0" + project).hexdigest()
    marker = Path(venv) / ".farm-installed"
    if marker.is_file() and marker.read_text() == want:
        return
    session.install(*specs)
    # written as an install step, so `nox -R` (which skips installs) leaves the marker as it was
    session.run_install("python", "-c", "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text(sys.argv[2])",
                        str(marker), want, silent=True)


def _farm(session: nox.Session, command: str) -> None:
    _install(session, "-e", ".[build]")  # the maintainer's tooling; a user's `farm doctor` needs only `.`
    _run_farm(session, command)


def _toolkit(session: nox.Session, cuda: str) -> str:
    """Assemble (or reuse) a CUDA_HOME from NVIDIA's PyPI wheels; return its path."""
    out = session.run(
        "farm", "toolkit", "--cuda", cuda, "--root", str(ROOT), "--json",
        silent=True,
    )
    if not isinstance(out, str):
        session.error("farm toolkit printed nothing")
    cuda_home: str = json.loads(out)["cuda_home"]
    return cuda_home


@nox.session
def matrix(session: nox.Session) -> None:
    """Cells still to build (filters, phantoms, ledger, stale, lint)."""
    _farm(session, "matrix")


@nox.session
def lint(session: nox.Session) -> None:
    """The arch-gate lint on a package's pinned source."""
    _farm(session, "lint")


@nox.session
def build(session: nox.Session) -> None:
    """Build a package's cells (cibuildwheel or native), then postbuild each wheel."""
    _farm(session, "build")


@nox.session
def postbuild(session: nox.Session) -> None:
    """Assert, relabel, stamp and write ledger fragments for built wheels."""
    _install(session, "-e", ".[build]")  # cuobjdump (in the build extra): the assertion's second reader
    _run_farm(session, "postbuild")


@nox.session(name="slice")
def slice_(session: nox.Session) -> None:
    """One shard's build entries from the wave's plan."""
    _farm(session, "slice")


@nox.session(name="publish-shard")
def publish_shard(session: nox.Session) -> None:
    """Publish one build shard's wheels, one artifact at a time."""
    _install(session, "-e", ".[upload]")
    _run_farm(session, "publish-shard")


@nox.session
def wave(session: nox.Session) -> None:
    """After a run's publish jobs: published and failed cells, next wave?"""
    _farm(session, "wave")


@nox.session
def chain(session: nox.Session) -> None:
    """Dispatch the next wave, merged with the run already waiting."""
    _farm(session, "chain")


@nox.session
def upload(session: nox.Session) -> None:
    """Gate, publish, merge ledger fragments."""
    _install(session, "-e", ".[build,upload]")
    _run_farm(session, "upload")


@nox.session
def audit(session: nox.Session) -> None:
    """Sweep published wheels against their own provenance."""
    _farm(session, "audit")


@nox.session
def attestation(session: nox.Session) -> None:
    """Record a published wheel's attestation in the ledger, or check what GitHub's says."""
    _farm(session, "attestation")


@nox.session
def rebuild(session: nox.Session) -> None:
    """Build a published wheel's cell again from its provenance and compare the files."""
    _farm(session, "rebuild")


@nox.session
def backfill(session: nox.Session) -> None:
    """Write inferred ledger entries for unledgered wheels."""
    _farm(session, "backfill")


@nox.session
def index(session: nox.Session) -> None:
    """Regenerate the static PEP 503 index from the ledger."""
    _install(session, "-e", ".[build,upload]")  # the wheel-variant channel's metadata needs variantlib
    _run_farm(session, "index")


@nox.session(name="cache-plan")
def cache_plan(session: nox.Session) -> None:
    """The Actions cache plan: each cache key's size against the repository's 10 GB."""
    _farm(session, "cache-plan")


@nox.session
def simulate(session: nox.Session) -> None:
    """An epoch bump drained on a simulated GitHub: days, runner-hours, work redone, limits, goals."""
    _farm(session, "simulate")


@nox.session
def explain(session: nox.Session) -> None:
    """Per device capability: the image the driver picks for an arch list or a built wheel."""
    _farm(session, "explain")


# The suite starts farm, pip and uv as processes of their own hundreds of times: each would
# compile its modules again where the environment tells Python not to write their bytecode.
WRITE_BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}
# The fast tier's workers (pytest-xdist): two per core. Its tests wait about half their time (on the
# processes they start, on servers, on deadlines), so a core that one worker leaves idle runs another's.
FAST_WORKERS = ["-n", str(2 * (os.cpu_count() or 1))]


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite, with a CUDA toolkit assembled from NVIDIA's PyPI wheels, and the branch
    coverage of farm/ it reaches (settings in pyproject.toml; farm commands the tests start as
    processes of their own are measured too). The fast tier (``-- -m "not slow"``) runs two
    workers per core, without coverage: measuring its tests' farm processes took half its CPU time,
    and its tests share no fixture that is expensive to make twice."""
    _install(session, "-e", ".[test]")
    cuda_home = _toolkit(session, TEST_CUDA)
    run = FAST_WORKERS if "not slow" in session.posargs else ["--cov", "--cov-report=term"]
    session.run("pytest", *run, *session.posargs, env={"CUDA_HOME": cuda_home, **WRITE_BYTECODE})


# The oldest and the newest Python the project supports (requires-python), and those between.
PYTHONS = ["3.11", "3.12", "3.13"]


@nox.session(python=PYTHONS)
def tests_fast(session: nox.Session) -> None:
    """The fast tier (no nvcc, no wheel builds, no big downloads) on each supported Python."""
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "not slow", *FAST_WORKERS, *session.posargs, env=WRITE_BYTECODE)


@nox.session(python=PYTHONS[0], venv_backend="uv")
def tests_lowest(session: nox.Session) -> None:
    """The fast tier with every direct dependency at the lowest version pyproject.toml allows, on
    the oldest supported Python: a lower bound that is too low fails here."""
    session.install("--resolution", "lowest-direct", "-e", ".[test]")
    session.run("pytest", "-m", "not slow", *FAST_WORKERS, *session.posargs, env=WRITE_BYTECODE)


@nox.session
def lint_code(session: nox.Session) -> None:
    """ruff over farm, tests, benchmarks and the noxfile (rules in pyproject.toml)."""
    session.install("ruff>=0.17")  # the rule codes pyproject.toml names
    session.run("ruff", "check", *session.posargs, ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy: strict on farm/, the noxfile and the benchmarks; the tests' bodies checked (pyproject.toml)."""
    # the test extra: the tests import pytest, hypothesis, wheel and selenium
    session.install("-e", ".[test]", "mypy>=1.13", "types-PyYAML", "types-jsonschema")
    session.run("mypy", *session.posargs)
