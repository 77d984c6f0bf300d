"""Builders: run a :class:`~farm.builder.plan.BuildPlan`, then postbuild what it produced.

- ``cibuildwheel``: the plan as is, in a container (docker or podman) for Linux cells.
- ``native``: the same plan on the host, for hosts that have no container engine: a fresh venv,
  the plan's environment and ``before-build`` steps, ``python -m build --no-isolation``, and the
  plan's repair command (auditwheel with the excludes, then the vendoring check).

:func:`build_cell` is the whole job for one cell: fetch the source, prepare a private copy
(``patch_script`` runs on the copy, never on the cache), plan, build, and run postbuild on every
wheel, so a wheel that reaches the output directory is an asserted, stamped wheel.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock

from farm import cacheseal
from farm.builder import buildenv, buildprobe, cclaunch, farmdeps, procs, shardjob, verify
from farm.builder.buildenv import BuildEnv
from farm.builder.buildprobe import ProbeReport
from farm.builder.compilecache import RUN_DIR, CompileCache, Counts, check_recheck
from farm.builder.farmdeps import FarmDep
from farm.builder.images import image_for, probe_image
from farm.builder.interpreters import Interpreter, find_interpreter, install_managed
from farm.builder.msvc import VSWHERE, MsvcSetup, parse_set_output
from farm.builder.plan import (
    BIN,
    LAUNCHER_SCRIPT,
    BuildPlan,
    NativeSteps,
    PlanOptions,
    compile_cache_environment,
    container_label,
    plan_build,
    render_environment,
    reproducible_environment,
)
from farm.builder.preflight import Host, platform_blocker, python_blocker
from farm.builder.prepare import Log, build_log, lint_as_built, prepare_source
from farm.builder.shard import ShardJob
from farm.builder.shardjob import ShardSetup
from farm.builder.spec import SpecOverrides, families_from_lint, resolve_spec, write_spec
from farm.errors import (
    ConfigError,
    DefectError,
    FarmError,
    Interrupted,
    Stalled,
    ToolError,
    UsageError,
    WheelError,
    clip,
    redactor,
)
from farm.fsutil import remove, sha256_file
from farm.model.cells import NO_TORCH, Cell
from farm.model.config import COMPILER_ENV, FarmConfig, Recipe
from farm.provenance import buildinfo
from farm.provenance.ledgerwrite import FRAGMENT_SUFFIX
from farm.provenance.postbuild import build_environment, postbuild_wheel
from farm.source.fetch import fetch
from farm.toolkit.assemble import Toolkit, ensure_toolkit, home_in_prefix, toolkit_at_home, toolkit_prefix
from farm.toolkit.check import check_toolkit

if TYPE_CHECKING:
    from farm.binary.assertion import AssertionReport
    from farm.builder.spec import BuildSpec
    from farm.builder.verify import ImportCheck
    from farm.model.archrequest import ArchRequest
    from farm.provenance.postbuild import PostbuildResult
    from farm.source.fetch import SourceTree


class BuilderKind(str, enum.Enum):
    CIBUILDWHEEL = "cibuildwheel"
    NATIVE = "native"


ENGINES = ("docker", "podman")


@dataclass(frozen=True)
class BuildResult:
    cell: Cell
    plan: BuildPlan
    built: tuple[Path, ...]  # the repaired wheels, before postbuild
    postbuild: tuple[PostbuildResult, ...] = field(default=())
    build_env: Path | None = None  # the shared build environment a native build used
    shard: Mapping[str, Any] | None = None  # a compile shard's or link job's record (shardjob.py)
    imports: tuple[ImportCheck, ...] = ()  # the import check of each asserted wheel (verify.py)
    compile_cache: Counts | None = None  # the compiler cache's counts for this build (None: off or unknown)
    probe: ProbeReport | None = None  # farm build --probe: each extension's first TU, judged; no wheel

    @property
    def passed(self) -> bool:
        if self.shard is not None and self.shard.get("job") == "compile":
            return True  # a compile shard makes objects, not a wheel: its verdict was finish_compile's
        if self.probe is not None:
            return self.probe.passed  # a probe's objects, judged per TU; no wheel
        return (bool(self.postbuild) and all(r.passed for r in self.postbuild)
                and all(c.passed for c in self.imports))

    @property
    def asserted(self) -> tuple[Path, ...]:
        return tuple(r.stamped.path for r in self.postbuild if r.stamped is not None)

    def to_json(self) -> dict[str, Any]:
        return {
            "cell": self.cell.id,
            "passed": self.passed,
            "built": [str(p) for p in self.built],
            "wheels": [str(p) for p in self.asserted],
            "postbuild": [r.to_json() for r in self.postbuild],
            "plan": self.plan.to_json(),
            "build_env": str(self.build_env) if self.build_env else None,
            "imports": [c.to_json() for c in self.imports],
            "compile_cache": self.compile_cache.record() if self.compile_cache else None,
            "probe": self.probe.to_json() if self.probe else None,
        }


# ------------------------------------------------------------------------------------------------
# tools
# ------------------------------------------------------------------------------------------------
def check_engine(engine: str) -> str:
    """The engine's path, or a ToolError that names the alternatives."""
    if engine not in ENGINES:
        raise UsageError(f"unknown container engine {engine!r}", hint=f"choose {' or '.join(ENGINES)}")
    path = shutil.which(engine)
    # .ci/podman-setup.sh sets up podman; name it where podman is the way out.
    if engine == "podman":
        fix_install = "install podman (on Debian, as root: bash .ci/podman-setup.sh), or use --engine docker"
        fix_start = "as root: bash .ci/podman-setup.sh (podman + runc + containers.conf), or use --engine docker"
    else:
        fix_install = "install docker, or use --engine podman (on Debian, as root: bash .ci/podman-setup.sh)"
        fix_start = "start the docker daemon, or use --engine podman (on Debian, as root: bash .ci/podman-setup.sh)"
    if path is None:
        raise ToolError(
            f"the container engine {engine!r} is not installed; cibuildwheel needs one for Linux builds",
            hint=f"{fix_install}, or --builder native",
        )
    try:
        proc = subprocess.run([path, "info"], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"{engine} info failed: {exc}", hint=f"{fix_start}, or --builder native") from exc
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        raise ToolError(
            f"{engine} cannot start containers here ({engine} info: rc {proc.returncode}: {detail[0]})",
            hint=f"{fix_start}, or --builder native",
        )
    return path


def cibuildwheel_command() -> list[str]:
    exe = Path(sys.executable).parent / "cibuildwheel"
    found = str(exe) if exe.exists() else shutil.which("cibuildwheel")
    if not found:
        raise ToolError("cibuildwheel is not installed", hint="pip install cibuildwheel (a farm dependency)")
    return [found]


# ------------------------------------------------------------------------------------------------
# builders
# ------------------------------------------------------------------------------------------------
def _wheels(directory: Path) -> list[Path]:
    return sorted(Path(directory).glob("*.whl"))


def _fresh_output(directory: Path) -> None:
    """The plan's output directory is the builder's own: wheels of an earlier run are removed, so
    what is there afterwards is exactly what this run made."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in _wheels(directory):
        old.unlink()


def _append_summary(plan: BuildPlan, environ: Mapping[str, str]) -> None:
    """cibuildwheel overwrote the file we gave it; the real step summary gets it appended."""
    real = environ.get("GITHUB_STEP_SUMMARY")
    if real and plan.step_summary.exists() and Path(real) != plan.step_summary:
        with open(real, "a", encoding="utf-8") as out:
            out.write(plan.step_summary.read_text(encoding="utf-8"))


# Ambient cibuildwheel variables a build may keep: an image the plan does not name, debugging,
# the cache. Any other CIBW_* (CIBW_BEFORE_BUILD_LINUX, CIBW_TEST_COMMAND, CIBW_CONTAINER_ENGINE,
# ...) would change the build behind the plan's back: a variable beats the plan's config file.
_AMBIENT_CIBW = re.compile(r"CIBW_(?:(?:MANY|MUSL)LINUX_(\w+)_IMAGE|DEBUG_\w+|CACHE_PATH)")


def _on_host(plan: BuildPlan) -> bool:
    """Whether cibuildwheel builds the cell on this host (win_amd64) rather than in a container."""
    return not plan.cell.platform.startswith("linux")


def cibuildwheel_environment(plan: BuildPlan, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment cibuildwheel runs with: the caller's, minus its cibuildwheel options, plus the
    plan's. A win_amd64 build runs on the host in this environment (cibuildwheel applies the plan's
    over it), so it is :func:`passed_on`'s there, as for a native build; a container sees none of it."""
    def keep(name: str) -> bool:
        if not name.startswith("CIBW_"):
            return True
        m = _AMBIENT_CIBW.fullmatch(name)
        return m is not None and not (m[1] and f"{name[5:9].lower()}linux-{m[1].lower()}-image" in plan.options)

    base = passed_on(environ) if _on_host(plan) else environ
    return {**{k: v for k, v in base.items() if keep(k) and k != cacheseal.KEY_ENV}, **plan.env}


def developer_environment(setup: MsvcSetup, *, log: Log | None = None) -> dict[str, str]:
    """Visual Studio's developer environment for the plan's toolset (vswhere, then vcvarsall),
    plus the plan's MSVC variables; a missing Visual Studio or toolset is an environment error."""
    if sys.platform != "win32":
        raise ToolError("a win_amd64 cell is built on a Windows host with Visual Studio",
                        hint="build it on Windows (CI's windows runner), or see the plan with farm build --plan")
    found = subprocess.run(f'cmd /d /s /c "{VSWHERE}"', capture_output=True, text=True, check=False)
    lines = found.stdout.strip().splitlines() if found.returncode == 0 else []
    if not lines:
        raise ToolError("no Visual Studio with the C++ x64 build tools on this host (vswhere found none)",
                        hint=f"install Visual Studio 2022 (or its Build Tools) with the MSVC "
                             f"{setup.toolset.version} toolset")
    step = setup.vcvars.replace("%VS%", lines[-1])
    build_log(log)(f"MSVC: {step}")
    proc = subprocess.run(f'cmd /d /s /c "{step}"', capture_output=True, text=True, check=False)
    env = parse_set_output(proc.stdout)
    if proc.returncode != 0 or "VSCMD_ARG_TGT_ARCH" not in env:
        raise ToolError(f"vcvarsall.bat x64 -vcvars_ver={setup.toolset.version} did not set up the developer "
                        f"environment (rc {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-800:]}",
                        where=lines[-1], hint=f"install the MSVC {setup.toolset.version} toolset "
                                              "(Visual Studio Installer, individual components)")
    return {**env, **dict(setup.environment)}


def run_cibuildwheel(plan: BuildPlan, *, log: Log | None = None) -> list[Path]:
    """Run cibuildwheel as planned; return the wheels it wrote to the plan's output directory."""
    say = build_log(log)
    environ = dict(os.environ)
    engine = str(plan.options.get("container-engine", "docker")).split(";")[0]
    in_container = not _on_host(plan)
    if in_container:
        check_engine(engine)
    if plan.msvc is not None:  # cibuildwheel builds Windows wheels on the host, in this environment
        environ.update(developer_environment(plan.msvc, log=say))
    if not in_container:  # cibuildwheel_environment leaves them out
        say_withheld(plan, environ, say)
    plan.config_file.parent.mkdir(parents=True, exist_ok=True)
    plan.config_file.write_text(plan.config_text, encoding="utf-8")
    if in_container:  # the container runs farm's launcher script from the mounted run folder
        run_dir = compile_run_dir(plan)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / cclaunch.STATS).unlink(missing_ok=True)
        shutil.copyfile(cclaunch.__file__, run_dir / LAUNCHER_SCRIPT)
        if plan.spec.compile_cache.directory:
            Path(plan.spec.compile_cache.directory).mkdir(parents=True, exist_ok=True)
    _fresh_output(plan.output_dir)
    cmd = [*cibuildwheel_command(), *plan.argv[1:]]
    say(f"{plan.cell.id}: cibuildwheel --only {plan.identifier} (in {plan.cwd})")
    try:
        proc = run_relayed(cmd, cwd=plan.cwd, env=cibuildwheel_environment(plan, environ),
                           label=f"cibuildwheel --only {plan.identifier}", cell=plan.cell.id,
                           cpu=ContainerCpu(engine, container_label(plan.config_file.parent)) if in_container
                           else lambda: None)
    except (Interrupted, Stalled) as exc:  # its container outlives it: cibuildwheel's clean-up did not run
        if in_container:
            removed = remove_containers(engine, container_label(plan.config_file.parent))
            if removed and isinstance(exc, Interrupted):
                exc.stopped.append(f"its build container ({engine} rm --force {' '.join(removed)})")
        raise
    _append_summary(plan, environ)
    if proc.returncode != 0:
        raise ToolError(f"cibuildwheel failed for cell {plan.cell.id} (rc {proc.returncode})",
                        hint="read the build log above; a repair failure naming '.libs' means a vendored library")
    made = _wheels(plan.output_dir)
    if not made:
        raise ToolError(f"cibuildwheel made no wheel for cell {plan.cell.id}")
    return made


class ContainerCpu:
    """The CPU seconds used in the build container labelled ``label`` (its cgroup's ``cpu.stat``,
    cgroup v2): a container build's compiles run outside the step's own processes, so the step's
    watchdog counts them from here. None until the container is found, or where it cannot be read."""

    LOOK_S = 30.0  # how often the engine is asked for the container until it is found

    def __init__(self, engine: str, label: str) -> None:
        self.engine, self.label = engine, label
        self._stat: Path | None = None
        self._next = 0.0

    def __call__(self) -> float | None:
        if self._stat is None and time.monotonic() >= self._next:
            self._next = time.monotonic() + self.LOOK_S
            self._stat = self._find()
        if self._stat is None:
            return None
        try:
            for line in self._stat.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except (OSError, ValueError):
            pass
        return None

    def _find(self) -> Path | None:
        try:
            found = subprocess.run([self.engine, "ps", "--quiet", "--filter", f"label={self.label}"],
                                   capture_output=True, text=True, timeout=30, check=False)
            ids = found.stdout.split()[:1] if found.returncode == 0 else []
            pid = subprocess.run([self.engine, "inspect", "--format", "{{.State.Pid}}", *ids], capture_output=True,
                                 text=True, timeout=30, check=False).stdout.strip() if ids else ""
            group = (procs.PROC / pid / "cgroup").read_text() if pid.isdigit() else ""
        except (OSError, subprocess.TimeoutExpired):
            return None
        for line in group.splitlines():  # cgroup v2: "0::/path"
            if line.startswith("0::"):
                stat = Path("/sys/fs/cgroup") / line[3:].lstrip("/") / "cpu.stat"
                return stat if stat.is_file() else None
        return None


def remove_containers(engine: str, label: str) -> list[str]:
    """Remove (``rm --force``) the containers carrying ``label``; their IDs. A build's label names
    its work folder, so another build's container is never touched."""
    try:
        found = subprocess.run([engine, "ps", "--all", "--quiet", "--filter", f"label={label}"],
                               capture_output=True, text=True, timeout=60, check=False)
        ids = found.stdout.split() if found.returncode == 0 else []
        if ids:
            subprocess.run([engine, "rm", "--force", "--volumes", *ids], capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return ids


def run_relayed(cmd: Sequence[str] | str, *, env: Mapping[str, str], cwd: Path | str | None = None,
                shell: bool = False, label: str | None = None, cell: str | None = None,
                sessions: Callable[[], Iterable[int]] = tuple,
                cpu: Callable[[], float | None] = lambda: None) -> subprocess.CompletedProcess[bytes]:
    """Run a build step with its output (stdout and stderr, in order) relayed to stderr line by
    line through :func:`~farm.errors.redactor`: a build log never shows a secret of the
    environment (an index URL with a token that pip echoes, a password a script prints).
    stderr keeps farm's stdout for its own (``--json``) output.

    The step runs in a session of its own (:mod:`farm.builder.procs`): when farm is interrupted
    or fails while it runs, the step and every process beneath it are stopped before the
    exception goes on. A step that makes no progress for ``$FARM_STALL_TIMEOUT`` seconds is
    stopped so, and :class:`~farm.errors.Stalled` names it and ``cell``; ``sessions`` and ``cpu``:
    where else its work runs (its compiler cache server's session, its build container)."""
    scrub = redactor(env)
    what = label or clip(cmd if isinstance(cmd, str) else shlex.join(cmd), 120)
    limit = procs.stall_limit(env)
    with procs.start(cmd, env=dict(env), cwd=cwd, shell=shell, stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT) as proc:
        out = proc.stdout
        assert out is not None
        watch = procs.Watchdog(limit, lambda: (proc.pid, *sessions()), cpu)

        def relay() -> None:
            for raw in out:
                watch.output()
                sys.stderr.write(scrub(raw.decode("utf-8", "replace")))
                sys.stderr.flush()

        relayer = threading.Thread(target=relay, name=f"relay {what}", daemon=True)
        relayer.start()
        try:
            while True:  # until its output ends and the step has exited
                if relayer.is_alive():
                    relayer.join(timeout=procs.POLL_S)
                else:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=procs.POLL_S)
                if not relayer.is_alive() and proc.poll() is not None:
                    break
                stalled = watch.stalled()
                if stalled is not None:
                    raise Stalled(f"`{what}` made no progress: {stalled}; farm stopped it",
                                  where=cell, hint=STALL_HINT)
        except BaseException as exc:
            procs.stop_step(proc, f"`{what}`", exc)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode)


STALL_HINT = (f"a build that waits on itself stops so (a compiler cache whose compiles wait on each other, a "
              f"lock, a prompt for input): read the end of the build log above, and run the cell again with "
              f"--no-compile-cache to rule the compiler cache out; a step that really works that long without "
              f"output or CPU needs a higher ${procs.STALL_ENV} (seconds; 0: no limit)")


def container_python(plan: BuildPlan, *, cache_dir: Path | None = None) -> str | None:
    """The exact Python version cibuildwheel built with: the version the image's
    ``/opt/python/<tag>-<tag>`` interpreter reports, from the image's probe
    (:func:`farm.builder.images.probe_image`, cached per image ID in ``cache_dir``). None when the
    image is not here or the engine cannot say: provenance records "unknown" rather than this
    host's Python."""
    if not plan.cell.platform.startswith("linux"):
        return None
    engine = str(plan.options.get("container-engine", "docker")).split(";")[0]
    arch = plan.cell.platform.removeprefix("linux_")
    named = plan.options.get(f"manylinux-{arch}-image")
    image = image_for(arch, {arch: str(named)} if named else {}, os.environ)
    if not image or shutil.which(engine) is None:
        return None
    facts, _ = probe_image(engine, image, cache_dir)
    return facts.pythons.get(plan.cell.python) if facts is not None else None


def passed_on(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's ``environ`` as a build on the host starts from: without the variables of
    :data:`~farm.model.config.COMPILER_ENV`, which a container never sees, so the build takes its
    compilers, flags and search paths from the plan alone (the plan's values are applied over this)."""
    return {k: v for k, v in environ.items() if k not in COMPILER_ENV and k != cacheseal.KEY_ENV}


def withheld(environment: Iterable[tuple[str, str]], environ: Mapping[str, str]) -> list[str]:
    """The variables :func:`passed_on` leaves out of the caller's ``environ`` that the plan's
    ``environment`` does not set itself: those the build goes without, which the log names."""
    planned = {name for name, _ in environment}
    return sorted(k for k in environ if k in COMPILER_ENV and k not in planned)


def say_withheld(plan: BuildPlan, environ: Mapping[str, str], say: Log) -> None:
    """One line naming :func:`withheld`'s variables (never their values), when there are any."""
    dropped = withheld(plan.native.environment if plan.native else (), environ)
    if dropped:
        say(f"{plan.cell.id}: not passed to the build: {', '.join(dropped)} "
            "(a native build takes its flags from the recipe, as the container does)")


def native_environment(steps: NativeSteps, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` (:func:`passed_on`'s, then the build environment's ``PATH``) with the plan's
    environment applied as cibuildwheel applies it in a container: the same string, evaluated by
    cibuildwheel's own parser (bashlex), so ``$VAR``, quotes and ``$(...)`` mean the same in both
    builders, and a ``$CFLAGS`` in the plan is empty in both."""
    # cibuildwheel is the `build` extra's: imported here, farm's light install runs without it
    from cibuildwheel.environment import EnvironmentParseError, parse_environment  # noqa: PLC0415

    text = render_environment(steps.environment)
    try:
        return parse_environment(text).as_dictionary(prev_environment=environ)
    except EnvironmentParseError as exc:
        raise ConfigError(f"the build environment does not parse as cibuildwheel's: {exc}",
                          hint="check the recipe's env values (shell syntax)") from None


def cell_interpreter(cell: Cell, *, log: Log | None = None) -> Interpreter:
    """The host's interpreter of the cell's Python (:mod:`farm.builder.interpreters`); uv installs a
    managed one when none is found and uv is here; otherwise the preflight's refusal
    (:func:`~farm.builder.preflight.python_blocker`) naming where it looked."""
    search = find_interpreter(cell.python)
    if search.interpreter is not None:
        return search.interpreter
    uv = buildenv.find_uv()
    if uv is None:  # the preflight's refusal, word for word and with its exit code
        raise python_blocker(search, uv=False).error(cell)
    build_log(log)(f"{cell.id}: uv python install {search.wanted}")
    return install_managed(cell.python, uv)


def run_native(plan: BuildPlan, *, log: Log | None = None, env_root: Path | None = None,
               built_env: list[BuildEnv] | None = None, interpreter: Interpreter | None = None,
               farm_deps: Sequence[FarmDep] = (), cache_counts: list[Counts] | None = None) -> list[Path]:
    """Run the plan on this host: the shared build environment of the cell's Python (made once per
    contents, see :mod:`farm.builder.buildenv`), plan environment, build, repair. ``interpreter``:
    the cell's Python as the preflight found it (found here otherwise). ``built_env`` receives the
    environment used (its interpreter and torch go into the provenance). ``farm_deps``: the farm
    wheels its extra_deps pin, installed from their files (:mod:`farm.builder.farmdeps`). ``cache_counts``
    receives the compiler cache's counts for the build, when it was on and counted."""
    say = build_log(log)
    steps = plan.native
    if steps is None:
        raise UsageError(f"the plan for {plan.cell.id} has no native steps")
    if not sys.platform.startswith("linux") or not plan.cell.platform.startswith("linux"):
        raise ToolError(f"the native builder builds Linux cells on Linux; cell {plan.cell.id} is {plan.cell.platform}",
                        hint="use --builder cibuildwheel on a host of that platform")
    machine = os.uname().machine
    if not plan.cell.platform.endswith(machine):
        raise ToolError(f"cell {plan.cell.id} is {plan.cell.platform}, this host is {machine}",
                        hint="build it on a host of that architecture, or under emulation with cibuildwheel")
    work = plan.config_file.parent
    dist = work / "dist"
    remove(dist)
    # read once: neither the build environment's installs (an sdist there would build with them)
    # nor the build see the caller's compiler variables
    say_withheld(plan, os.environ, say)
    env = passed_on(os.environ)
    env.pop("PYTHONPATH", None)

    server: list[int] = []  # the compiler cache server's session: its compiles are the build's work too

    def run(cmd: Sequence[str] | str, what: str, **kw: Any) -> None:
        say(f"{plan.cell.id}: {what}")
        proc = run_relayed(cmd, env=env, shell=isinstance(cmd, str), label=what, cell=plan.cell.id,
                           sessions=lambda: server, **kw)
        if proc.returncode != 0:
            raise ToolError(f"{what} failed for cell {plan.cell.id} (rc {proc.returncode})",
                            hint="read the build log above")

    # the plan's before-build steps (build tools, torch, extra_deps) are the environment's contents
    interpreter = interpreter or cell_interpreter(plan.cell, log=say)
    if interpreter.tag != plan.cell.python:
        raise UsageError(f"cell {plan.cell.id} needs {plan.cell.python}; {interpreter.path} is {interpreter.tag}")
    say(f"{plan.cell.id}: Python {interpreter.version} ({interpreter.found_by}: {interpreter.path})")
    direct = {d.requirement: d.direct_reference for d in farm_deps}
    benv = buildenv.ensure_env(buildenv.spec_for(plan.spec, interpreter.path, direct),
                               Path(env_root or work.parent / "envs"), environ=env,
                               log=lambda m: say(f"{plan.cell.id}: {m}"),
                               runner=lambda cmd, e: run_relayed(cmd, env=e, cell=plan.cell.id).returncode)
    if built_env is not None:
        built_env.append(benv)
    venv = benv.path
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env = native_environment(steps, env)
    env["GITHUB_STEP_SUMMARY"] = str(plan.step_summary)
    env.update(reproducible_environment(plan.cwd.as_posix(), plan.cuda_home, venv.as_posix()))
    cached = plan.spec.compile_cache.enabled
    state: dict[str, object] = {}
    try:
        # the launchers, cached or not; the build environment's site-packages (torch's headers) as a base directory
        state = cclaunch.setup(str(compile_run_dir(plan)), f"{plan.cuda_home}/bin/nvcc", env,
                               basedirs=[str(p) for p in sorted(venv.glob("lib/python*/site-packages"))],
                               cached=cached)
        if cached:
            server.extend(procs.sccache_session(env))
        run([str(venv / "bin" / "python"), "-m", "build", *steps.build_args, "--outdir", str(dist),
             plan.package_dir], "python -m build --wheel --no-isolation", cwd=plan.cwd)
        if cached:  # what the cache served, recompiled uncached (cclaunch.recheck)
            run([sys.executable, "-I", "-S", cclaunch.__file__, "recheck", str(compile_run_dir(plan))],
                "compile cache recheck", cwd=plan.cwd)
    except (Interrupted, Stalled) as exc:  # the private server goes with the build, and the compiles it ran
        sccache = state.get("sccache") or (cclaunch.find_sccache(env) if cached else None)
        stopped = procs.stop_sccache_server(sccache, env) if isinstance(sccache, str) else None
        if stopped and isinstance(exc, Interrupted):
            exc.stopped.append(stopped)
        raise
    except BaseException:  # a failed build: the server stops all the same
        if cached:
            cclaunch.stats(str(compile_run_dir(plan)), env)
        raise
    # the server stops whatever the build did; its counts are the build's
    stats = cclaunch.stats(str(compile_run_dir(plan)), env) if cached else None
    if stats is not None and cache_counts is not None:
        cache_counts.append(Counts.from_stats(stats))
    if cached:
        check_recheck(compile_run_dir(plan) / cclaunch.RECHECK, plan.cell.id)
    built = _wheels(dist)
    if len(built) != 1:
        raise ToolError(f"the build of cell {plan.cell.id} made {len(built)} wheels in {dist}, expected 1")
    _fresh_output(plan.output_dir)
    # Only these two placeholders, as cibuildwheel does: the check script has braces of its own.
    repair = steps.repair_command.replace("{wheel}", shlex.quote(str(built[0]))).replace(
        "{dest_dir}", shlex.quote(str(plan.output_dir)))
    run(repair, "auditwheel repair + vendoring check", cwd=plan.cwd)
    made = _wheels(plan.output_dir)
    if not made:
        raise ToolError(f"auditwheel wrote no wheel for cell {plan.cell.id}")
    return made


# ------------------------------------------------------------------------------------------------
# one cell, end to end
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BuildSettings:
    builder: BuilderKind = BuilderKind.CIBUILDWHEEL
    engine: str = "docker"
    images: Mapping[str, str] = field(default_factory=dict)  # arch (x86_64, aarch64) -> manylinux image
    out_dir: Path = Path("wheelhouse")  # asserted, stamped wheels + ledger fragments
    work_root: Path = Path(".cache/build")  # per-cell work folders (raw wheels, logs, venvs)
    source_cache: Path = Path(".cache/sources")
    toolkit_root: Path = Path(".cache/toolkit")
    cuda_home: Path | None = None  # use this installed toolkit instead of assembling one (hosts builds)
    torch_index: str | None = None  # URL or "pip" (--torch-index / $FARM_TORCH_INDEX); None: _defaults.yml's
    env_root: Path | None = None  # shared build environments (native builder); None: beside work_root
    shard: ShardJob | None = None  # build one compile shard (i/N) or the link job of a sharded cell
    shard_dir: Path = Path(".cache/shards")  # per-cell shard folders: objects handed from compile to link
    probe: bool = False  # compile only the first TU of each extension and judge it; no wheel (buildprobe.py)
    toolkit_source: str | None = None  # redist | pypi: overrides the line's pin (--toolkit-source)
    redist_url: str | None = None  # the redist root; None: $FARM_CUDA_REDIST_URL, else _defaults.yml's
    pip_cache: Path | None = None  # pip's download cache, mounted into the container (--pip-cache)
    compile_cache: CompileCache = field(default_factory=CompileCache.off)  # the spec's (farm build: on, local)


def compile_run_dir(plan: BuildPlan) -> Path:
    """The build's compiler-cache folder on this host: launchers, server socket, counts."""
    return plan.config_file.parent / RUN_DIR


def shared_source_home(work_root: Path, cell: Cell) -> Path:
    """Where a native build with the compiler cache prepares its source: one folder for every
    Python of a (package, version, CUDA, torch, platform) row. nvcc derives the names of a unit's
    internal symbols from its absolute path, so the same kernel file at another path is another
    object; at the same path, a second Python's build hits on every unit that does not include
    Python.h. Builds of one row take turns on it (a lock)."""
    row = f"{cell.package}-{cell.version}-cu{cell.cuda}-torch{cell.torch}-{cell.platform}"
    return Path(work_root).absolute() / "rows" / row


def spec_overrides(settings: BuildSettings) -> SpecOverrides:
    """What the command line and the environment decide over the config, for :func:`resolve_spec`."""
    return SpecOverrides(torch_index=settings.torch_index, toolkit_source=settings.toolkit_source,
                         redist_url=settings.redist_url, env=dict(os.environ), compile_cache=settings.compile_cache)


def build_cell(
    config: FarmConfig,
    recipe: Recipe,
    cell: Cell,
    settings: BuildSettings,
    *,
    arch: ArchRequest | None = None,
    torch_version: str | None = None,
    interpreter: Interpreter | None = None,
    log: Log | None = None,
) -> BuildResult:
    """Fetch, prepare, plan, build and postbuild one cell, then check that each asserted wheel
    imports in a fresh environment (``verify:``); ``interpreter``: the cell's Python for the
    native builder, as the preflight found it.

    The cell's :class:`~farm.builder.spec.BuildSpec` is resolved once, here (``arch`` and
    ``torch_version``: what the matrix resolved, carried in); the lint, the toolkit, the plan and
    postbuild all take it from the spec, which is written as ``build-spec.json`` in the cell's
    work folder."""
    say = build_log(log)
    # before anything is fetched: the package's code runs here (its build, or its wheel's import check)
    cacheseal.refuse_env_key(os.environ, f"the package code of {cell.id} (its build or its import check)")
    started = time.monotonic()  # the cell's build time goes into its provenance: the matrix plans with it
    spec = resolve_spec(config, recipe, cell, spec_overrides(settings), arch=arch, torch_version=torch_version)
    # before anything is fetched: the farm wheels it builds against must be in the wheelhouse
    farm_deps: tuple[FarmDep, ...] = ()
    if spec.farm_deps:  # another recipe's wheel of this cell, from farm's wheelhouse, bytes pinned
        farm_deps = farmdeps.resolve(spec.farm_deps, cell, Path(settings.out_dir).absolute())
        for dep in farm_deps:
            say(f"{cell.id}: building against farm's {dep.wheel.name} (sha256 {dep.sha256[:12]}...)")
    work = (Path(settings.work_root) / cell.id).absolute()
    work.mkdir(parents=True, exist_ok=True)
    home = work
    if spec.compile_cache.enabled and settings.builder is BuilderKind.NATIVE:
        home = shared_source_home(settings.work_root, cell)  # cibuildwheel's is /project, always
        home.mkdir(parents=True, exist_ok=True)
    with FileLock(str(home / ".build.lock")):
        return _build_cell(config, recipe, cell, settings, spec, work, home, say=say, interpreter=interpreter,
                           farm_deps=farm_deps, started=started)


@dataclass(frozen=True)
class NativeRun:
    """What the native builder runs for a planned cell (``farm build --plan --builder native``):
    the host's interpreter, the shared build environment it makes or reuses, the environment,
    the build command and the repair, exactly as :func:`run_native` takes them from the plan."""

    interpreter: Interpreter | None
    interpreter_note: str  # how it was found, or why there is none (and what the build does then)
    env: buildenv.EnvSpec | None  # None: no interpreter here yet (uv installs one first)
    env_path: Path | None
    env_ready: bool  # a finished environment of these contents is there: the build reuses it
    build: tuple[str, ...]  # python -m build ..., run in the plan's cwd
    repair: str  # auditwheel repair + the vendoring check ({wheel}/{dest_dir} as the build fills them)
    compile_cache: str  # the compiler cache as this build uses it

    def to_json(self) -> dict[str, object]:
        return {"interpreter": {"path": str(self.interpreter.path), "version": self.interpreter.version,
                                "found_by": self.interpreter.found_by} if self.interpreter else None,
                "interpreter_note": self.interpreter_note,
                "build_env": {"path": str(self.env_path) if self.env_path else None, "ready": self.env_ready,
                              "contents": self.env.to_json() if self.env else None},
                "build": list(self.build), "repair": self.repair, "compile_cache": self.compile_cache}


@dataclass(frozen=True)
class CellPlan:
    """What ``farm build --plan`` shows of one cell: its plan, and the patches as they applied;
    with ``native``, what the native builder runs instead of cibuildwheel."""

    plan: BuildPlan
    patches: tuple[str, ...]  # the recipe's scripts for the cell's platform, in the order they ran
    patch_output: tuple[str, ...]  # what they printed
    native: NativeRun | None = None  # --builder native
    refused: str | None = None  # why the chosen builder cannot build the cell on this host

    def to_json(self) -> dict[str, object]:
        return {**self.plan.to_json(), "builder": "native" if self.native or self.refused else "cibuildwheel",
                "patches": list(self.patches), "patch_output": list(self.patch_output),
                "native": self.native.to_json() if self.native else None, "refused": self.refused}

    def render(self) -> str:
        plan, steps = self.plan, self.plan.native
        builder = "the native builder" if self.native or self.refused else "cibuildwheel"
        lines = [f"{plan.cell.id}: the build as planned for {builder} (nothing is downloaded or compiled)",
                 f"  arch list: {plan.spec.arch.archs.canonical()} ({plan.spec.arch.origin})",
                 f"  source: {plan.cwd} (build folder {plan.package_dir})"]
        lines += [f"  patch: {s}" for s in self.patches] or ["  patch: none"]
        lines += [f"    {line}" for line in self.patch_output]
        if self.refused:
            lines.append(f"  native builder: cannot build this cell on this host: {self.refused}")
            return "\n".join(lines)
        if plan.msvc is not None:
            lines += [f"  {line}" for line in plan.msvc.render()]
        lines.append(f"  CUDA_HOME: {plan.cuda_home}")
        if self.native is not None:
            run = self.native
            lines.append(f"  interpreter: {run.interpreter_note}")
            if run.env is not None:
                state = "reused: it is there" if run.env_ready else "made by the build"
                lines.append(f"  build environment: {run.env_path} ({state})")
                lines += [f"    install: {r}" for r in run.env.requirements]
                if run.env.torch:
                    index = run.env.torch_index
                    where = "pip's configured index" if index in (None, "pip") else index
                    lines.append(f"    install: {run.env.torch} from {where}")
            else:
                lines.append("  build environment: made by the build, from the interpreter uv installs")
        lines += [f"  env {k}={v}" for k, v in (steps.environment if steps else ())]
        if self.native is not None:
            lines += [f"  compile cache: {self.native.compile_cache}",
                      f"  build: {shlex.join(self.native.build)} (in {plan.cwd})", f"  repair: {self.native.repair}"]
        else:
            lines += [f"  before-build: {step}" for step in (steps.before_build if steps else ())]
            lines.append(f"  cibuildwheel: {shlex.join(plan.argv)}")
        return "\n".join(lines)


def plan_cell(config: FarmConfig, recipe: Recipe, cell: Cell, settings: BuildSettings, *,
              arch: ArchRequest | None = None, torch_version: str | None = None, log: Log | None = None) -> CellPlan:
    """The cell's build up to its plan: the source fetched and patched for the cell's platform
    (in CACHE/build/plan/CELL), the spec and the plan, with the toolkit where farm would assemble
    it and the farm wheels it builds against from the wheelhouse. Nothing is compiled and no
    toolkit is downloaded, so any cell of the grid (a Windows cell on a Linux host too) can be
    planned."""
    spec = resolve_spec(config, recipe, cell, spec_overrides(settings), arch=arch, torch_version=torch_version)
    work = (Path(settings.work_root) / "plan" / cell.id).absolute()
    work.mkdir(parents=True, exist_ok=True)
    tree = fetch(recipe.source, Path(settings.source_cache).absolute(), package=recipe.name, progress=build_log(log),
                 vendor=recipe.vendor)
    printed: list[str] = []
    src = prepare_source(tree.root, recipe, config.root, work, log=printed.append, knobs=spec.knobs,
                         platform=cell.platform)
    prefix = toolkit_prefix(Path(settings.toolkit_root).absolute(), spec.toolkit)
    home = settings.cuda_home or prefix / home_in_prefix(spec.toolkit)
    options = PlanOptions(output_dir=work / "wheelhouse", work_dir=work, container_engine=settings.engine,
                          images=settings.images, host_cuda_home=Path(home), host_toolkit_prefix=prefix,
                          pip_cache=settings.pip_cache)
    if spec.farm_deps:  # the farm wheels it builds against, as the build would take them (missing: an error)
        deps = farmdeps.resolve(spec.farm_deps, cell, Path(settings.out_dir).absolute())
        options = replace(options, farm_deps=deps, farm_deps_dir=stage_farm_deps(deps, work / "farm-deps"))
    plan = plan_build(recipe, cell, src, options, spec=spec)
    scripts = spec.knobs.patch_scripts(cell.platform)
    patched = tuple(line.strip() for line in printed)
    if settings.builder is not BuilderKind.NATIVE:
        return CellPlan(plan, scripts, patched)
    blocker = platform_blocker(cell, BuilderKind.NATIVE.value, Host.this())
    if blocker is not None:
        return CellPlan(plan, scripts, patched, refused=blocker.reason)
    plan = _native_plan(plan, str(home))
    env_root = Path(settings.env_root or Path(settings.work_root).parent / "envs").absolute()
    return CellPlan(plan, scripts, patched, native=native_run(plan, env_root, options.farm_deps))


def native_run(plan: BuildPlan, env_root: Path, farm_deps: Sequence[FarmDep] = ()) -> NativeRun:
    """What :func:`run_native` will run for ``plan`` on this host, found as it finds it (the
    interpreter is probed; nothing is installed or made)."""
    assert plan.native is not None
    search = find_interpreter(plan.cell.python)
    interpreter = search.interpreter
    env = path = None
    ready = False
    if interpreter is not None:
        note = f"Python {interpreter.version} ({interpreter.found_by}: {interpreter.path})"
        env = buildenv.spec_for(plan.spec, interpreter.path, {d.requirement: d.direct_reference for d in farm_deps})
        path = env_root / env.slug
        ready = (path / buildenv.SPEC_FILE).is_file() and buildenv.reuse_problem(env, path) is None
    elif buildenv.find_uv() is not None:
        note = f"none here ({'; '.join(search.looked)}): the build runs uv python install {search.wanted} first"
    else:
        note = f"none here ({'; '.join(search.looked)}): the build is refused"
    python = str(path / "bin" / "python") if path else "python"
    dist = plan.config_file.parent / "dist"
    build = (python, "-m", "build", *plan.native.build_args, "--outdir", str(dist), plan.package_dir)
    cache = plan.spec.compile_cache
    cached = cache.describe()
    if cache.enabled:
        socket = dict(plan.native.environment).get("SCCACHE_SERVER_UDS")
        cached += (f": a private sccache server on {socket} for this build, stopped after it; "
                   f"launchers in {compile_run_dir(plan) / BIN}")
    repair = plan.native.repair_command.replace("{dest_dir}", shlex.quote(str(plan.output_dir)))
    return NativeRun(interpreter, note, env, path, ready, build, repair.replace("{wheel}", f"{dist}/<wheel>"),
                     cached)


def _build_cell(config: FarmConfig, recipe: Recipe, cell: Cell, settings: BuildSettings, spec: BuildSpec,
                work: Path, home: Path, *, say: Log, interpreter: Interpreter | None,
                farm_deps: tuple[FarmDep, ...], started: float) -> BuildResult:
    tree: SourceTree = fetch(recipe.source, Path(settings.source_cache).absolute(), package=recipe.name,
                             vendor=recipe.vendor,
                             progress=say)
    src = prepare_source(tree.root, recipe, config.root, home, log=say, knobs=spec.knobs, platform=cell.platform)
    # the lint again, on exactly what is compiled: a patch that stopped matching shows here
    report = lint_as_built(config, recipe, tree, spec.arch.archs, Path(settings.source_cache).absolute(),
                           prepared=src, knobs=spec.knobs, extensions=spec.arch.extensions, cuda=cell.cuda,
                           platform=cell.platform)
    for ignore in report.stale_ignores:  # stale under every list is the matrix's verdict; here, a note
        say(f"{cell.id}: lint_ignore at {ignore.where} matches nothing in the source as built for this arch list")
    if not report.passed:
        raise DefectError(f"the arch-gate lint fails on the source of {cell.id} as built "
                          f"(after its patch_script):\n{report.render()}", where=recipe.display,
                          hint="declare the arch, or fix the patch script (farm lint shows the findings)")

    # the kernel families as this cell's source configures them: the assertion checks each one
    spec = replace(spec, families=families_from_lint(report.scope))
    # The host toolkit: the native build uses it; a container build mounts it read-only, so both
    # build with the archives verified here; postbuild takes its nvcc version and cuobjdump.
    # the spec carries the toolkit request and torch's index: the options are only where and how
    base = PlanOptions(output_dir=work / "wheelhouse", work_dir=work)
    if settings.cuda_home is not None:
        tk: Toolkit = toolkit_at_home(settings.cuda_home)
        if tk.cuda != cell.cuda:
            raise UsageError(f"CUDA_HOME {tk.cuda_home} is CUDA {tk.cuda}, cell {cell.id} needs {cell.cuda}",
                             hint="pass the toolkit of the cell's CUDA line, or filter with --cuda")
        # an installed toolkit is checked for what torch's headers and the recipe need
        needed: tuple[str, ...] = spec.required_components
    else:
        request = spec.toolkit
        tk = ensure_toolkit(request, toolkit_prefix(Path(settings.toolkit_root).absolute(), request), progress=say)
        needed = request.components
    # before the first nvcc: a missing header or library now, not 20 minutes into the build
    check_toolkit(tk.cuda_home, needed, source_root=src, recipe_where=recipe.display,
                  windows=cell.platform.startswith("win"))
    options = replace(
        base,
        container_engine=settings.engine,
        images=settings.images,
        host_cuda_home=tk.cuda_home,
        host_toolkit_prefix=tk.prefix,
        pip_cache=settings.pip_cache,
    )
    if farm_deps and settings.builder is BuilderKind.CIBUILDWHEEL:  # the container gets verified copies
        options = replace(options, farm_deps=farm_deps, farm_deps_dir=stage_farm_deps(farm_deps, work / "farm-deps"))
    setup = None
    if settings.shard is not None:  # one compile shard or the link job of a sharded cell
        setup = shardjob.prepare(Path(settings.shard_dir).absolute(), settings.shard, cell.id, src, spec.digest)
        say(f"{cell.id}: {'link job' if settings.shard.is_link else f'compile shard {settings.shard.label}'} "
            f"({len(setup.table)} .cu file(s) in the source, folder {setup.directory})")
    elif settings.probe:  # the first TU of each extension, through the same launcher
        setup = shardjob.prepare_probe(Path(settings.shard_dir).absolute() / "probe", cell.id, src, spec.digest)
        say(f"{cell.id}: PROBE: the first TU of each extension is compiled and checked, the others are "
            f"stand-ins; no wheel ({len(setup.table)} .cu file(s) in the source, folder {setup.directory})")
    options = replace(options, shard=setup)
    plan = plan_build(recipe, cell, src, options, spec=spec)
    write_spec(spec, work)
    error: ToolError | None = None
    built: list[Path] = []
    torch_built: Mapping[str, Any] | None = None
    env_path: Path | None = None
    counts: list[Counts] = []
    envs: list[BuildEnv] = []
    env_root = Path(settings.env_root or Path(settings.work_root).parent / "envs").absolute()
    try:
        if settings.builder is BuilderKind.NATIVE:
            plan = _native_plan(plan, str(tk.cuda_home), setup)
            with cacheseal.retiring():  # the package's code ran here, as this user
                built = run_native(plan, log=say, built_env=envs, env_root=env_root, interpreter=interpreter,
                                   farm_deps=farm_deps, cache_counts=counts)
            torch_built = envs[0].torch_record() if envs else None
            env_path = envs[0].path if envs else None
        else:
            try:
                with cacheseal.retiring() if _on_host(plan) else contextlib.nullcontext():
                    built = run_cibuildwheel(plan, log=say)
            finally:
                counts += container_counts(plan)
            if plan.spec.compile_cache.enabled and not _on_host(plan):  # the container's recheck
                check_recheck(compile_run_dir(plan) / cclaunch.RECHECK, cell.id)
            torch_built = {"version": plan.spec.torch_version, "cuda": cell.cuda} if plan.spec.torch_version else None
    except ToolError as exc:
        if setup is None:
            raise
        error = exc  # the shard verdict names the TU or the shard; it raises
    cache_counts = counts[0] if counts else None
    if cache_counts is not None:
        say(f"{cell.id}: {cache_counts.line()}")
    if setup is not None and setup.job.probe:
        # stand-ins inside: never a wheel (the raw one in dist/, the repaired one in the output folder)
        buildprobe.discard(built, (plan.config_file.parent / "dist", base.output_dir))
        probed = buildprobe.finish_probe(setup, error, spec.expected, tk.cuobjdump)
        say(f"{cell.id}: PROBE {'passed' if probed.passed else 'FAILED'}: {len(probed.units)} extension(s)' first "
            f"TU checked, {probed.stand_ins} stand-in(s), {round(time.monotonic() - started, 1)} s")
        return BuildResult(cell, plan, (), build_env=env_path, compile_cache=cache_counts, probe=probed)
    if setup is not None:
        if not setup.job.is_link:  # its wheel holds stand-ins for the other shards' TUs: never postbuilt
            record = shardjob.finish_compile(setup, error)
            say(f"{cell.id}: compile shard {setup.job.label}: {len(record.units)} TU(s) compiled "
                f"into {setup.directory}")
            return BuildResult(cell, plan, tuple(built), shard=record.to_json(), build_env=env_path,
                               compile_cache=cache_counts)
        link = shardjob.finish_link(setup, error)
        say(f"{cell.id}: link job: {link['served']} object(s) from {setup.job.count} compile shards, "
            f"{link['rechecked']} of them recompiled uncached and identical")
    # the Python that built the wheel: the build environment's for native builds, the container's otherwise
    python = (envs[0].spec.python if envs else None) if settings.builder is BuilderKind.NATIVE \
        else container_python(plan, cache_dir=Path(settings.work_root).absolute().parent)
    # A link job's own time is not its cell's build (the compile shards ran elsewhere): unrecorded,
    # so the matrix keeps estimating the cell from its recipe's sharding.
    duration = None if setup is not None else round(time.monotonic() - started, 1)
    context = spec.context(
        **build_environment(cell, cuda_home=tk.cuda_home, builder=settings.builder.value, toolkit=tk.record(),
                            python=python, torch_built=torch_built, farm_deps=tuple(d.record() for d in farm_deps),
                            compile_cache=cache_counts.record() if cache_counts else None, image=image_of(plan)),
        source=buildinfo.source_from(tree.description), duration_s=duration)
    # each wheel asserted, stamped and recorded by the spec (its cuobjdump, not the toolkit's)
    results = tuple(postbuild_wheel(wheel, Path(settings.out_dir).absolute(), context, dist=spec.dist)
                    for wheel in built)
    imports = tuple(
        check for r in results if r.passed and r.stamped is not None
        for check in [import_check(spec, r.stamped.path, work, env=envs[0] if envs else None, env_root=env_root,
                                   find_links=Path(settings.out_dir).absolute(), log=say, assertion=r.report)]
        if check is not None
    )
    return BuildResult(cell, plan, tuple(built), results, build_env=env_path,
                       shard=None if setup is None else {"job": "link", "count": setup.job.count}, imports=imports,
                       compile_cache=cache_counts)


def stage_farm_deps(deps: Sequence[FarmDep], folder: Path) -> Path:
    """Copies of the resolved farm wheels in ``folder`` (emptied first) for a build container to
    mount read-only, each copy's sha256 checked against the resolved one: the container is given
    exactly the bytes that were verified, and nothing else of the wheelhouse."""
    remove(folder)
    folder.mkdir(parents=True)
    for dep in deps:
        copy = folder / dep.wheel.name
        shutil.copyfile(dep.wheel, copy)
        if sha256_file(copy) != dep.sha256:
            raise WheelError(f"{dep.wheel.name} changed while it was copied for the build container",
                             where=str(dep.wheel), hint="rebuild it with farm build, then build again")
    return folder


def import_check(spec: BuildSpec, wheel: Path, work: Path, *, env: BuildEnv | None, env_root: Path,
                 find_links: Path, log: Log, assertion: AssertionReport) -> ImportCheck | None:
    """The stamped wheel installed in a fresh venv of the cell's Python and imported as the
    recipe's ``verify:`` says (:mod:`farm.builder.verify`). The venv sees the build environment's
    torch for a torch-linked cell (a cibuildwheel build makes or reuses the same environment on
    the host); pip finds farm wheels it requires (a sibling's pin) in ``find_links``. A wheel that
    fails is removed from the output folder with its ledger fragment; so ``assertion``, the wheel's
    passed assertion, is logged first, extension by extension: the log keeps what it found. None,
    said in one line, when this host cannot import the cell's platform."""
    cell = spec.cell
    host = f"linux_{os.uname().machine}" if sys.platform.startswith("linux") else None
    if cell.platform != host:
        log(f"{cell.id}: import check not run: a {cell.platform} wheel cannot be imported on this host")
        return None
    if env is None or env.spec.python.rsplit(".", 1)[0] != spec.python:
        # a container build: the host's interpreter of the cell's Python, when it has one
        search = find_interpreter(cell.python)
        if search.interpreter is None:
            log(f"{cell.id}: import check not run: {search.missing()}")
            return None
        interpreter = search.interpreter
        env = None
        if cell.torch != NO_TORCH:  # torch from the environment a native build of the cell uses
            env = buildenv.ensure_env(buildenv.spec_for(spec, interpreter.path), env_root,
                                      log=lambda m: log(f"{cell.id}: {m}"),
                                      runner=lambda cmd, e: run_relayed(cmd, env=e).returncode)
        python_exe = os.path.realpath(interpreter.path)
    else:
        python_exe = env.spec.python_exe
    site = None
    if cell.torch != NO_TORCH and env is not None:
        site = next(iter(sorted(env.path.glob("lib/python*/site-packages"))), None)
    for line in filter(None, assertion.render().splitlines()):
        log(f"{cell.id}: {line}")
    try:
        with cacheseal.retiring():  # importing the wheel runs its code here, as this user
            check = verify.check_wheel(wheel, spec.verify, dist=spec.dist, interpreter=python_exe, work=work,
                                       visible_site=site, find_links=[find_links],
                                       first=("torch",) if cell.torch != NO_TORCH else (),
                                       runtime=spec.runtime_wheels, log=lambda m: log(f"{cell.id}: {m}"))
    except FarmError:  # the check could not run (pip cannot install a requirement): not a checked wheel
        _withdraw(wheel, f"{cell.id}: the import check could not run", log)
        raise
    for line in check.render().splitlines():
        log(f"{cell.id}: {line}")
    if not check.passed:
        _withdraw(wheel, f"{cell.id}: the import check failed", log)
    return check


def _withdraw(wheel: Path, why: str, log: Log) -> None:
    """A wheel and its ledger fragment out of the output folder, where nothing may publish them."""
    wheel.unlink(missing_ok=True)
    Path(f"{wheel}{FRAGMENT_SUFFIX}").unlink(missing_ok=True)
    log(f"{why}: {wheel.name} and its ledger fragment were removed")


def _native_plan(plan: BuildPlan, home: str, shard: ShardSetup | None = None) -> BuildPlan:
    """The native build uses the host toolkit (``home``): rewrite CUDA_HOME/PATH/LIBRARY_PATH of the container plan."""
    assert plan.native is not None
    cache = plan.spec.compile_cache
    cache_dir = cache.directory if cache.backend == "local" else None
    # the toolkit, the launchers, the cache folder and the build's folders as this host sees them
    run_dir = compile_run_dir(plan).absolute().as_posix()
    host = {"CUDA_HOME": home, "CUDA_PATH": home, "PATH": f"{home}/bin:$PATH", "LIBRARY_PATH": f"{home}/lib64/stubs",
            **dict(compile_cache_environment(plan.spec, run_dir, cache_dir)),
            **dict(reproducible_environment(plan.cwd.as_posix(), home))}
    cache_bin = f"{run_dir}/{BIN}"
    env = tuple((k, host.get(k, v)) for k, v in plan.native.environment)
    if shard is not None:  # the launcher as this host sees it, not the container's mount
        # the shard's pairs as the container sees them (from FARM_SHARD_DIR on, PATH among them)
        # are replaced in place, so its PATH still comes after the toolkit's
        pairs = shard.environment(shard.directory.as_posix(), plan.cwd.as_posix(), home, cache_bin)
        at = next(i for i, (k, _) in enumerate(env) if k == "FARM_SHARD_DIR")
        env = (*env[:at], *pairs, *env[at + len(pairs):])
    return replace(plan, native=replace(plan.native, environment=env), cuda_home=home)


def container_counts(plan: BuildPlan) -> list[Counts]:
    """The counts the container's server left in the mounted run folder (none: off or unknown)."""
    path = compile_run_dir(plan) / cclaunch.STATS
    if not plan.spec.compile_cache.enabled or not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [Counts.from_stats(data)] if isinstance(data, dict) else []


def image_of(plan: BuildPlan) -> str | None:
    """The container image a cibuildwheel build of ``plan`` runs in, as named (None: cibuildwheel's own)."""
    image = next((v for k, v in plan.options.items() if k.startswith("manylinux-") and k.endswith("-image")), None)
    return image if isinstance(image, str) else None

