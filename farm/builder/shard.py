"""Compile sharding: one cell's CUDA compile split over N compile jobs, then one link job.

A recipe with ``sharding: N`` builds each (Linux) cell as N compile jobs and one link job, for
packages whose compile does not fit one CI job. Every job runs the package's own, unchanged build;
what differs is nvcc: the build calls it through this module's launcher (``PYTORCH_NVCC`` for
torch's ninja builds, ``CMAKE_CUDA_COMPILER_LAUNCHER`` for CMake), which decides per
translation unit (TU):

- compile job ``i/N``: a TU that shard ``i`` owns is compiled by the real nvcc and its object is
  kept in the shard folder (``objects/<i>-<key>.o``); any other TU gets an empty host object instead, so
  the build runs to its end fast (its wheel is thrown away);
- compile job: for each TU it compiles, it records the object's sha256, the source's and those
  of the in-tree files the TU includes (from nvcc's dependency output), and the command line;
- link job: every TU's object is served from the shards' outputs; a missing object stops the
  build, naming the TU and the shard that should have made it, and an object is served only when
  this build's command line for the TU is the recorded one, the tree's sources hash as recorded,
  the copy has the recorded sha256 and, for a sample of the TUs farm drew before the build
  (``shard.json``'s ``recheck``), a fresh uncached compile by this build makes the same bytes.

Ownership is decided before the build, from the source tree alone: the tree's ``.cu`` files,
sorted by their path relative to the source root, are dealt round-robin (TU k -> shard k mod N).
Sorted round-robin rather than a hash: a package's kernels sit in a few folders of many files,
and dealing them in order gives each shard its share of every folder (within one TU per folder),
where a hash leaves some shards twice the work of others. A TU the tree does not list (generated
during the build) falls back to a stable hash of its path. Both are pure functions of the source,
so every job of a cell agrees without talking to the others.

A probe (``farm build --probe``, :mod:`farm.builder.buildprobe`) uses the same launcher for a
build too long for the host: the first TU of each extension (each ``TORCH_EXTENSION_NAME``, else
each distinct set of nvcc flags) is compiled by the real nvcc with the build's own flags and kept;
every other TU gets the empty stand-in. Its wheel is thrown away.

The launcher is this file, copied into the shard folder and run by the build's own Python: it
imports nothing but the standard library, and also runs inside cibuildwheel's container.
The wheel the link job makes is the package's ordinary build with its nvcc outputs taken from the
shards; it goes through the same postbuild, whose per-TU uniformity check fails a wheel in which
one shard's objects were built with another arch list.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

CONFIG = "shard.json"  # the job's settings, written by farm before the build
OBJECTS = "objects"  # flat, so the compile jobs' CI artifacts merge into one folder without clashes
LAUNCHER = "bin/farm-nvcc"
# The PATH shim (shardjob.py writes it): `nvcc` for tools that run it from PATH themselves
SHIM = "shim/nvcc"
FRESH = "FARM_CC_FRESH"  # farm.builder.cclaunch.FRESH: an nvcc call the compiler cache must not serve
TU_SUFFIXES = (".cu",)
# Folders whose .cu files are never the package's TUs: CMake's compiler checks, VCS metadata.
_SKIP_DIRS = frozenset({".git", "CMakeFiles", "__pycache__"})


# ------------------------------------------------------------------------------------------------
# pure: which shard compiles which TU
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShardJob:
    """``--shard i/N`` (compile shard i of N, 0-based), ``--link`` (index None), or a probe."""

    count: int
    index: int | None = None
    probe: bool = False  # ``farm build --probe``: the first TU of each extension, no wheel

    @property
    def is_link(self) -> bool:
        return self.index is None

    @property
    def label(self) -> str:
        if self.probe:
            return PROBE_LABEL
        return "link" if self.index is None else f"{self.index}/{self.count}"

    @classmethod
    def parse(cls, text: str) -> ShardJob:
        """``"3/20"`` -> compile shard 3 of 20. Raises ValueError with the reason."""
        i, sep, n = text.partition("/")
        if not sep or not i.isdigit() or not n.isdigit():
            raise ValueError(f"{text!r} is not I/N (e.g. 0/20: the first of 20 compile shards)")
        index, count = int(i), int(n)
        if count < 2 or index >= count:
            raise ValueError(f"{text!r}: need 0 <= I < N and N >= 2")
        return cls(count, index)


def owner_of(tu: str, table: Mapping[str, int], count: int) -> int:
    """A TU's shard: the tree's ``table``'s, else (a TU it did not list) a hash of the path, the same anywhere."""
    owner = table.get(tu)
    return int.from_bytes(hashlib.sha256(tu.encode()).digest()[:8], "big") % count if owner is None else int(owner)


def assign(tus: Iterable[str], count: int) -> dict[str, int]:
    """Sorted round-robin: the k-th TU in sorted path order goes to shard k mod ``count``."""
    return {tu: k % count for k, tu in enumerate(sorted(set(tus)))}


def table_digest(table: Mapping[str, int], count: int) -> str:
    """Identifies an assignment: compile and link jobs of one cell must agree on it."""
    text = json.dumps({"count": count, "table": dict(sorted(table.items()))}, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def tree_tus(root: Path) -> list[str]:
    """The source tree's CUDA TUs: ``.cu`` files, as POSIX paths relative to ``root``, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        rel = Path(dirpath).relative_to(root)
        out += [PurePosixPath(*rel.parts, f).as_posix() for f in filenames if f.endswith(TU_SUFFIXES)]
    return sorted(out)


@dataclass(frozen=True)
class CompileUnit:
    """One nvcc call that compiles one source file to one object."""

    source: str
    output: str
    depfile: str | None


# Options that take the next argument as their value, where the value could look like a source.
_VALUE_OPTS = frozenset({
    "-o", "--output-file", "-x", "--x", "-ccbin", "--compiler-bindir", "-I", "--include-path",
    "-D", "--define-macro", "-include", "--pre-include", "-isystem", "--system-include",
    "-Xcompiler", "--compiler-options", "-Xlinker", "--linker-options", "-Xptxas", "--ptxas-options",
    "-Xnvlink", "--nvlink-options", "-Xfatbin", "--fatbin-options", "-gencode", "--generate-code",
    "-arch", "--gpu-architecture", "-code", "--gpu-code", "-MF", "--dependency-output", "-MT",
    "--dependency-target-name", "-L", "--library-path", "-l", "--library", "-std", "--std",
    "-maxrregcount", "--maxrregcount", "-t", "--threads", "-diag-suppress", "--diag-suppress",
    "-U", "--undefine-macro", "-odir", "--output-directory", "-ftemplate-depth",
})
# A call with any of these is not "compile one TU to an object": it runs as it is.
_NOT_A_COMPILE = frozenset({
    "-E", "--preprocess", "-M", "--generate-dependencies", "-MM", "--generate-nonsystem-dependencies",
    "-dlink", "--device-link", "-lib", "--lib", "-run", "--run", "-ptx", "--ptx", "-cubin", "--cubin",
    "-fatbin", "--fatbin", "-dryrun", "--dryrun", "-link", "--link", "-V", "--version", "-h", "--help",
})


def compile_unit(args: Sequence[str]) -> CompileUnit | None:
    """The TU an nvcc argv compiles, or None when the call is anything else (version query,
    link, preprocess, several sources)."""
    sources: list[str] = []
    output = depfile = None
    compile_only = False
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, value = a.partition("=")
        if a in _NOT_A_COMPILE:
            return None
        if a in ("-c", "--compile"):
            compile_only = True
        elif name in _VALUE_OPTS:
            if not eq:
                i += 1
                value = args[i] if i < len(args) else ""
            if name in ("-o", "--output-file"):
                output = value
            elif name in ("-MF", "--dependency-output"):
                depfile = value
        elif not a.startswith("-") and a.endswith((".cu", ".cpp", ".cc", ".cxx", ".c")):
            sources.append(a)
        i += 1
    if not compile_only or output is None or len(sources) != 1:
        return None
    return CompileUnit(sources[0], output, depfile)


def tu_path(source: str, root: str, cwd: str) -> str | None:
    """The TU's identity: its path relative to the source root (POSIX), or None when the source
    lies outside the root or in a CMake check folder (those always compile for real)."""
    path = os.path.normpath(os.path.join(cwd, source))
    rel = os.path.relpath(path, root)
    if rel.startswith(".."):
        return None
    parts = PurePosixPath(Path(rel).as_posix()).parts
    if any(p in _SKIP_DIRS for p in parts):
        return None
    return "/".join(parts)


def object_name(owner: int, tu: str, output: str) -> str:
    """File name of a TU's object in ``objects/``: its shard, then a hash of the TU and its
    object's name (one source compiled twice, for two extensions, has two objects)."""
    key = hashlib.sha256(f"{tu}\0{os.path.basename(output)}".encode()).hexdigest()[:32]
    return f"{owner}-{key}.o"


def sha256_of(path: str) -> str | None:
    """The file's sha256 (hex), or None when it is not a readable regular file."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


# Flags that only ask nvcc for a dependency file: not part of what a TU is compiled with.
_DEP_FLAGS = frozenset({"-MD", "--generate-dependencies-with-compile", "-MMD",
                        "--generate-nonsystem-dependencies-with-compile"})


def compile_flags(args: Sequence[str], unit: CompileUnit, root: str) -> list[str]:
    """What a TU is compiled with, comparable across machines: the nvcc argv less its source,
    output and dependency-file arguments, with the source root written ``$ROOT``."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        name, eq, _ = a.partition("=")
        if a == unit.source or a in _DEP_FLAGS:
            continue
        if name in ("-o", "--output-file", "-MF", "--dependency-output", "-MT", "--dependency-target-name"):
            skip = not eq
            continue
        out.append(a.replace(root.rstrip("/") + "/", "$ROOT/") if root else a)
    return out


def depfile_inputs(text: str, cwd: str, root: str) -> list[str]:
    """The files a make-style dependency file (nvcc ``-MD -MF``) names that lie inside the source
    root, as root-relative POSIX paths, sorted. Files outside it (the toolkit's, the system's)
    are pinned by the build spec, not here."""
    _, _, deps = text.replace("\\\n", " ").partition(": ")
    # make escapes a space inside a path as "\ "
    words = [w.replace("\\ ", " ") for w in re.split(r"(?<!\\)\s+", deps) if w]
    return sorted({rel for w in words if (rel := tu_path(w, root, cwd)) is not None})


def verify_unit(unit: Mapping[str, object], root: str, *, missing_ok: bool = False) -> str | None:
    """Recompute a compiled TU's source and in-tree input hashes from the tree at ``root``: None
    when all agree, else what differs (the first few). ``missing_ok``: a file not (yet) in the tree
    is no difference (before the build, a header the build generates is not there)."""
    wanted = {str(unit["tu"]): unit["source_sha256"], **dict(unit.get("inputs") or {})}  # type: ignore[call-overload]
    bad = []
    for rel, digest in sorted(wanted.items()):
        have = sha256_of(os.path.join(root, rel))
        if have != digest and not (have is None and missing_ok):
            bad.append(f"{rel} ({'missing here' if have is None else f'sha256 {have[:12]} here'}, "
                       f"{str(digest)[:12]} in the shard)")
    return "; ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "") if bad else None


def flag_difference(shard: Sequence[str], here: Sequence[str]) -> str:
    """How two compile command lines differ, briefly: the flags only one has, else the order."""
    only_shard = [f for f in shard if f not in here]
    only_here = [f for f in here if f not in shard]
    if not only_shard and not only_here:
        return "the same flags in another order"
    return f"the shard's has {only_shard[:5] or 'nothing more'}, this build's has {only_here[:5] or 'nothing more'}"


# A probe (``farm build --probe``): the first TU of each extension is compiled, the rest are stand-ins.
PROBE_LABEL = "probe"
CLAIMS = "claims"  # probe: one file per extension whose first TU a build call has taken
_EXTENSION_NAME = re.compile(r"-DTORCH_EXTENSION_NAME=(?P<name>[A-Za-z0-9_.]+)")
# CMake's object path: <build dir>[/<subdir>]/CMakeFiles/<target>.dir/<source>.o
_CMAKE_OBJECT = re.compile(r"(?:^|/)CMakeFiles/(?P<target>[^/]+)\.dir/")


def _torch_name(flags: Sequence[str]) -> str | None:
    for i, flag in enumerate(flags):
        text = f"-D{flags[i + 1]}" if flag == "-D" and i + 1 < len(flags) else flag
        m = _EXTENSION_NAME.fullmatch(text)
        if m:
            return m["name"]
    return None


def extension_key(flags: Sequence[str], output: str = "") -> str:
    """Which extension an nvcc call compiles for: torch's build names it in every TU's flags
    (``-DTORCH_EXTENSION_NAME=_C``); CMake names the target in the object's path
    (``CMakeFiles/<target>.dir/...``), the name a recipe's ``extensions:`` glob matches; any
    other build (a plain setuptools one) is told apart by its flags."""
    name = _torch_name(flags)
    if name is not None:
        return name
    target = _CMAKE_OBJECT.search(output.replace("\\", "/"))
    return target["target"] if target else f"flags-{_flags_digest(flags)}"


def claim_key(flags: Sequence[str], output: str = "") -> str:
    """What a probe compiles once: a torch extension's first TU (torch gives all its TUs the same
    flags); else the first TU of each distinct set of flags of a target, as CMake lets a source
    carry its own (``set_source_files_properties``: another arch list, a kernel family's)."""
    extension = extension_key(flags, output)
    if _torch_name(flags) is not None or extension.startswith("flags-"):
        return extension
    return f"{extension}/{_flags_digest(flags)}"


def _flags_digest(flags: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps(list(flags)).encode()).hexdigest()[:12]


def _claim(shard_dir: str, extension: str) -> bool:
    """True for the first nvcc call of an extension, across the build's parallel calls (O_EXCL)."""
    folder = os.path.join(shard_dir, CLAIMS)
    os.makedirs(folder, exist_ok=True)
    key = hashlib.sha256(extension.encode()).hexdigest()[:32]
    try:
        os.close(os.open(os.path.join(folder, key), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return False
    return True


def done_name(index: int) -> str:
    """``objects/done-<i>.json``: compile shard i finished; the link job requires all of them."""
    return f"done-{index}.json"


def log_name(label: str) -> str:
    return f"{label.replace('/', '-of-')}.jsonl"


# ------------------------------------------------------------------------------------------------
# the launcher (runs inside the build: standard library only)
# ------------------------------------------------------------------------------------------------
def _log(shard_dir: str, label: str, record: dict[str, object]) -> None:
    # One short line per write with O_APPEND: parallel nvcc calls never interleave within a line.
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    os.makedirs(os.path.join(shard_dir, "log"), exist_ok=True)
    fd = os.open(os.path.join(shard_dir, "log", log_name(label)),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _depfile(unit: CompileUnit, cwd: str) -> None:
    # ninja reads the depfile it asked for; a restored object depends on its source, as far as
    # this (fresh) build is concerned.
    if unit.depfile:
        with open(os.path.join(cwd, unit.depfile), "w", encoding="utf-8") as fh:
            fh.write(f"{unit.output}: {unit.source}\n")


def _stub(out: str, args: Sequence[str]) -> int:
    """An empty host object: lets the rest of a compile job's build run; its wheel is discarded."""
    cc = os.environ.get("CC") or "cc"
    for i, a in enumerate(args):
        if a in ("-ccbin", "--compiler-bindir") and i + 1 < len(args):
            cc = args[i + 1]
        elif a.startswith(("-ccbin=", "--compiler-bindir=")):
            cc = a.partition("=")[2]
    if os.path.isdir(cc):
        cc = os.path.join(cc, "gcc")
    return subprocess.call([cc, "-x", "c", "-c", os.devnull, "-o", out])


def launch(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """``farm-nvcc REAL_NVCC ARGS...``: see the module docstring."""
    if len(argv) < 2:
        print("farm-nvcc: usage: farm-nvcc NVCC ARGS... (a compiler launcher)", file=sys.stderr)
        return 2
    real, args = [argv[1]], list(argv[2:])
    shard_dir = environ.get("FARM_SHARD_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(argv[0])))
    if environ.get("FARM_NVCC_REAL") and os.path.realpath(real[0]) == os.path.realpath(os.path.join(shard_dir, SHIM)):
        real = [environ["FARM_NVCC_REAL"]]  # the build found the PATH shim as its nvcc (CMake): not twice
    if args and not args[0].startswith("-") and os.path.basename(args[0]) == "nvcc":
        # CMake runs LAUNCHER;ARGS COMPILER ...: the compiler cache's launcher, then nvcc. The
        # compiler's path is the build folder's, not a flag of what the TU is compiled with.
        real.append(args.pop(0))
    with open(os.path.join(shard_dir, CONFIG), encoding="utf-8") as fh:
        cfg = json.load(fh)
    cwd = os.getcwd()
    unit = compile_unit(args)
    root = environ.get("FARM_SHARD_ROOT") or cfg["root"]
    tu = tu_path(unit.source, root, cwd) if unit else None
    if unit is None or tu is None:
        return subprocess.call([*real, *args])
    out = os.path.join(cwd, unit.output)
    flags = compile_flags(args, unit, root)
    record: dict[str, object]
    if cfg["mode"] == "probe":  # the first TU of each extension compiles, the others are stand-ins
        extension = extension_key(flags, unit.output)
        record = {"tu": tu, "object": os.path.basename(unit.output), "owner": 0,
                  "file": object_name(0, tu, unit.output), "extension": extension}
        if not _claim(shard_dir, claim_key(flags, unit.output)):
            return _stand_in(shard_dir, PROBE_LABEL, record, out, unit, cwd, args)
        return _compile(shard_dir, PROBE_LABEL, record, real, args, flags, out, unit, cwd, root)
    count, index = int(cfg["count"]), cfg["index"]
    owner = owner_of(tu, cfg["table"], count)
    name = object_name(owner, tu, unit.output)
    label = "link" if index is None else f"{index}/{count}"
    record = {"tu": tu, "object": os.path.basename(unit.output), "owner": owner, "file": name}
    if index is None:  # link: serve from the owner's output, only what the shard proved
        return _serve(shard_dir, label, cfg, root, record, flags, out, unit, cwd, count, [*real, *args])
    if owner != int(index):
        return _stand_in(shard_dir, label, record, out, unit, cwd, args)
    return _compile(shard_dir, label, record, real, args, flags, out, unit, cwd, root)


def _stand_in(shard_dir: str, label: str, record: dict[str, object], out: str, unit: CompileUnit, cwd: str,
              args: Sequence[str]) -> int:
    """A TU this job leaves to another: an empty host object in its place, logged."""
    rc = _stub(out, args)
    _depfile(unit, cwd)
    _log(shard_dir, label, {**record, "status": "skipped" if rc == 0 else "stub-failed", "rc": rc})
    return rc


def _compile(shard_dir: str, label: str, record: dict[str, object], real: Sequence[str], args: Sequence[str],
             flags: list[str], out: str, unit: CompileUnit, cwd: str, root: str) -> int:
    """The real nvcc on a TU this job owns; its object is kept in ``objects/`` with its hashes."""
    name, tu = str(record["file"]), str(record["tu"])
    # nvcc lists the TU's includes when asked: the build's own depfile, or one farm asks for
    dep = unit.depfile and os.path.join(cwd, unit.depfile)
    extra = [] if dep else ["-MD", "-MF", out + ".farm.d"]
    rc = subprocess.call([*real, *args, *extra])
    if rc == 0:
        dest = os.path.join(shard_dir, OBJECTS)
        os.makedirs(dest, exist_ok=True)
        tmp = os.path.join(dest, f".{name}.{os.getpid()}.tmp")
        shutil.copyfile(out, tmp)
        record["object_sha256"] = sha256_of(tmp)
        os.replace(tmp, os.path.join(dest, name))
        record["source_sha256"] = sha256_of(os.path.join(root, tu))
        try:
            with open(dep or out + ".farm.d", encoding="utf-8", errors="surrogateescape") as fh:
                inputs = depfile_inputs(fh.read(), cwd, root)
        except OSError:
            inputs = []
        if not dep:
            with contextlib.suppress(OSError):
                os.unlink(out + ".farm.d")
        record["inputs"] = {rel: sha256_of(os.path.join(root, rel)) for rel in inputs if rel != tu}
        record["flags"] = flags
    _log(shard_dir, label, {**record, "status": "compiled" if rc == 0 else "failed", "rc": rc})
    return rc


def _recompile(command: Sequence[str], out: str, recorded: str) -> str | None:
    """The build's own compile of a served TU, uncached (the compiler cache's :data:`FRESH`), into
    its own object path: None when it makes the shard's bytes, else what differs."""
    rc = subprocess.call(list(command), env={**os.environ, FRESH: "1"})
    fresh = sha256_of(out) if rc == 0 else None
    if fresh == recorded:
        return None
    with contextlib.suppress(OSError):  # never left for the build to link
        os.unlink(out)
    if fresh is None:
        return f"a fresh uncached compile of it failed (rc {rc}), so its object cannot be checked"
    return (f"a fresh uncached compile makes sha256 {fresh}, the shard's object has sha256 {recorded}: "
            "the shard's object was not compiled from this source")


def _serve(shard_dir: str, label: str, cfg: Mapping[str, object], root: str, record: dict[str, object],
           flags: list[str], out: str, unit: CompileUnit, cwd: str, count: int, command: Sequence[str]) -> int:
    """The link job's nvcc call: copy the owner's object after checking it is what the compile
    shard compiled, from these sources, with these flags, and, for the TUs ``shard.json`` samples
    (``recheck``), that a fresh uncached compile (``command``) makes its bytes; anything else fails
    the call."""
    tu, owner, name = record["tu"], record["owner"], str(record["file"])
    stored = os.path.join(shard_dir, OBJECTS, name)
    proof = dict(cfg.get("proofs") or {}).get(name)  # type: ignore[call-overload]
    if proof is None or not os.path.isfile(stored):
        _log(shard_dir, label, {**record, "status": "missing"})
        print(f"farm-nvcc: error: no object for TU {tu} ({os.path.basename(unit.output)}): compile shard "
              f"{owner}/{count} should have made it ({stored})", file=sys.stderr)
        return 1
    problem = None
    if proof["flags"] != flags:
        problem = f"compiled with other flags: {flag_difference(proof['flags'], flags)}"
    else:
        problem = verify_unit(proof, root)
        problem = problem and f"its sources differ from this tree: {problem}"
    tmp = f"{out}.farm.{os.getpid()}.tmp"
    if problem is None:
        shutil.copyfile(stored, tmp)
        if sha256_of(tmp) != proof["object_sha256"]:
            problem = f"the object {name} is not the one the shard recorded (sha256 differs)"
    rechecked = name in list(cfg.get("recheck") or ())  # type: ignore[call-overload]
    if problem is None and rechecked:
        problem = _recompile(command, out, proof["object_sha256"])
    if problem is not None:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _log(shard_dir, label, {**record, "status": "refused", "why": problem})
        print(f"farm-nvcc: error: TU {tu} of compile shard {owner}/{count}: {problem}", file=sys.stderr)
        return 1
    os.replace(tmp, out)
    _depfile(unit, cwd)
    _log(shard_dir, label, {**record, "status": "served", "rechecked": rechecked})
    return 0


if __name__ == "__main__":
    sys.exit(launch(sys.argv, os.environ))
