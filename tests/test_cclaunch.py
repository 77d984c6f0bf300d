"""The compiler cache's launchers (:mod:`farm.builder.cclaunch`): how ``launch`` hands an nvcc call
to sccache.

sccache's argument table lacks some nvcc options that take a value; given as two items (gsplat's
``-diag-suppress 20012,186``), sccache took the value for a second input file and ran the whole
call uncached ("multiple input files"), outside the hit and miss counts. ``launch`` joins those
into ``-opt=value``. Fast: the rewrite itself, through the real shell script. Slow (real nvcc,
real sccache): gsplat's command line, as torch's ninja file gives it, is cached and compiles the
object an uncached nvcc does; every joined option compiles the same joined or apart. And the
server's socket file, which sccache leaves behind, removed once no server answers on it.

sccache 0.16.0 reads nvcc's ``-optf``, ``-odir``, ``-opt-info`` and ``-objtemp`` as its ``-o``: bare,
it serves one options file's object for another (slow, reproduced); ``launch`` runs such a call
uncached and ``stats`` counts it among the not cacheable, as it does one with such an option in
NVCC_PREPEND_FLAGS or NVCC_APPEND_FLAGS, which sccache reads as arguments too. nvcc's -target-dir it
leaves to sccache, which keys the headers the folder selects (slow, reproduced).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from farm.builder import cclaunch, procs
from farm.builder.builders import run_relayed
from farm.builder.compilecache import CompileCache, Counts, check_recheck
from farm.errors import DefectError, Stalled

UNIT = '#include "k.h"\n__global__ void k(float* x, unsigned n) { if (n >= 0) x[threadIdx.x] = __expf(x[n]) * SCALE; }\n'
# a value for every option of cclaunch.NVCC_JOINED, each as nvcc spells it (some in the long form)
VALUES = {"-diag-error": "177", "-diag-suppress": "186", "--diag-warn": "20012", "--std": "c++17", "-ftz": "true",
          "-prec-div": "false", "--prec-sqrt": "false", "-fmad": "false", "-split-compile": "0",
          "-ftemplate-depth": "500", "--ftemplate-backtrace-limit": "5", "--brief-diagnostics": "true",
          "-brief-diag": "true", "--jump-table-density": "50", "-jtd": "50", "-frandom-seed": "7",
          "--Ofast-compile": "mid", "-Ofc": "mid", "-dopt": "on", "-split-compile-extended": "0",
          "-sanitize": "memcheck", "--optimization-info": "inline", "-device-stack-protector": "true",
          "-static-global-template-stub": "true", "--device-entity-has-hidden-visibility": "true",
          "-compress-mode": "size"}
# torch's cpp_extension (2.14) for gsplat 1.5.3 with farm's patch: its ninja file's cuda_compile rule
GSPLAT = ["--generate-dependencies-with-compile", "--dependency-output", "k.o.d", "-I.", "-c", "k.cu",
          "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "--expt-relaxed-constexpr",
          "--compiler-options", "-fPIC", "-O3", "--use_fast_math", "-std=c++20", "--expt-relaxed-constexpr",
          "-diag-suppress", "20012,186", "-DTORCH_EXTENSION_NAME=csrc", "-gencode=arch=compute_90,code=sm_90"]


# a kernel whose scale an options file sets (nvcc's -optf), 1.0 without one
OPTF_UNIT = "#ifndef SCALE\n#define SCALE 1.0f\n#endif\n__global__ void k(float* x) { x[threadIdx.x] *= SCALE; }\n"
OPTF_BASE = ["-c", "k.cu", "-gencode=arch=compute_90,code=sm_90"]


def _optf_sources(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(OPTF_UNIT)
    (tmp_path / "a.txt").write_text("-DSCALE=2.0f\n")
    (tmp_path / "b.txt").write_text("-DSCALE=3.0f\n")


def _server_env(tmp_path: Path) -> dict[str, str]:
    cache = CompileCache(True, "local", str(tmp_path / "cache"))
    return {**os.environ, **dict(cache.server_environment(cache_dir=str(tmp_path / "cache"),
                                                           run_dir=str(tmp_path / "run")))}


def _counts(sccache: str, env: dict[str, str]) -> Counts:
    """The server's counts since the last call, then zeroed."""
    out = subprocess.run([sccache, "--show-stats", "--stats-format", "json"], env=env, capture_output=True,
                         text=True, check=True).stdout
    subprocess.run([sccache, "--zero-stats"], env=env, capture_output=True, check=True)
    return Counts.from_stats(json.loads(out))


def _same_object(a: Path, b: Path) -> bool:
    """Two nvcc objects hold the same code: byte for byte, once each host object is named as
    farm's launchers name it (nvcc names it after its process id, which differs between any two
    runs of nvcc alone; sccache names it ``x_0``): copies are compared, the files stay as they are."""
    def named(path: Path) -> bytes:
        copy = path.with_name(f"{path.name}.named")
        shutil.copyfile(path, copy)
        assert cclaunch.name_host_object(str(copy), "k.cu", shutil.which("objcopy")) is None
        data = copy.read_bytes()
        copy.unlink()
        return data

    return named(a) == named(b)


def _masked(path: Path) -> bytes:
    return re.sub(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}", b"tmpxft", path.read_bytes())


def test_launch_joins_the_values_sccache_would_take_for_inputs(tmp_path) -> None:
    """The real ``launch`` script, over an ``sccache`` that writes the arguments it was given."""
    seen = tmp_path / "argv"
    recorder = tmp_path / "sccache"
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {seen}\n')
    recorder.chmod(0o755)
    cclaunch.write_launchers(str(tmp_path / "run"), "/opt/cuda/bin/nvcc", str(recorder))
    launch = str(tmp_path / "run" / "bin" / "launch")
    env = {k: v for k, v in os.environ.items() if k != cclaunch.NESTED}

    def given(*argv: str) -> list[str]:
        subprocess.run([launch, *argv], env=env, check=True)
        lines: list[str] = seen.read_text().splitlines()
        return lines

    args = ["-c", "k.cu", "-o", "k o.o", "-diag-suppress", "20012,186", "--std", "c++17", "-ftz=true",
            "-Xcompiler", "-std", "-fmad", "--compiler-options", "-diag-warn", "-O3", "-diag-warn"]
    assert given("/opt/cuda/bin/nvcc", *args) == [
        "/opt/cuda/bin/nvcc", "-c", "k.cu", "-o", "k o.o", "-diag-suppress=20012,186", "--std=c++17", "-ftz=true",
        "-Xcompiler", "-std",  # another tool's option, passed as given
        "-fmad",  # no value follows: left as it was, nvcc says what is wrong
        "--compiler-options", "-diag-warn", "-O3", "-diag-warn"]
    # sccache reads `-optimization-info...` as its -o with a glued value: joined, it would name the output
    assert given("/opt/cuda/bin/nvcc", "-c", "k.cu", "--optimization-info", "inline", "-optimization-info", "inline",
                 "-Ofc", "max") == [
        "/opt/cuda/bin/nvcc", "-c", "k.cu", "--optimization-info=inline", "-optimization-info", "inline", "-Ofc=max"]
    # sccache reads nvcc's -optf, -odir, -opt-info, -objtemp and -o=FILE as its -o: such a call never reaches
    # sccache; nvcc runs it as given (the other options still joined) and the launcher writes the option down
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    ran = tmp_path / "nvcc-argv"
    nvcc.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {ran}\n')
    nvcc.chmod(0o755)
    for misread in ("-optf=o.txt", "-optf", "-odir=d", "-odir", "-opt-info=inline", "-opt-info", "-objtemp", "-o=k.o"):
        seen.unlink(missing_ok=True)
        subprocess.run([launch, str(nvcc), "-c", "k.cu", misread, "-std", "c++17"], env=env, check=True)
        assert not seen.exists()
        assert ran.read_text().splitlines() == ["-c", "k.cu", misread, "-std=c++17"]
    uncached = tmp_path / "run" / cclaunch.UNCACHED
    assert uncached.read_text().splitlines() == ["-optf", "-optf", "-odir", "-odir", "-opt-info", "-opt-info",
                                                 "-objtemp", "-o="]
    # another tool's value, the long spellings and -optix-ir are sccache's to read, as before
    assert given(str(nvcc), "-c", "k.cu", "-Xcompiler", "-odir", "--options-file", "o.txt", "--output-directory",
                 "d", "-optix-ir") == [str(nvcc), "-c", "k.cu", "-Xcompiler", "-odir", "--options-file", "o.txt",
                                       "--output-directory", "d", "-optix-ir"]
    assert len(uncached.read_text().splitlines()) == 8
    # the host compiler's arguments are never touched
    assert given("/usr/bin/g++", "-std", "c++17", "-c", "a.cc") == ["/usr/bin/g++", "-std", "c++17", "-c", "a.cc"]
    # beneath a cached compile the compiler runs directly, as before
    out = subprocess.run([launch, "printf", "%s,", "-std", "c++17"], env={**env, cclaunch.NESTED: "1"},
                         capture_output=True, text=True, check=True).stdout
    assert out == "-std,c++17,"


def _route(tmp_path: Path) -> Callable[..., str | None]:
    """The real ``launch`` script's decision on an nvcc call (``-c k.cu`` and the given arguments, the
    keyword arguments its environment): None where it hands the call to sccache, else the line it counts
    the call under. Over an sccache and an nvcc that only say they ran: no toolkit needed."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    ran = tmp_path / "ran"
    for name in ("sccache", "nvcc"):
        (bindir / name).write_text(f"#!/bin/sh\necho {name} > {ran}\n")
        (bindir / name).chmod(0o755)
    cclaunch.write_launchers(str(tmp_path / "run"), str(bindir / "nvcc"), str(bindir / "sccache"))
    uncached = tmp_path / "run" / cclaunch.UNCACHED
    base = {k: v for k, v in os.environ.items() if k != cclaunch.NESTED and k not in cclaunch.NVCC_FLAGS_ENV}

    def route(*argv: str, **environ: str) -> str | None:
        uncached.unlink(missing_ok=True)
        subprocess.run([str(tmp_path / "run" / "bin" / "launch"), str(bindir / "nvcc"), "-c", "k.cu", *argv],
                       env={**base, **environ}, cwd=tmp_path, check=True)
        lines = uncached.read_text().splitlines() if uncached.exists() else []
        assert len(lines) <= 1
        assert ran.read_text().strip() == ("nvcc" if lines else "sccache")
        return lines[0] if lines else None

    return route


def test_a_misread_option_in_nvccs_flag_variables_runs_the_call_uncached(tmp_path) -> None:
    """sccache 0.16.0 reads NVCC_PREPEND_FLAGS and NVCC_APPEND_FLAGS as the call's arguments: an option of
    NVCC_MISREAD there is its -o as on the command line, so the call runs uncached, counted under the
    option and the variable. nvcc splits them at whitespace, sccache as a shell would (a quoted word)."""
    route = _route(tmp_path)
    (tmp_path / "-optf=a.txt").write_text("")  # a word of theirs is matched, never expanded as a file name
    for var in cclaunch.NVCC_FLAGS_ENV:
        for value, option in (("-optf=a.txt", "-optf"), ("-O3  -odir d", "-odir"), ("\t-objtemp\n", "-objtemp"),
                              ("-Xptxas -v -opt-info=inline", "-opt-info"), ("-o=k.o", "-o="),
                              ("'-optf=a b.txt'", "-optf"), ('"-optf=a.txt"', "-optf")):
            assert route(**{var: value}) == f"{option} in {var}", (var, value)
        for value in ("-O3 -optix-ir", "--options-file=o.txt --output-directory d", "-t 2 --threads 2", "-*", "", " "):
            assert route(**{var: value}) is None, (var, value)
    assert route("-optf=b.txt", NVCC_APPEND_FLAGS="-O3") == "-optf"  # the call's own, as before
    route(NVCC_APPEND_FLAGS="-O3 -optf=b.txt")
    assert cclaunch.launcher_refusals(str(tmp_path / "run")) == {
        f"{cclaunch.MISREAD_REASON}: -optf in NVCC_APPEND_FLAGS": 1}


def test_target_dir_and_threads_are_sccaches_to_read(tmp_path) -> None:
    """nvcc's -target-dir / --target-directory (its only spellings) and -t / --threads reach sccache,
    given or in the flag variables: sccache 0.16.0 passes -target-dir on to nvcc and keys the headers it
    selects (test_sccache_keys_the_headers_target_dir_selects), -t only sets nvcc's thread count."""
    route = _route(tmp_path)
    for argv in (["-target-dir=alt"], ["-target-dir", "alt"], ["--target-directory=alt"], ["--target-directory", "alt"],
                 ["-t", "2"], ["-t2"], ["-t=2"], ["--threads", "2"], ["--threads=2"], ["-time", "t.csv"]):
        assert route(*argv) is None, argv
        for var in cclaunch.NVCC_FLAGS_ENV:
            assert route(**{var: " ".join(argv)}) is None, (var, argv)


def test_the_calls_launch_ran_past_sccache_are_counted_as_not_cacheable(tmp_path) -> None:
    """``stats`` adds the launcher's own refusals to sccache's ``not_cached``, which the build's line and
    ``_build_info.json`` report; a new build's setup forgets the last one's."""
    run = tmp_path / "run"
    fake = tmp_path / "sccache"  # answers --show-stats as sccache 0.16.0 does, with one refusal of its own
    fake.write_text('#!/bin/sh\ncase "$1" in --show-stats) echo \'{"stats": {"cache_hits": {"counts": {"CUDA": 1}}, '
                    '"cache_misses": {"counts": {}}, "not_cached": {"multiple input files": 1}}}\';; esac\n')
    fake.chmod(0o755)
    run.mkdir()
    (run / cclaunch.STATE).write_text(json.dumps({"cached": True, "sccache": str(fake)}))
    (run / cclaunch.UNCACHED).write_text("-optf\n-odir\n-optf\n")
    counts = Counts.from_stats(cclaunch.stats(str(run), dict(os.environ)) or {})
    reason = cclaunch.MISREAD_REASON
    assert counts.not_cacheable == {"multiple input files": 1, f"{reason}: -optf": 2, f"{reason}: -odir": 1}
    assert counts.record()["not_cacheable"] == dict(sorted(counts.not_cacheable.items()))
    assert (f"4 compiler call(s) not cacheable, run uncached and not counted above (multiple input files: 1, "
            f"{reason}: -odir: 1, {reason}: -optf: 2)") in counts.line()
    assert json.loads((run / cclaunch.STATS).read_text())["stats"]["not_cached"] == counts.not_cacheable
    assert cclaunch.launcher_refusals(str(tmp_path / "nowhere")) == {}
    cclaunch.setup(str(run), "/opt/cuda/bin/nvcc", {"FARM_SCCACHE": str(tmp_path / "absent")}, basedirs=[])
    assert not (run / cclaunch.UNCACHED).exists()


def test_gsplat_command_line_is_cached_and_compiles_what_nvcc_does(tmp_path, cuda_home) -> None:
    """gsplat's kernel files, through the launchers as its ninja file runs them: before the join,
    sccache refused every one ("multiple input files") and the build's line said "nvcc steps: 0
    run". Now the first compile is a miss, the second a hit, the warning stays suppressed, and the
    object is the one an uncached nvcc makes of the package's own command line."""
    nvcc = str(cuda_home / "bin" / "nvcc")
    env = _server_env(tmp_path)
    state = cclaunch.setup(str(tmp_path / "run"), nvcc, env)
    assert state["cached"] is True
    sccache = str(state["sccache"])
    (tmp_path / "k.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "k.cu").write_text(UNIT)
    bindir = tmp_path / "run" / "bin"
    ccbin = ["-ccbin", str(bindir / "gcc")]
    try:
        compiles = [subprocess.run([str(bindir / "nvcc"), *GSPLAT, "-o", f"{name}.o", *ccbin], cwd=tmp_path,
                                   env=env, capture_output=True, text=True, check=True)
                    for name in ("cold", "warm")]
        counts = _counts(sccache, env)
    finally:
        cclaunch.stats(str(tmp_path / "run"), env)
    assert counts.not_cacheable == {}
    assert counts.nvcc_run > 0
    assert counts.nvcc_cached == counts.nvcc_run
    assert all("#186-D" not in c.stderr for c in compiles)  # the diagnostics option reached nvcc
    plain = subprocess.run([nvcc, *GSPLAT, "-o", "plain.o", "-ccbin", "gcc"], cwd=tmp_path, capture_output=True,
                           text=True, check=True)
    assert "#186-D" not in plain.stderr
    unsuppressed = [a for a in GSPLAT if a not in ("-diag-suppress", "20012,186")]
    loud = subprocess.run([nvcc, *unsuppressed, "-o", "loud.o"], cwd=tmp_path, capture_output=True, text=True,
                          check=True)
    assert "#186-D" in loud.stderr  # the unit does warn without it
    assert _same_object(tmp_path / "plain.o", tmp_path / "cold.o")
    assert (tmp_path / "cold.o").read_bytes() == (tmp_path / "warm.o").read_bytes()


def test_every_joined_option_compiles_the_same_joined_or_apart(tmp_path, cuda_home) -> None:
    """nvcc reads ``-opt value`` and ``-opt=value`` alike for each option ``launch`` joins: the
    uncached objects are byte-identical (but for the temp file name nvcc draws per run); through
    the launchers, the call with every option apart is a miss, then a hit."""
    assert {name.lstrip("-") for name in VALUES} == set(cclaunch.NVCC_JOINED)
    nvcc = str(cuda_home / "bin" / "nvcc")
    (tmp_path / "k.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "k.cu").write_text(UNIT)
    base = ["-I.", "-c", "k.cu", "-gencode=arch=compute_90,code=sm_90"]
    apart = [item for name, value in VALUES.items() for item in (name, value)]
    joined = [f"{name}={value}" for name, value in VALUES.items()]
    for out, opts in (("apart.o", apart), ("joined.o", joined)):
        subprocess.run([nvcc, *base, "-o", out, *opts], cwd=tmp_path, check=True)
    assert _masked(tmp_path / "apart.o") == _masked(tmp_path / "joined.o")

    env = _server_env(tmp_path)
    state = cclaunch.setup(str(tmp_path / "run"), nvcc, env)
    try:
        counts = []
        for out in ("cold.o", "warm.o"):
            subprocess.run([str(tmp_path / "run" / "bin" / "nvcc"), *base, "-o", out, *apart], cwd=tmp_path,
                           env=env, check=True)
            counts.append(_counts(str(state["sccache"]), env))
    finally:
        cclaunch.stats(str(tmp_path / "run"), env)
    cold, warm = counts
    assert cold.not_cacheable == warm.not_cacheable == {}
    assert cold.nvcc_run > 0
    assert (cold.nvcc_cached, warm.nvcc_run, warm.nvcc_cached) == (0, 0, cold.nvcc_run)  # a miss, then hits
    assert _same_object(tmp_path / "apart.o", tmp_path / "cold.o")
    assert (tmp_path / "cold.o").read_bytes() == (tmp_path / "warm.o").read_bytes()


def test_nvcc_misread_is_every_one_dash_o_option_sccache_does_not_list(nvcc) -> None:
    """sccache 0.16.0's gcc table reads any one-dash item starting with ``-o`` as its ``-o`` but for the
    spellings its tables list (``-o`` itself, ``-optix-ir``): NVCC_MISREAD is the rest of nvcc's own."""
    out = subprocess.run([str(nvcc), "--help"], capture_output=True, text=True, check=True).stdout
    short = set(re.findall(r"^--\S+.*\((-o[^)\s]*)\)\s*$", out, re.MULTILINE))
    assert {"-o", "-optix-ir"} <= short
    assert {f"-{n}" for n in cclaunch.NVCC_MISREAD if not n.endswith("=")} == short - {"-o", "-optix-ir"}


def test_bare_sccache_serves_one_options_file_for_another(tmp_path, nvcc) -> None:
    """Why ``launch`` runs nvcc's -optf, -odir, -opt-info, -objtemp past sccache 0.16.0: it reads them as
    its -o. Before the real -o, ``-optf=b.txt`` is gone from the key and from the compile: the call is a
    hit on ``-optf=a.txt``'s object, which is what nvcc makes with no options file at all. After it, the
    object goes to a file named after the option (``dir=d``), not where the build asked."""
    _optf_sources(tmp_path)
    env = _server_env(tmp_path)
    sccache = cclaunch.find_sccache(env)
    assert sccache is not None
    (tmp_path / "run").mkdir()
    assert cclaunch.start(sccache, env) is None
    try:
        counts = []
        for name in ("a", "b"):
            subprocess.run([sccache, str(nvcc), *OPTF_BASE, f"-optf={name}.txt", "-o", f"{name}.o"], cwd=tmp_path,
                           env=env, check=True)
            counts.append(_counts(sccache, env))
        # sccache reads NVCC_PREPEND_FLAGS as arguments before the call's own: the same wrong hit
        subprocess.run([sccache, str(nvcc), *OPTF_BASE, "-o", "e.o"], cwd=tmp_path,
                       env={**env, "NVCC_PREPEND_FLAGS": "-optf=b.txt"}, check=True)
        counts.append(_counts(sccache, env))
        subprocess.run([sccache, str(nvcc), *OPTF_BASE, "-o", "c.o", "-odir=d"], cwd=tmp_path, env=env, check=True)
    finally:
        subprocess.run([sccache, "--stop-server"], env=env, capture_output=True, check=False)
        cclaunch.remove_socket(env[cclaunch.SOCKET_ENV])
    first, second, flags = counts
    assert first.not_cacheable == second.not_cacheable == flags.not_cacheable == {}
    assert first.nvcc_run > 0
    assert (second.nvcc_run, second.nvcc_cached) == (flags.nvcc_run, flags.nvcc_cached) == (0, first.nvcc_run)
    assert (tmp_path / "a.o").read_bytes() == (tmp_path / "b.o").read_bytes() == (tmp_path / "e.o").read_bytes()
    for name, opts in (("plain-b", ["-optf=b.txt"]), ("plain-none", [])):
        subprocess.run([str(nvcc), *OPTF_BASE, *opts, "-o", f"{name}.o"], cwd=tmp_path, check=True)
    assert not _same_object(tmp_path / "plain-b.o", tmp_path / "b.o")
    assert _same_object(tmp_path / "plain-none.o", tmp_path / "b.o")  # compiled without the options file
    assert not (tmp_path / "c.o").exists()
    assert (tmp_path / "dir=d").is_file()


def _two_target_toolkit(cuda_home: Path, root: Path) -> tuple[Path, str]:
    """The toolkit again, with a second target folder ``alt`` beside nvcc's default (its name returned):
    both hold every header of the toolkit's, and ``farm_probe.h``, whose SCALE differs (2 and 3). nvcc is
    copied (its nvcc.profile finds the toolkit beside the executable), the rest linked."""
    # an installed CUDA names its folder (targets/x86_64-linux); nvcc from PyPI's wheels, which have no
    # targets/, leaves _TARGET_DIR_ empty and takes the folder of that name once the copy has one
    default = _target_dir(cuda_home / "bin" / "nvcc") or _HOST_TARGET.get(platform.machine(), "x86_64-linux")
    (root / "bin").mkdir(parents=True)
    for entry in cuda_home.iterdir():
        if entry.name not in ("bin", "targets"):
            (root / entry.name).symlink_to(entry)
    for entry in (cuda_home / "bin").iterdir():
        if entry.name in ("nvcc", "nvcc.profile"):
            (root / "bin" / entry.name).write_bytes(entry.read_bytes())
            (root / "bin" / entry.name).chmod(0o755)
        else:
            (root / "bin" / entry.name).symlink_to(entry)
    for name, scale in ((default, "2.0f"), ("alt", "3.0f")):
        include = root / "targets" / name / "include"
        include.mkdir(parents=True)
        for entry in (cuda_home / "include").iterdir():
            (include / entry.name).symlink_to(entry)
        (include / "farm_probe.h").write_text(f"#define SCALE {scale}\n")
        (root / "targets" / name / "lib").symlink_to(cuda_home / "lib")
    assert _target_dir(root / "bin" / "nvcc") == default, "nvcc does not take the copy's target folder"
    return root / "bin" / "nvcc", default


_HOST_TARGET = {"x86_64": "x86_64-linux", "aarch64": "sbsa-linux"}  # nvcc's own name for each host's folder


def _target_dir(nvcc: Path) -> str:
    """The target folder this nvcc uses by default (``_TARGET_DIR_`` of its dry run), or ""."""
    dry = subprocess.run([str(nvcc), "-c", "k.cu", "--dryrun"], capture_output=True, text=True, check=True).stderr
    found = re.search(r"_TARGET_DIR_=targets/(\S+)", dry)
    return found[1] if found else ""


def test_sccache_keys_the_headers_target_dir_selects(tmp_path, cuda_home) -> None:
    """Why ``launch`` leaves nvcc's -target-dir to sccache 0.16.0: it passes the option on to every nvcc
    it runs, and the folder's headers are in the preprocessed text it hashes. Another folder's header is
    a miss and compiles that folder's object; the long spelling, or the option in NVCC_PREPEND_FLAGS,
    selecting the same folder is a hit on it, and naming the default folder a hit on the plain call."""
    nvcc, default = _two_target_toolkit(cuda_home, tmp_path / "cuda")
    (tmp_path / "k.cu").write_text("#include <farm_probe.h>\n__global__ void k(float* x) { x[threadIdx.x] *= SCALE; }\n")
    env = _server_env(tmp_path)
    sccache = cclaunch.find_sccache(env)
    assert sccache is not None
    (tmp_path / "run").mkdir()
    assert cclaunch.start(sccache, env) is None
    calls = {"plain": ([], {}), "alt": (["-target-dir=alt"], {}), "long": (["--target-directory=alt"], {}),
             "flags": ([], {"NVCC_PREPEND_FLAGS": "-target-dir=alt"}), "default": ([f"-target-dir={default}"], {})}
    try:
        counts = {}
        for name, (opts, flags) in calls.items():
            subprocess.run([sccache, str(nvcc), *OPTF_BASE, *opts, "-o", f"{name}.o"], cwd=tmp_path,
                           env={**env, **flags}, check=True)
            counts[name] = _counts(sccache, env)
    finally:
        subprocess.run([sccache, "--stop-server"], env=env, capture_output=True, check=False)
        cclaunch.remove_socket(env[cclaunch.SOCKET_ENV])
    assert all(c.not_cacheable == {} for c in counts.values())
    assert counts["plain"].nvcc_run > 0
    assert counts["alt"].nvcc_run == counts["plain"].nvcc_run  # a miss: another folder's header
    for name in ("long", "flags", "default"):
        assert (counts[name].nvcc_run, counts[name].nvcc_cached) == (0, counts["plain"].nvcc_run), name
    for name, opts in (("plain-none", []), ("plain-alt", ["-target-dir=alt"])):
        subprocess.run([str(nvcc), *OPTF_BASE, *opts, "-o", f"{name}.o"], cwd=tmp_path, check=True)
    assert not _same_object(tmp_path / "plain-none.o", tmp_path / "plain-alt.o")  # the header does change it
    assert _same_object(tmp_path / "plain-none.o", tmp_path / "plain.o")
    for name in ("alt", "long", "flags"):
        assert _same_object(tmp_path / "plain-alt.o", tmp_path / f"{name}.o"), name
    assert _same_object(tmp_path / "plain-none.o", tmp_path / "default.o")


def test_launch_compiles_an_optf_call_uncached_and_counts_it(tmp_path, nvcc) -> None:
    """Through farm's launchers each ``-optf`` call is a fresh compile, the object nvcc makes of the same
    arguments; the build's counts name the calls under farm's reason."""
    _optf_sources(tmp_path)
    env = _server_env(tmp_path)
    run = tmp_path / "run"
    assert cclaunch.setup(str(run), str(nvcc), env)["cached"] is True
    try:
        for name in ("a", "b"):
            subprocess.run([str(run / "bin" / "nvcc"), *OPTF_BASE, f"-optf={name}.txt", "-o", f"{name}.o"],
                           cwd=tmp_path, env=env, check=True)
            subprocess.run([str(nvcc), *OPTF_BASE, f"-optf={name}.txt", "-o", f"plain-{name}.o"], cwd=tmp_path,
                           check=True)
    finally:
        stats = cclaunch.stats(str(run), env)
    assert stats is not None
    counts = Counts.from_stats(stats)
    assert counts.not_cacheable == {f"{cclaunch.MISREAD_REASON}: -optf": 2}
    assert counts.compiles == 0  # sccache never saw them
    assert (f"2 compiler call(s) not cacheable, run uncached and not counted above ({cclaunch.MISREAD_REASON}: "
            "-optf: 2)") in counts.line()
    assert _same_object(tmp_path / "plain-a.o", tmp_path / "a.o")
    assert _same_object(tmp_path / "plain-b.o", tmp_path / "b.o")
    assert not _same_object(tmp_path / "a.o", tmp_path / "b.o")


def test_a_socket_a_live_server_listens_on_is_never_removed(tmp_path) -> None:
    """The server's socket file outlives ``sccache --stop-server``; ``remove_socket`` removes it
    then, and never while a server answers on it, nor a path that is no socket."""
    env = _server_env(tmp_path)
    sock = env[cclaunch.SOCKET_ENV]
    sccache = cclaunch.find_sccache(env)
    assert sccache is not None
    (tmp_path / "run").mkdir()  # its error log's folder
    assert cclaunch.start(sccache, env) is None
    try:
        assert cclaunch.remove_socket(sock, wait=0.3) is False  # the server answers on it
        assert Path(sock).is_socket()
        subprocess.run([sccache, "--show-stats"], env=env, capture_output=True, check=True)  # still serving
    finally:
        subprocess.run([sccache, "--stop-server"], env=env, capture_output=True, check=True)
    assert Path(sock).is_socket()  # sccache's own stop leaves it
    assert cclaunch.remove_socket(sock) is True
    assert not os.path.lexists(sock)
    plain = tmp_path / "not-a-socket"
    plain.write_text("data")
    assert cclaunch.remove_socket(str(plain)) is False  # only ever a socket
    assert plain.read_text() == "data"


# -- reproducible compiles ----------------------------------------------------------------------------
def test_the_prefix_map_reads_back_what_farm_writes_and_the_last_pair_wins(tmp_path) -> None:
    pairs = [(str(tmp_path / "a:b=c%d"), "/farm/src"), ("/opt/cuda", "/farm/cuda")]
    text = cclaunch.encode_prefix_map(pairs)
    assert text.count(":") == 1  # the reproducible-builds encoding: `:` `=` `%` inside a path are escaped
    assert cclaunch.decode_prefix_map(text) == pairs
    assert cclaunch.decode_prefix_map("broken:/farm/src") == []  # a malformed pair is left out
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    linked = cclaunch.decode_prefix_map(cclaunch.encode_prefix_map([(str(tmp_path / "link"), "/farm/src")]))
    assert linked == [(str(tmp_path / "link"), "/farm/src"), (str(real), "/farm/src")]  # also as nvcc sees it
    nested = [("/w", "/outer"), ("/w/src", "/farm/src")]
    assert cclaunch.map_path("/w/src/k.cu", nested) == "/farm/src/k.cu"
    assert cclaunch.map_path("/w/x/k.cu", nested) == "/outer/x/k.cu"
    assert cclaunch.map_path("/w2/k.cu", nested) is None  # a prefix of the name, not of the folder
    assert cclaunch.host_flags(nested) == ["-ffile-prefix-map=/w=/outer", "-ffile-prefix-map=/w/src=/farm/src"]


def test_an_nvcc_call_gets_the_map_and_its_units_path_as_the_map_writes_it(tmp_path, monkeypatch) -> None:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "k.cu").write_text(UNIT)
    monkeypatch.chdir(tmp_path)
    pairs = [(str(tmp_path), "/farm/src"), ("/a,b", "/farm/env")]
    argv = ["nvcc", "-c", "csrc/k.cu", "-o", "k.o", "-include", "csrc/k.cu", "-I", "csrc"]
    assert cclaunch.nvcc_unit(argv) == "csrc/k.cu"  # the value of -include is no unit
    assert cclaunch.nvcc_flags(argv, pairs) == [
        "-Xcompiler", f"-ffile-prefix-map={tmp_path}=/farm/src",  # `-Xcompiler` splits at commas: /a,b is not passed
        "-Xcudafe", "--orig_src_path_name=/farm/src/csrc/k.cu"]
    assert cclaunch.nvcc_flags(["nvcc", "-c", "csrc/k.cu", "csrc/k.cu"], pairs)[-2:] != ["-Xcudafe"]  # two units


def _host_object(tmp_path: Path, name: str) -> Path:
    """What nvcc's host compile makes of a unit: the real gcc on a file of nvcc's (or sccache's)
    name, with a static constructor, which gcc names after the file (``_GLOBAL__sub_I_<file>``)
    where the unit defines no global symbol first (nvcc's host files)."""
    folder = tmp_path / name.replace(".", "_")
    folder.mkdir()
    (folder / name).write_text("struct S { S(); };\nstatic S s;\n")
    subprocess.run(["gcc", "-c", "-O2", "-x", "c++", name, "-o", "k.o"], cwd=folder, check=True)
    return folder / "k.o"


def test_the_host_object_gets_one_name_whoever_compiled_it(tmp_path) -> None:
    """nvcc names its host file after its process (``tmpxft_<pid>_...``), sccache ``x_0``: renamed
    (objcopy) to ``<stem>.cudafe1.cpp``, the objects are the same bytes."""
    objcopy = shutil.which("objcopy")
    names = ["tmpxft_00004953_00000000-6_k.compute_90.cudafe1.cpp", "tmpxft_0000abcd_00000000-6_k.compute_90.cudafe1.cpp",
             "x_0.cudafe1.cpp"]
    objects = [_host_object(tmp_path, n) for n in names]
    assert len({o.read_bytes() for o in objects}) == 3
    renames = cclaunch.host_object_renames(str(objects[2]), "csrc/k.cu")
    assert renames == {"x_0.cudafe1.cpp": "k.cudafe1.cpp", "_GLOBAL__sub_I_x_0.cudafe1.cpp": "_GLOBAL__sub_I_k.cudafe1.cpp"}
    for obj in objects:
        assert cclaunch.name_host_object(str(obj), "csrc/k.cu", objcopy) is None
    assert len({o.read_bytes() for o in objects}) == 1
    assert cclaunch.host_object_renames(str(objects[0]), "csrc/k.cu") == {}  # named once: nothing to do
    # without the unit, nvcc's own name gives the stem
    (tmp_path / "again").mkdir()
    other = _host_object(tmp_path / "again", names[0])
    assert cclaunch.host_object_renames(str(other), None)[names[0]] == "k.cudafe1.cpp"
    # no objcopy: the compile fails and says why (an unnamed object would differ from every other build)
    assert cclaunch.name_host_object(str(other), None, None) == cclaunch.OBJCOPY_MISSING


def test_uncached_launchers_map_the_host_compilers_and_run_nvcc_through_farm(tmp_path) -> None:
    """With the compiler cache off the launchers are written all the same: the host compiler's
    call gets the map, nvcc's goes through :func:`cclaunch.run_nvcc` (which adds it, too)."""
    bindir = tmp_path / "real"
    bindir.mkdir()
    for tool in ("gcc", "nvcc"):
        (bindir / tool).write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / tool}.argv\n')
        (bindir / tool).chmod(0o755)
    pairs = [(str(tmp_path / "src"), "/farm/src")]
    environ = {**os.environ, cclaunch.PREFIX_MAP_ENV: cclaunch.encode_prefix_map(pairs)}
    environ.pop(cclaunch.NESTED, None)
    state = cclaunch.setup(str(tmp_path / "run"), str(bindir / "nvcc"), environ, basedirs=[], cached=False)
    assert (state["cached"], state["sccache"], state["why"]) == (False, None, "off")
    subprocess.run([str(tmp_path / "run" / "bin" / "launch"), str(bindir / "gcc"), "-c", "a.c"], env=environ,
                   check=True)
    assert (tmp_path / "gcc.argv").read_text().split() == ["-c", "a.c", f"-ffile-prefix-map={tmp_path / 'src'}=/farm/src"]
    subprocess.run([str(tmp_path / "run" / "bin" / "nvcc"), "-c", "k.cu"], env=environ, check=True)
    assert (tmp_path / "nvcc.argv").read_text().split() == [
        "-c", "k.cu", "-Xcompiler", f"-ffile-prefix-map={tmp_path / 'src'}=/farm/src"]
    assert cclaunch.stats(str(tmp_path / "run"), environ) is None  # no server, no counts


# a unit whose object names its folder unless the map is applied: an anonymous namespace (nvcc names it
# after the unit's path), __FILE__, and a static constructor (gcc names it after nvcc's host file)
PLACED_UNIT = """#include <string>
namespace { __device__ float twice(float x) { return 2.0f * x; } }
__global__ void k(float* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }
static const std::string name = "k";
const char* here() { return __FILE__; }
"""


def test_a_unit_is_the_same_object_cached_warm_uncached_and_in_another_folder(tmp_path, cuda_home) -> None:
    """The same unit in two folders, compiled by absolute path as torch's ninja file does, through
    the launchers: cached (a miss, then a hit) in one folder, uncached in the other, and with nvcc
    alone (no launcher) for contrast. The launchers' three objects are one file; nvcc's own differs."""
    nvcc = str(cuda_home / "bin" / "nvcc")
    flags = ["-O2", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_90,code=compute_90"]
    objects: dict[str, Path] = {}
    for name, cached in (("one", True), ("two", False)):
        src = tmp_path / name / "src"
        src.mkdir(parents=True)
        (src / "k.cu").write_text(PLACED_UNIT)
        env = {**_server_env(tmp_path / name), cclaunch.PREFIX_MAP_ENV: cclaunch.encode_prefix_map([(str(src), "/farm/src")])}
        env.pop(cclaunch.NESTED, None)
        run = tmp_path / name / "run"
        state = cclaunch.setup(str(run), nvcc, env, basedirs=[], cached=cached)
        assert state["cached"] is cached
        try:
            for attempt in (("cold", "warm") if cached else ("uncached",)):
                out = tmp_path / name / f"{attempt}.o"
                subprocess.run([str(run / "bin" / "nvcc"), "-c", str(src / "k.cu"), "-o", str(out), *flags,
                                "-ccbin", str(run / "bin" / "gcc")], cwd=src, env=env, check=True)
                objects[attempt] = out
            counts = _counts(str(state["sccache"]), env) if cached else None
        finally:
            cclaunch.stats(str(run), env)
        if counts is not None:
            assert counts.nvcc_cached > 0  # the warm compile was served
    plain = tmp_path / "plain.o"
    subprocess.run([nvcc, "-c", str(tmp_path / "one" / "src" / "k.cu"), "-o", str(plain), *flags], check=True)
    cold = objects["cold"].read_bytes()
    assert cold == objects["warm"].read_bytes() == objects["uncached"].read_bytes()
    assert b"/farm/src/k.cu" in cold
    assert str(tmp_path).encode() not in cold
    assert plain.read_bytes() != cold
    assert str(tmp_path).encode() in plain.read_bytes()
    symbols = subprocess.run(["readelf", "-sW", str(objects["cold"])], capture_output=True, text=True,
                             check=True).stdout
    assert " k.cudafe1.cpp" in symbols
    assert "_GLOBAL__sub_I_k.cudafe1.cpp" in symbols


# ------------------------------------------------------------------------------------------------
# nested calls under a starved server
# ------------------------------------------------------------------------------------------------
# sccache 0.16.0's server gives every process it starts (a compile, a preprocessor run, nvcc's
# steps, a compiler's detection) one of its job slots, available_parallelism() of them, held
# until the process ends. A launcher started by the server that called sccache again would wait
# for a slot while holding one: with every slot so held, nothing ends. FARM_CC_NESTED tells the
# launchers they run beneath it only while every program in between passes the environment on;
# a host compiler wrapper that passes on only the variables it knows (the search path and the
# compiler cache's own settings, below) loses it.
CLEAN_ENV_WRAPPER = ('#!/bin/sh\nexec env -i PATH="$PATH" HOME="$HOME" SCCACHE_SERVER_UDS="$SCCACHE_SERVER_UDS" '
                     'SCCACHE_DIR="$SCCACHE_DIR" {compiler} "$@"\n')


def _one_slot_server(tmp_path: Path, nvcc: str = "/nonexistent/nvcc") -> tuple[dict[str, str], Path]:
    """The launchers and a private server with one job slot (started with this process bound to one
    CPU; sccache counts the CPUs it may run on), and a host compiler wrapper that runs farm's
    ``gcc`` launcher with only the variables it knows. The build's environment and the launchers' folder."""
    env = {k: v for k, v in _server_env(tmp_path).items() if k != cclaunch.NESTED}
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        state = cclaunch.setup(str(tmp_path / "run"), nvcc, env)
    finally:
        os.sched_setaffinity(0, allowed)
    assert state["cached"] is True
    bindir = tmp_path / "run" / "bin"
    wrapper = tmp_path / "cc-clean"
    wrapper.write_text(CLEAN_ENV_WRAPPER.format(compiler=bindir / "gcc"))
    wrapper.chmod(0o755)
    for i in range(3):
        (tmp_path / f"u{i}.c").write_text(f"int u{i}(int x) {{ return x * {i + 2}; }}\n")
    return env, bindir


def _compile_three(tmp_path: Path, env: dict[str, str], bindir: Path, *, label: str, stall: int) -> None:
    """Three compiles at once (ninja -j 3) through ``launch`` and the wrapper, as
    one build step under farm's watchdog (``stall`` seconds without progress stop it); the
    server's compiles count as the step's work."""
    units = " ".join(f"{bindir / 'launch'} {tmp_path / 'cc-clean'} -c u{i}.c -o u{i}.o &" for i in range(3))
    proc = run_relayed(["sh", "-c", f"{units} wait"], env={**env, procs.STALL_ENV: str(stall)}, cwd=tmp_path,
                       label=label, cell="nested-0.1-cu130-cp311-linux_x86_64",
                       sessions=lambda: procs.sccache_session(env))
    assert proc.returncode == 0


def test_nested_calls_under_a_starved_server_run_the_compiler_directly(tmp_path, monkeypatch) -> None:
    """Beneath the server the launchers run the compiler themselves, found by their ancestry, whatever
    the environment says: three compiles on a one-slot server finish. The same launchers without
    that check (the variable alone, as before) wait on themselves: the watchdog stops the step."""
    monkeypatch.setattr(procs, "POLL_S", 0.5)
    monkeypatch.setattr(procs, "GRACE_S", 0.5)  # the server, its slot held, does not stop when asked
    env, bindir = _one_slot_server(tmp_path)
    sccache = str(cclaunch.find_sccache(env))
    try:
        _compile_three(tmp_path, env, bindir, label="three compiles", stall=6)  # room for a loaded machine
        counts = _counts(sccache, env)
        assert sum(counts.misses.values()) == 3  # the three outer compiles; no nested request reached it
        assert all((tmp_path / f"u{i}.o").is_file() for i in range(3))
        for name in ("launch", "gcc"):  # the launchers as they were: the variable alone
            script = bindir / name
            script.write_text(script.read_text().replace(" || _farm_beneath", ""))
        for i in range(3):  # other units: compiled, not served from the cache
            (tmp_path / f"u{i}.c").write_text(f"int u{i}(int x) {{ return x - {i}; }}\n")
        with pytest.raises(Stalled, match=r"`three nested compiles` made no progress: no output, no process started "
                                          r"or ended, and its \d+ process\(es\) used 0\.\d s of CPU for 2 s"):
            _compile_three(tmp_path, env, bindir, label="three nested compiles", stall=2)  # a deadlock: nothing moves
    finally:
        procs.stop_sccache_server(sccache, env)
    assert procs.sccache_session(env) == []


def test_nvcc_calls_whose_host_compiler_loses_the_variable_finish_on_a_starved_server(tmp_path, nvcc) -> None:
    """The same through real nvcc, as the package's ninja file runs it: nvcc's host compiler
    (``-ccbin``) is the wrapper, so sccache's server runs farm's ``gcc`` launcher for nvcc's
    preprocessing and host steps without the variable. Three units at once, one slot: done, each
    nvcc step compiled once, and the objects hold the code."""
    env, bindir = _one_slot_server(tmp_path, str(nvcc))
    sccache = str(cclaunch.find_sccache(env))
    for i in range(3):
        (tmp_path / f"k{i}.cu").write_text(f"__global__ void k{i}(float* x) {{ x[threadIdx.x] *= {i + 2}.0f; }}\n")
    units = " ".join(f"{bindir / 'nvcc'} -c k{i}.cu -o k{i}.o -gencode=arch=compute_90,code=sm_90 "
                     f"-ccbin {tmp_path / 'cc-clean'} &" for i in range(3))
    try:
        run_relayed(["sh", "-c", f"{units} wait"], env=env, cwd=tmp_path, label="three nvcc calls",
                    sessions=lambda: procs.sccache_session(env))
        counts = _counts(sccache, env)
    finally:
        procs.stop_sccache_server(sccache, env)
    assert counts.nvcc_run >= 3 * 3  # per unit: cudafe++, cicc, ptxas (and the host step, labelled CUDA)
    assert counts.nvcc_cached == 0
    for i in range(3):
        symbols = subprocess.run(["nm", str(tmp_path / f"k{i}.o")], capture_output=True, text=True, check=True).stdout
        assert f"k{i}Pf" in symbols


# ------------------------------------------------------------------------------------------------
# the recheck: what the cache served, recompiled uncached
# ------------------------------------------------------------------------------------------------
GOOD = "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n"
EVIL = "__global__ void k(float* x) { x[threadIdx.x] = 1337.0f; }\n"


def _host_object_entries(cache: Path) -> dict[Path, bytes]:
    """The cache's entries whose object is a host object (a relocatable ELF): nvcc's last step."""
    import zstandard

    found = {}
    for entry in cache.rglob("*"):
        if not entry.is_file() or len(entry.name) != 64:
            continue
        with zipfile.ZipFile(entry) as zf:
            if "obj" not in zf.namelist():
                continue
            obj = zstandard.ZstdDecompressor().decompressobj().decompress(zf.read("obj"))
        if obj[:4] == b"\x7fELF" and struct.unpack_from("<H", obj, 16)[0] == 1:  # ET_REL
            found[entry] = entry.read_bytes()
    return found


def test_a_poisoned_compile_cache_is_caught_by_recompiling_what_it_served(tmp_path: Path, nvcc: Path) -> None:
    """A cache entry written by another build (here: the host object of another kernel, swapped in
    under the key of this one) was served as a hit and linked. The recheck recompiles the build's
    units uncached (all of them: a build of at most 8) and finds the one that differs; an
    unpoisoned rebuild passes it. Reproducible compiles make the bytes comparable (docs/reproducible.md)."""
    env, bindir = {k: v for k, v in _server_env(tmp_path).items() if k != cclaunch.NESTED}, tmp_path / "run" / "bin"
    state = cclaunch.setup(str(tmp_path / "run"), str(nvcc), env)
    assert state["cached"] is True
    cache = tmp_path / "cache"
    (tmp_path / "good.cu").write_text(GOOD)
    (tmp_path / "evil.cu").write_text(EVIL)
    flags = ["-gencode=arch=compute_90,code=sm_90"]

    def compile_(unit: str, out: str) -> bytes:
        subprocess.run([str(bindir / "nvcc"), "-c", unit, "-o", out, *flags], cwd=tmp_path, env=env, check=True,
                       capture_output=True)
        return (tmp_path / out).read_bytes()

    def recheck() -> Any:
        subprocess.run([sys.executable, "-I", "-S", cclaunch.__file__, "recheck", str(tmp_path / "run")],
                       env=env, check=True, capture_output=True)
        return json.loads((tmp_path / "run" / cclaunch.RECHECK).read_text())

    try:
        good = compile_("good.cu", "good.o")
        assert recheck()["differ"] == []  # a miss, compiled here: the same bytes uncached
        good_entries = _host_object_entries(cache)
        evil = compile_("evil.cu", "evil.o")
        assert evil != good
        evil_entries = {p: b for p, b in _host_object_entries(cache).items() if p not in good_entries}
        assert len(good_entries) == len(evil_entries) == 1
        (good_entry,), (evil_blob,) = good_entries, evil_entries.values()
        good_entry.write_bytes(evil_blob)  # the poison: the other kernel's object under this kernel's key
        shutil.rmtree(tmp_path / "run" / cclaunch.JOURNAL)
        served = compile_("good.cu", "good.o")
        assert served != good  # the hit linked the other kernel's code
        verdict = recheck()
        env[cclaunch.FRESH] = "1"  # the shard link job's recompile (shard.py): never served by the cache
        assert compile_("good.cu", "fresh.o") == good
        del env[cclaunch.FRESH]
    finally:
        cclaunch.stats(str(tmp_path / "run"), env)
    assert verdict["units"] == 1
    assert verdict["rechecked"] == ["good.cu"]
    [differ] = verdict["differ"]
    assert differ["unit"] == "good.cu"
    with pytest.raises(DefectError) as refusal:
        check_recheck(tmp_path / "run" / cclaunch.RECHECK, "demo-0.1-cu130-notorch-cp311-linux_x86_64")
    assert refusal.value.exit_code == 1
    assert ("demo-0.1-cu130-notorch-cp311-linux_x86_64: 1 of the 1 nvcc unit(s) recompiled uncached (of 1) differ "
            "from what the build linked: good.cu: the object the build linked has sha256") in str(refusal.value)


def test_the_recheck_samples_an_eighth_of_a_large_build_and_at_least_eight(tmp_path: Path) -> None:
    """The sample: every unit of a build of at most 8, else an eighth (at least 8), drawn afresh."""
    journal = tmp_path / cclaunch.JOURNAL
    journal.mkdir()
    for n in range(100):
        (journal / f"{n}.json").write_text(json.dumps({"cwd": str(tmp_path), "argv": ["/bin/false", f"u{n}.cu"],
                                                       "output": str(tmp_path / f"u{n}.o"), "objcopy": None}))
    verdict: Any = cclaunch.recheck(str(tmp_path), os.environ)
    assert verdict["units"] == 100
    assert len(verdict["rechecked"]) == 13  # ceil(100 / 8)
    assert len(verdict["differ"]) == 13  # /bin/false compiles nothing: each one refused, none believed
    # the rule itself, shared with the shard link job (shardjob.prepare)
    assert [len(cclaunch.sample(range(n))) for n in (0, 5, 8, 9, 64, 65, 100)] == [0, 5, 8, 8, 8, 9, 13]
    assert len(set(cclaunch.sample(range(100)))) == 13
