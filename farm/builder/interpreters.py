"""The interpreter a native build of a cell runs: any CPython of the grid, from one farm process.

cibuildwheel finds every Python of a row in its container (``/opt/python/cp3XX-cp3XX``); the
native builder finds them on the host, in this order:

1. the interpreter running farm, when it is the cell's version;
2. uv's managed interpreters (``uv python find X.Y``, which never downloads);
3. pyenv's (``$PYENV_ROOT/versions/X.Y.*``, newest first);
4. ``pythonX.Y`` in each folder of ``PATH`` (a pyenv shim that names no installed version fails
   its probe and the next folder is tried).

Each candidate is started once and asked its version and whether it has ``venv`` and
``ensurepip`` (a build environment is a venv of it): a file that merely has the right name is
never believed. None found: :func:`find_interpreter` returns None and says where it looked;
with uv present, :func:`install_managed` installs one (``uv python install X.Y``, a download),
and :func:`managed_download` says beforehand, from uv's own list and without the network, the URL
that download comes from (the preflight checks that its server answers).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from farm import jsonread
from farm.errors import ToolError, clip

_PROBE = ("import platform, sys, importlib.util as u; "
          "print(platform.python_implementation(), platform.python_version(), "
          "u.find_spec('venv') is not None and u.find_spec('ensurepip') is not None)")
# An interpreter's start on a host whose load is many times its cores (a CI runner's neighbours, a
# build farm's busy host) has been seen to take well over 30 s: a slow answer is not a missing Python.
PROBE_TIMEOUT_S = 120


TIMED_OUT = "did not answer its probe within"


@dataclass(frozen=True)
class Interpreter:
    path: Path
    version: str  # "3.12.1"
    found_by: str  # "farm" | "uv" | "pyenv" | "PATH"

    @property
    def tag(self) -> str:
        """``cp312``."""
        major, minor = self.version.split(".")[:2]
        return f"cp{major}{minor}"


@dataclass(frozen=True)
class Search:
    """What :func:`find_interpreter` found, and each place it looked (for the refusal's message)."""

    wanted: str  # "3.12"
    interpreter: Interpreter | None
    looked: tuple[str, ...]
    timed_out: tuple[str, ...] = ()  # candidates that did not answer their probe in time (a loaded host)

    def missing(self, note: str | None = None) -> str:
        """Why there is none, for the refusal (``note``: what uv can do about it): a probe that
        timed out is said as such (the host is too busy to answer), not as a missing Python."""
        looked = "; ".join((*self.looked, note) if note else self.looked)
        if self.timed_out:
            return (f"Python {self.wanted} did not answer its probe within {PROBE_TIMEOUT_S} s "
                    f"({', '.join(self.timed_out)}; the host is loaded?) (looked: {looked})")
        return f"no Python {self.wanted} here (looked: {looked})"


def version_of_tag(tag: str) -> str:
    """``cp312`` -> ``3.12``."""
    m = re.fullmatch(r"cp(\d)(\d+)", tag)
    if m is None:
        raise ValueError(f"{tag!r} is not a CPython tag")
    return f"{m[1]}.{m[2]}"


def probe(path: Path | str, wanted: str, *, timeout: float = PROBE_TIMEOUT_S) -> tuple[Interpreter | None, str]:
    """``path`` as an interpreter of version ``wanted`` (``3.12``), or None and why not (a
    timeout says :data:`TIMED_OUT`)."""
    try:
        proc = subprocess.run([str(path), "-I", "-c", _PROBE], capture_output=True, text=True, check=False,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"{path}: {TIMED_OUT} {timeout:g} s"
    except OSError as exc:
        return None, f"{path}: does not run ({exc})"
    fields = proc.stdout.split()
    if proc.returncode != 0 or len(fields) != 3:
        return None, f"{path}: does not run ({clip((proc.stderr or proc.stdout).strip()[-200:], 200)})"
    impl, version, has_venv = fields
    if impl != "CPython" or ".".join(version.split(".")[:2]) != wanted:
        return None, f"{path}: is {impl} {version}"
    if has_venv != "True":
        return None, f"{path}: has no venv/ensurepip module (on Debian: apt-get install python{wanted}-venv)"
    return Interpreter(Path(path), version, ""), ""


def _candidates(wanted: str, environ: Mapping[str, str], uv: str | None) -> Iterator[tuple[str, str | None]]:
    """(how it was found, path or None when that route has nothing)."""
    yield "farm", sys.executable if f"{sys.version_info[0]}.{sys.version_info[1]}" == wanted else None
    if uv:
        try:
            proc = subprocess.run([uv, "python", "find", wanted], capture_output=True,
                                  text=True, check=False, timeout=PROBE_TIMEOUT_S,
                                  env={**environ, "UV_PYTHON_DOWNLOADS": "never"})
            found = proc.stdout.strip() if proc.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            found = None
        yield "uv", found
    pyenv_root = environ.get("PYENV_ROOT") or (str(Path.home() / ".pyenv") if shutil.which("pyenv") else None)
    if pyenv_root:
        versions = sorted(Path(pyenv_root, "versions").glob(f"{wanted}.*"), reverse=True,
                          key=lambda p: tuple(int(n) for n in re.findall(r"\d+", p.name)))
        yield from _each("pyenv", [exe for d in versions if (exe := d / "bin" / f"python{wanted}").is_file()])
    folders = environ.get("PATH", "").split(os.pathsep)
    yield from _each("PATH", [exe for f in folders
                              if (exe := Path(f or ".") / f"python{wanted}").is_file() and os.access(exe, os.X_OK)])


def _each(how: str, paths: list[Path]) -> list[tuple[str, str | None]]:
    """(how, path) for each of ``paths``; (how, None) when there are none."""
    return [(how, str(p)) for p in paths] or [(how, None)]


def find_interpreter(tag: str, *, environ: Mapping[str, str] | None = None, uv: str | None = None,
                     timeout: float = PROBE_TIMEOUT_S) -> Search:
    """The first working CPython of the cell's tag (``cp312``) on this host; never downloads.
    ``timeout``: each candidate's probe, in seconds."""
    environ = os.environ if environ is None else environ
    wanted = version_of_tag(tag)
    looked: list[str] = []
    slow: list[str] = []
    seen: set[str] = set()
    for how, path in _candidates(wanted, environ, uv):
        if path is None:
            looked.append(f"{how}: no python{wanted}")
            continue
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        found, why = probe(path, wanted, timeout=timeout)
        if found is not None:
            return Search(wanted, Interpreter(found.path, found.version, how), tuple(looked))
        looked.append(f"{how}: {why}")
        if TIMED_OUT in why:
            slow.append(str(path))
    return Search(wanted, None, tuple(looked), tuple(slow))


def managed_download(tag: str, uv: str, *, environ: Mapping[str, str] | None = None) -> str | None:
    """The URL ``uv python install X.Y`` downloads this host's CPython of the cell's tag from
    (``uv python list X.Y --only-downloads``: uv's built-in list, its mirror settings applied, no
    network); None when uv offers none."""
    wanted = version_of_tag(tag)
    try:
        proc = subprocess.run([uv, "python", "list", wanted, "--only-downloads", "--output-format", "json"],
                              capture_output=True, check=False, timeout=PROBE_TIMEOUT_S,
                              env=dict(os.environ if environ is None else environ))
        entries = jsonread.loads(proc.stdout[:1 << 20]) if proc.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    for entry in entries if isinstance(entries, list) else []:
        if (isinstance(entry, dict) and entry.get("implementation") == "cpython"
                and entry.get("variant") == "default" and isinstance(entry.get("url"), str)
                and str(entry.get("version", "")).startswith(f"{wanted}.")):
            return str(entry["url"])
    return None


def install_managed(tag: str, uv: str) -> Interpreter:
    """``uv python install X.Y`` (a download from uv's Python builds), then the interpreter uv finds."""
    wanted = version_of_tag(tag)
    env = dict(os.environ)
    proc = subprocess.run([uv, "python", "install", wanted], capture_output=True, text=True, check=False,
                          timeout=1800, env=env)
    if proc.returncode != 0:
        raise ToolError(f"uv python install {wanted} failed (rc {proc.returncode}): "
                        f"{clip((proc.stderr or proc.stdout).strip()[-500:])}",
                        hint=f"install Python {wanted} another way (pyenv, the distribution's python{wanted})")
    search = find_interpreter(tag, environ=env, uv=uv)
    if search.interpreter is None:
        raise ToolError(f"uv installed Python {wanted} but it does not run: {'; '.join(search.looked)}")
    return search.interpreter
