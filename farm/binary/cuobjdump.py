"""cuobjdump, NVIDIA's own reader and the assertion's second opinion: finding it, running it,
parsing its listing.

Its quirks, as measured on cuobjdump 13.x: PTX entries print as ``sm_NN``; SASS loses its ``f``;
rc 255 means both "no device code" and "broken file"; rc 1 can follow partial output; "No ELF/PTX
file found" goes to stderr with rc 0. A missing or failing cuobjdump is an error, never "unverified".

The assertion runs one cuobjdump version, :data:`PINNED`: the build extra installs exactly it, a
cell's build spec and its provenance record it, and the upload gate re-inspects a wheel with the
version its provenance records (:func:`pinned_cuobjdump`), never with another one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from farm.binary.fatbin import EntryKind, read_fatbins
from farm.binary.madeby import MadeBy
from farm.errors import BinaryFormatError, ToolError
from farm.model.arch import Kind, Target, Variant

DEFAULT_TIMEOUT = 300.0
# The assertion's cuobjdump: pyproject.toml's build and upload extras pin nvidia-cuda-cuobjdump to it
# (tests/test_cuobjdump.py holds the two equal). A new version is a deliberate change of both.
PINNED = "13.5.37"
_EXE = "cuobjdump.exe" if os.name == "nt" else "cuobjdump"
# Where NVIDIA's PyPI wheels put the binary: nvidia-cuda-cuobjdump (13.x) and its -cu12 sibling.
_WHEEL_DIRS = ("nvidia/cu13/bin", "nvidia/cuda_cuobjdump/bin")
# ``<name>.<n>.sm_90.cubin``; nvcc leaves out ``.<n>`` (and names the source, not the object) when
# it keeps line information (-lineinfo, -G): ``antialias.sm_90.cubin``
_LINE = re.compile(r"^(ELF|PTX) file\s+(\d+): .*?(?:\.\d+)?\.(sm_\d+[af]?)\.(cubin|ptx)$")
_NOISE = re.compile(r"^(\s*|cuobjdump info\s*:.*No (ELF|PTX) file found.*)$")
_VERSION = re.compile(r"V(\d+\.\d+\.\d+)")
_INSTALL_HINT = (
    "install it: `pip install nvidia-cuda-cuobjdump` (into the interpreter running farm), put a CUDA "
    "toolkit's bin/ on PATH, or set CUDA_HOME"
)


@dataclass(frozen=True)
class ListedEntry:
    """One line of cuobjdump's listing, normalised: PTX as ``compute_NN``."""

    kind: EntryKind
    target: Target
    index: int  # cuobjdump's running number for that kind

    @property
    def name(self) -> str:
        return self.target.name


def _site_dirs() -> list[Path]:
    paths = sysconfig.get_paths()
    dirs = [Path(paths[key]) for key in ("platlib", "purelib") if key in paths]
    dirs.extend(Path(p) for p in sys.path if p.endswith("site-packages"))
    return list(dict.fromkeys(dirs))


def _candidates(cuda_home: Path | None) -> list[Path]:
    """PATH, then ``cuda_home`` (default ``$CUDA_HOME``)/bin, then the PyPI wheel in this interpreter."""
    candidates: list[Path] = []
    on_path = shutil.which("cuobjdump")
    if on_path:
        candidates.append(Path(on_path))
    home = cuda_home or (Path(os.environ["CUDA_HOME"]) if os.environ.get("CUDA_HOME") else None)
    if home is not None:
        candidates.append(Path(home) / "bin" / _EXE)
    for site in _site_dirs():
        candidates.extend(site / sub / _EXE for sub in _WHEEL_DIRS)
    return list(dict.fromkeys(candidates))


def find_cuobjdump(cuda_home: Path | None = None, *, version: str | None = None) -> Path:
    """The first cuobjdump of PATH, ``cuda_home`` (default ``$CUDA_HOME``)/bin and the PyPI wheel
    in this interpreter; with ``version``, the first that reports exactly that version."""
    candidates = [c for c in _candidates(cuda_home) if c.is_file() and os.access(c, os.X_OK)]
    if version is None and candidates:
        return candidates[0]
    found = []
    for candidate in candidates:
        try:
            have = cuobjdump_version(candidate)
        except ToolError:
            have = "unrunnable"
        if have == version:
            return candidate
        found.append(f"{candidate} ({have})")
    if version is None:
        looked = ["PATH", *(str(c) for c in _candidates(cuda_home))]
        raise ToolError(f"cuobjdump not found (looked in: {', '.join(looked)})", hint=_INSTALL_HINT)
    raise ToolError(f"no cuobjdump {version} here (found: {', '.join(found) or 'none'})",
                    hint=f"pip install nvidia-cuda-cuobjdump=={version} (into the interpreter running farm); "
                         "a wheel is asserted and gated by the one version its build recorded")


def pinned_cuobjdump(version: str, given: Path | None = None) -> Path:
    """The cuobjdump of ``version``: ``given`` when it reports that version (else an error naming
    both), otherwise found (:func:`find_cuobjdump`)."""
    if given is None:
        return find_cuobjdump(version=version)
    have = cuobjdump_version(given)
    if have != version:
        raise ToolError(f"{given} is cuobjdump {have}, and this assertion runs cuobjdump {version}",
                        where=str(given), hint=f"pass a cuobjdump {version}, or none: "
                                               f"pip install nvidia-cuda-cuobjdump=={version}")
    return given


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              errors="replace")
    except FileNotFoundError:
        raise ToolError(f"{argv[0]} does not exist", hint=_INSTALL_HINT) from None
    except PermissionError:
        raise ToolError(f"{argv[0]} is not executable", hint="fix its permissions or " + _INSTALL_HINT) from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"{argv[0]} did not finish within {timeout:.0f} s",
                        where=argv[-1], hint="check the file and the machine's load; raise the timeout") from None


@cache  # one run per binary and process: the gate asks for every wheel
def cuobjdump_version(path: Path) -> str:
    """``13.2.51`` from ``cuobjdump --version``."""
    proc = _run([str(path), "--version"], 60)
    m = _VERSION.search(proc.stdout)
    if proc.returncode != 0 or not m:
        raise ToolError(
            f"{path} --version failed (rc {proc.returncode}): {(proc.stderr or proc.stdout).strip()[:300]}",
            hint=_INSTALL_HINT,
        )
    return m[1]


def parse_listing(stdout: str, *, where: str) -> list[ListedEntry]:
    """Parse ``--list-elf --list-ptx`` output; a line it cannot read is an error, not skipped."""
    entries = []
    for number, line in enumerate(stdout.splitlines(), 1):
        m = _LINE.match(line.rstrip())
        if not m:
            if _NOISE.match(line):
                continue
            raise ToolError(f"unexpected cuobjdump output line {number}: {line!r}", where=where,
                            hint="farm does not know this cuobjdump's format; report it with `cuobjdump --version`")
        is_ptx = m[1] == "PTX"
        if is_ptx != (m[4] == "ptx"):
            raise ToolError(f"unexpected cuobjdump output line {number}: {line!r}", where=where)
        sass = Target.from_name(m[3])
        entries.append(ListedEntry(EntryKind.PTX, sass.with_kind(Kind.PTX), int(m[2])) if is_ptx
                       else ListedEntry(EntryKind.CUBIN, sass, int(m[2])))
    return entries


def _is_pe(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"MZ"


def list_targets(
    so: Path, tool: Path | None = None, *, all_sections: bool = False, timeout: float = DEFAULT_TIMEOUT
) -> list[ListedEntry]:
    """cuobjdump's listing of ``so``: one call with ``--list-elf --list-ptx``.

    Without ``all_sections`` cuobjdump lists the executable fatbins (``.nv_fatbin``) when there are
    any, else the relocatable ones, which is what :func:`farm.binary.fatbin.runnable` selects.
    """
    so = Path(so)
    tool = tool or find_cuobjdump()
    if os.name != "nt" and _is_pe(so):
        # cuobjdump for Linux reports "no device code" for any PE file: that answer would be wrong
        raise ToolError(
            "cuobjdump on this host cannot read a Windows (PE) binary",
            where=str(so), hint="run the assertion on a Windows host (cuobjdump.exe reads it), or inspect it "
                                "here with --reader native",
        )
    argv = [str(tool)] + (["-all"] if all_sections else []) + ["--list-elf", "--list-ptx", str(so)]
    proc = _run(argv, timeout)
    message = (proc.stderr.strip() or proc.stdout.strip())[-500:]
    if proc.returncode == 0:
        return parse_listing(proc.stdout, where=str(so))
    if proc.returncode == 255:
        # "does not contain device code" covers host-only, non-ELF and truncated files alike:
        # our own reader tells them apart (it raises BinaryFormatError for broken files).
        fatbins = read_fatbins(so)
        if not fatbins:
            return []
        raise ToolError(
            f"cuobjdump says there is no device code ({message}) but the file holds {len(fatbins)} fatbin(s)",
            where=str(so), hint="this cuobjdump may be too old for the file; install a newer nvidia-cuda-cuobjdump",
        )
    # rc 1 (and anything else): a fatal error, possibly after partial output that must not count.
    try:
        read_fatbins(so)
    except BinaryFormatError as exc:
        raise BinaryFormatError(f"cuobjdump failed (rc {proc.returncode}: {message}); {exc.message}",
                                where=exc.where, hint=exc.hint) from None
    if proc.returncode != 1:  # killed by a signal, or a code cuobjdump does not use for bad input
        raise ToolError(
            f"cuobjdump crashed (rc {proc.returncode}): {message or 'no output'}",
            where=str(so), hint="the file's headers are intact: check the cuobjdump installation and the machine "
                                "(memory), or try another cuobjdump with --cuobjdump",
        )
    raise BinaryFormatError(
        f"cuobjdump failed (rc {proc.returncode}): {message}",
        where=str(so),
        hint="the device code payload is corrupt (the fatbin headers are intact); rebuild the file",
    )


def variant_free(target: Target) -> Target:
    """SASS without ``f``, the form cuobjdump prints (it drops the f of a SASS target); PTX unchanged."""
    if target.kind is Kind.SASS and target.variant is Variant.FAMILY:
        return target.without_variant()
    return target


_ELF_BLOCK = "Fatbin elf code:"
_PTX_BLOCK = "Fatbin ptx code:"
_TOOLKIT = re.compile(r"^\d+-bit ELF: .*\btoolkit=(\d+\.\d+)\b")
_CODE_VERSION = re.compile(r"^code version = \[(\d+),(\d+)\]$")


def dump_made_by(so: Path, tool: Path | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> MadeBy:
    """The toolkit records of ``so``'s device code as ``cuobjdump -elf`` prints them: ``toolkit=X.Y``
    on each cubin's ELF line, ``code version = [M,m]`` (the PTX ISA) on each PTX entry. Its output
    (section dumps of every cubin) is read line by line and never held whole."""

    tool = tool or find_cuobjdump()
    argv = [str(tool), "-elf", str(so)]
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
    except OSError as exc:
        raise ToolError(f"cannot run {tool}: {exc.strerror or exc}", hint=_INSTALL_HINT) from None
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    cubins: Counter[str] = Counter()
    ptx: Counter[str] = Counter()
    unread, block, seen = 0, "", False
    tail: list[str] = []
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            tail = [*tail[-4:], line]
            if line in (_ELF_BLOCK, _PTX_BLOCK):
                if block == _ELF_BLOCK and not seen:
                    unread += 1
                block, seen = line, False
            elif block == _ELF_BLOCK and not seen and (m := _TOOLKIT.match(line)):
                cubins[m[1]] += 1
                seen = True
            elif block == _PTX_BLOCK and not seen and (m := _CODE_VERSION.match(line)):
                ptx[f"{m[1]}.{m[2]}"] += 1
                seen = True
        rc = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:  # read to the end or abandoned: the pipe is ours to close
            proc.stdout.close()
    if block == _ELF_BLOCK and not seen:
        unread += 1
    if rc < 0:
        raise ToolError(f"cuobjdump -elf did not finish within {timeout:.0f} s (or was killed, rc {rc})", where=str(so),
                        hint="check the file and the machine's load")
    if rc not in (0, 255):
        raise ToolError(f"cuobjdump -elf failed (rc {rc}): {' / '.join(tail)[-300:]}", where=str(so),
                        hint="the file's fatbin headers were readable: check the file and the cuobjdump installation")
    return MadeBy(dict(cubins), dict(ptx), unread)
