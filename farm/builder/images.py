"""The container image a cibuildwheel Linux cell builds in, and what it can build, asked before any download.

cibuildwheel runs a Linux build in a manylinux image with the engine (docker or podman), using
the image's ``/opt/python/<tag>-<tag>/bin/python``. Before a cell is fetched, planned or built:

- **which image**: the plan's (``--image`` / ``--image-aarch64``), else an ambient
  ``CIBW_MANYLINUX_<ARCH>_IMAGE``, else cibuildwheel's own pinned default for the arch
  (:func:`image_for`);
- **present or pullable**: ``ENGINE image inspect`` answers for a local image (its ID, OS and
  architecture); an image that is not here must be pulled from its registry, which must answer
  (``localhost/...`` images are never pulled: they exist only where they were made);
- **emulation**: a cell of another architecture than the host's runs only under a binfmt_misc
  handler for that architecture's ELF binaries registered with the ``F`` flag (the handler is
  opened at registration, so it works inside a container whose file system lacks it): QEMU's
  user-mode emulator, as ``tonistiigi/binfmt`` or ``qemu-user-static`` register it
  (:func:`emulated_machines`);
- **interpreters and compiler**: one throwaway container (never pulled, no network, bounded) runs each
  ``/opt/python/*/bin/python`` and ``c++``/``g++`` (:func:`probe_image`). A directory is
  believed only for the version its interpreter reports: a ``cp39-cp39`` that links to 3.11
  holds no Python 3.9.

The answer of an image's probe depends only on its bytes, so it is cached per image ID (the
digest of its configuration) under the cache folder, sealed (:mod:`farm.cacheseal`): an entry
that does not verify is probed again. The parsing and the decisions here are pure; the engine
calls are bounded (a timeout, a capped output).
"""

from __future__ import annotations

import configparser
import contextlib
import json
import re
import shutil
import subprocess
import threading
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from farm import cacheseal, jsonread

INSPECT_TIMEOUT_S = 60
PROBE_TIMEOUT_S = 180  # a container start plus one interpreter start per Python (seconds each)
OUTPUT_CAP = 64 << 10  # what a probe may print; more is not a manylinux image's answer
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
CACHE_PURPOSE = "image-probe-1"

# ELF e_machine -> the names an arch has in farm's platforms and in the engines' image records
_ELF_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64"}
_ENGINE_ARCH = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}

# Run in the image by /bin/sh: each /opt/python/<dir>'s interpreter version, then the compiler.
_PROBE_SCRIPT = r"""
for d in /opt/python/*/; do
  n=${d%/}; n=${n##*/}
  v=$("$d/bin/python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null) || v=none
  echo "python $n $v"
done
c=$(command -v c++ || command -v g++) && echo "compiler $c"
echo done
"""


@dataclass(frozen=True)
class ImageFacts:
    """A local image as the engine and one throwaway container of it describe it."""

    reference: str
    id: str  # the engine's image ID: the digest of its configuration
    os: str  # linux
    machine: str  # x86_64 | aarch64 (the engine's amd64/arm64, in farm's words)
    pythons: Mapping[str, str]  # cp311 -> 3.11.2: a /opt/python/cp311-cp311 whose interpreter is 3.11
    compiler: str | None  # c++ / g++ in the image, or None
    notes: tuple[str, ...] = ()  # directories whose interpreter is not what their name says

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "os": self.os, "machine": self.machine, "pythons": dict(self.pythons),
                "compiler": self.compiler, "notes": list(self.notes)}


# ------------------------------------------------------------------------------------------------
# pure: which image, which registry, what a probe printed, which architectures are emulated
# ------------------------------------------------------------------------------------------------
def default_image(machine: str) -> str | None:
    """cibuildwheel's own pinned manylinux image for ``machine`` (its defaults name the policy,
    its pinned list the image); None when cibuildwheel does not say."""
    try:
        base = resources.files("cibuildwheel") / "resources"
        defaults = tomllib.loads((base / "defaults.toml").read_text(encoding="utf-8"))
        pinned = configparser.ConfigParser()
        pinned.read_string((base / "pinned_docker_images.cfg").read_text(encoding="utf-8"))
    except (ModuleNotFoundError, OSError, tomllib.TOMLDecodeError, configparser.Error):
        return None  # cibuildwheel (the build extra) is not installed, or says nothing readable
    policy = defaults.get("tool", {}).get("cibuildwheel", {}).get(f"manylinux-{machine}-image")
    if not isinstance(policy, str) or not pinned.has_option(machine, policy):
        return None
    return pinned.get(machine, policy).split("#", 1)[0].strip() or None


def image_for(machine: str, images: Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    """The image cibuildwheel builds a ``machine`` cell in: the plan's, else the environment's
    ``CIBW_MANYLINUX_<ARCH>_IMAGE`` (the builder keeps it when the plan names none), else
    cibuildwheel's default."""
    return images.get(machine) or environ.get(f"CIBW_MANYLINUX_{machine.upper()}_IMAGE") or default_image(machine)


def registry_of(reference: str) -> str | None:
    """The registry host (and port) an image is pulled from; None for a ``localhost/`` image,
    which exists only where it was made. A first component without a dot or colon is Docker Hub's
    namespace (``python:3.11``, ``library/debian``)."""
    first, _, rest = reference.partition("/")
    if not rest:
        return "registry-1.docker.io"
    if first == "localhost" or first.startswith("localhost:"):
        return None
    return first if "." in first or ":" in first else "registry-1.docker.io"


_PY_DIR = re.compile(r"cp(\d)(\d+)-cp\1\2")


def parse_probe(text: str) -> tuple[dict[str, str], str | None, tuple[str, ...]] | None:
    """What :data:`_PROBE_SCRIPT` printed -> (tag -> version, compiler, notes); None when the
    output is not a whole answer (no ``done`` line: the container stopped half-way)."""
    lines = text.splitlines()
    if "done" not in lines:
        return None
    pythons: dict[str, str] = {}
    compiler = None
    notes: list[str] = []
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "compiler" and rest:
            compiler = rest.strip()
        if kind != "python":
            continue
        name, _, version = rest.partition(" ")
        m = _PY_DIR.fullmatch(name)
        if m is None:  # cp313-cp313t (free-threaded), pp310-pypy310_pp73, ...: not a cell's CPython
            continue
        tag, wanted = f"cp{m[1]}{m[2]}", f"{m[1]}.{m[2]}"
        if version == "none":
            notes.append(f"/opt/python/{name} has no interpreter that runs")
        elif ".".join(version.split(".")[:2]) != wanted:
            notes.append(f"/opt/python/{name} runs Python {version}")
        else:
            pythons[tag] = version
    return pythons, compiler, tuple(notes)


def parse_binfmt(name: str, text: str) -> tuple[str, bool] | None:
    """One binfmt_misc handler file -> (the ELF machine it runs, whether a container can use it:
    enabled, with the ``F`` flag); None for a handler of something else."""
    if name in ("register", "status"):
        return None
    lines = text.splitlines()
    magic = next((line[6:].strip() for line in lines if line.startswith("magic ")), "")
    flags = next((line[6:].strip() for line in lines if line.startswith("flags:")), "")
    enabled = lines[:1] == ["enabled"]
    # an ELF header's magic: 7f454c46, class, data, ..., e_machine (bytes 18-19, little-endian)
    if not magic.startswith("7f454c46") or len(magic) < 40:
        return None
    try:
        machine = int(magic[38:40] + magic[36:38], 16)
    except ValueError:
        return None
    arch = _ELF_MACHINES.get(machine)
    return None if arch is None else (arch, enabled and "F" in flags)


def emulation_blocker(machine: str, host_machine: str, handlers: Mapping[str, bool] | None) -> str | None:
    """Why a ``machine`` container cannot run on a ``host_machine`` host (None: it can).
    ``handlers``: ELF machine -> usable in a container (:func:`emulated_machines`); None when
    binfmt_misc is not mounted."""
    host = _ENGINE_ARCH.get(host_machine.lower(), host_machine)
    if machine == host:
        return None
    fix = (f"register QEMU's {machine} emulator (as root: podman run --rm --privileged "
           f"docker.io/tonistiigi/binfmt --install {'arm64' if machine == 'aarch64' else machine}, "
           "or apt-get install qemu-user-static), or build on an "
           f"{machine} host")
    if handlers is None:
        return (f"running {machine} containers on this {host} host needs emulation, and binfmt_misc is not "
                f"mounted; {fix}")
    if machine not in handlers:
        return (f"running {machine} containers on this {host} host needs emulation: no binfmt_misc handler runs "
                f"{machine} binaries; {fix}")
    if not handlers[machine]:
        return (f"running {machine} containers on this {host} host needs emulation: the binfmt_misc handler for "
                f"{machine} is disabled or lacks the F flag (containers cannot open it); {fix}")
    return None


def facts_from(reference: str, inspected: str, probe: str) -> ImageFacts | None:
    """An image's facts from ``image inspect``'s line and the probe's output (None: not an answer)."""
    parts = inspected.split()
    parsed = parse_probe(probe)
    if len(parts) != 3 or parsed is None:
        return None
    image_id, os_name, arch = parts
    pythons, compiler, notes = parsed
    return ImageFacts(reference, image_id, os_name, _ENGINE_ARCH.get(arch, arch), pythons, compiler, notes)


# ------------------------------------------------------------------------------------------------
# the shell: the engine, binfmt_misc, the sealed cache
# ------------------------------------------------------------------------------------------------
def emulated_machines(binfmt: Path = BINFMT_DIR) -> dict[str, bool] | None:
    """The ELF machines this kernel runs through a binfmt_misc handler, and whether a container can
    use each (enabled, ``F``); None when binfmt_misc is not mounted."""
    if not (binfmt / "status").is_file():
        return None
    found: dict[str, bool] = {}
    try:
        entries = sorted(binfmt.iterdir())
    except OSError:
        return None
    for entry in entries:
        try:
            text = entry.read_text(encoding="utf-8", errors="replace")[:4096]
        except OSError:
            continue
        parsed = parse_binfmt(entry.name, text)
        if parsed is not None:
            found[parsed[0]] = found.get(parsed[0], False) or parsed[1]
    return found


def _run(argv: list[str], timeout: float, *, stderr: bool = True) -> tuple[int, str]:
    """An engine call, bounded: killed after ``timeout`` seconds, its output (with stderr, unless
    ``stderr`` is false) read in chunks of which only the first :data:`OUTPUT_CAP` bytes are kept."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL)
    except OSError as exc:
        return -1, str(exc.strerror or exc)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    kept = bytearray()
    try:
        assert proc.stdout is not None
        for chunk in iter(lambda: proc.stdout.read(1 << 16), b""):  # type: ignore[union-attr]
            kept += chunk[:max(0, OUTPUT_CAP - len(kept))]
        rc = proc.wait()
    finally:
        timed_out = not timer.is_alive()
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    text = kept.decode("utf-8", "replace")
    return (-1, f"no answer within {timeout:.0f} s") if timed_out else (rc, text)


def inspect_local(engine: str, reference: str) -> str | None:
    """The ``image inspect`` line (ID, OS, architecture), or None when the image is not here."""
    rc, out = _run([engine, "image", "inspect", "--format", "{{.Id}} {{.Os}} {{.Architecture}}", reference],
                   INSPECT_TIMEOUT_S, stderr=False)  # a warning on stderr is not the answer
    line = out.strip().splitlines()[:1]
    if rc != 0 or not line or len(line[0].split()) != 3:
        return None
    return line[0]


_PROBE_FILE = re.compile(r"(?P<engine>docker|podman)-(?P<id>[0-9a-f]{12,64})\.json")


def held_probes(cache_dir: Path) -> frozenset[str]:
    """The probe files under ``cache_dir/images`` whose image the engine that probed it still holds
    (asked by ID, never pulled); what ``farm cache prune`` keeps. A probe of an image the host no
    longer has, of an engine that is not here, or not named as farm names them is not held."""
    held = set()
    for path in sorted((cache_dir / "images").glob("*.json")):
        match = _PROBE_FILE.fullmatch(path.name)
        if match is None or shutil.which(match["engine"]) is None:
            continue
        line = inspect_local(match["engine"], match["id"])
        if line is not None and line.split()[0].removeprefix("sha256:").startswith(match["id"]):
            held.add(path.name)
    return frozenset(held)


def _cached(path: Path, purpose: str, reference: str) -> ImageFacts | None:
    try:
        payload = cacheseal.read(path, purpose, 1 << 20)
        data = jsonread.loads(payload) if payload is not None else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pythons, notes, compiler = data.get("pythons"), data.get("notes"), data.get("compiler")
    fields = (data.get("id"), data.get("os"), data.get("machine"))
    if not (all(isinstance(f, str) for f in fields) and isinstance(pythons, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in pythons.items())
            and isinstance(notes, list) and all(isinstance(n, str) for n in notes)
            and (compiler is None or isinstance(compiler, str))):
        return None
    image_id, os_name, machine = (str(f) for f in fields)
    return ImageFacts(reference, image_id, os_name, machine, dict(pythons), compiler, tuple(notes))


def probe_image(engine: str, reference: str, cache_dir: Path | None) -> tuple[ImageFacts | None, str]:
    """A local image's facts (cached per image ID), or None and why: not here (``""``), or the
    probe gave no answer (its reason)."""
    line = inspect_local(engine, reference)
    if line is None:
        return None, ""
    image_id = line.split()[0]
    purpose = f"{CACHE_PURPOSE}:{engine}:{image_id}"
    path = cache_dir / "images" / f"{engine}-{image_id.removeprefix('sha256:')[:64]}.json" if cache_dir else None
    if path is not None and path.is_file():
        facts = _cached(path, purpose, reference)
        if facts is not None and facts.id == image_id:
            return facts, ""
    rc, out = _run([engine, "run", "--rm", "--pull", "never", "--network", "none", reference,
                    "/bin/sh", "-c", _PROBE_SCRIPT], PROBE_TIMEOUT_S)
    facts = facts_from(reference, line, out) if rc == 0 else None
    if facts is None:
        return None, f"{engine} run {reference} gave no answer (rc {rc}: {out.strip()[-300:]})"
    if path is not None:
        payload = json.dumps(facts.to_json(), sort_keys=True).encode()
        with contextlib.suppress(OSError):  # an unwritable cache costs the next run a probe, nothing else
            cacheseal.write(path, payload, purpose)
    return facts, ""
