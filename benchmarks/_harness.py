"""What every benchmark shares: run a command as a whole process, measure it, print the series.

A run's CPU time (user + system) and peak RSS are the child's own, from ``os.wait4``; wall time
is measured around it. A series is ``--runs`` runs; the summary shows the min and the median of
each. The farm under test is the ``farm`` console script of a virtual environment holding a
regular (non-editable) install of this working tree, reinstalled on every benchmark run so it is
never stale: an editable install's import hook costs every command tens of milliseconds that a
user's ``pip install cuda-wheel-farm`` does not.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    stdout: bytes
    returncode: int


# The child is started by this small launcher, not by the benchmark itself: Linux carries a
# process's peak RSS over from its parent at fork, so a child of a 100 MB benchmark would report
# at least 100 MB. The launcher (a bare interpreter, under the RSS of any Python command measured
# here) forks, execs, waits and reports the child's own rusage.
_LAUNCHER = r"""
import os, sys, time
report, argv = sys.argv[1], sys.argv[2:]
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - start
with open(report, "w") as fh:
    fh.write(f"{wall} {usage.ru_utime + usage.ru_stime} {usage.ru_maxrss} {os.waitstatus_to_exitcode(status)}")
"""


def measure(argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
            ok: Sequence[int] = (0,)) -> Run:
    """One whole process: wall, CPU (user + system) and peak RSS of the child itself."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".rusage") as report:
        # files, not pipes: a child never blocks on a full pipe
        subprocess.run([sys.executable, "-S", "-I", "-c", _LAUNCHER, report.name, *map(str, argv)],
                       stdout=out, stderr=err, cwd=cwd or REPO, env=env, check=True)
        wall, cpu, maxrss_kb, code = report.read().split()
        err.seek(0)
        stderr = err.read()
        if int(code) not in ok or b"Traceback (most recent call last)" in stderr:  # a crash, whatever its code
            err.seek(0)
            raise SystemExit(f"{' '.join(map(str, argv))} failed (rc {code}): "
                             f"{err.read().decode(errors='replace')[-800:]}")
        out.seek(0)
        return Run(float(wall), float(cpu), int(maxrss_kb) / 1024, out.read(), int(code))


@dataclass(frozen=True)
class Series:
    label: str
    runs: tuple[Run, ...]

    def _stat(self, attr: str) -> tuple[float, float]:
        values = [getattr(r, attr) for r in self.runs]
        return min(values), statistics.median(values)

    @property
    def cpu(self) -> tuple[float, float]:
        return self._stat("cpu_s")

    @property
    def wall(self) -> tuple[float, float]:
        return self._stat("wall_s")

    @property
    def rss(self) -> tuple[float, float]:
        return self._stat("peak_rss_mb")


def series(label: str, argv: Sequence[str], runs: int, **kwargs: object) -> Series:
    return Series(label, tuple(measure(argv, **kwargs) for _ in range(runs)))  # type: ignore[arg-type]


def interleaved(commands: Mapping[str, Sequence[str]], runs: int, *, repeat: Mapping[str, int] | None = None,
                **kwargs: object) -> dict[str, Series]:
    """Each command ``runs`` times (``repeat[label]`` times that many), taking turns: a burst of
    load on a shared machine hits all alike."""
    results: dict[str, list[Run]] = {label: [] for label in commands}
    for _ in range(runs):
        for label, argv in commands.items():
            for _ in range((repeat or {}).get(label, 1)):
                results[label].append(measure(argv, **kwargs))  # type: ignore[arg-type]
    return {label: Series(label, tuple(r)) for label, r in results.items()}


def table(rows: Sequence[Series]) -> str:
    width = max([32, *(len(s.label) + 1 for s in rows)])
    head = (f"{'':{width}}{'runs':>5}{'CPU min':>10}{'median':>9}{'wall min':>10}{'median':>9}"
            f"{'RSS min':>10}{'median':>9}")
    lines = [head]
    for s in rows:
        (c0, c1), (w0, w1), (r0, r1) = s.cpu, s.wall, s.rss
        lines.append(f"{s.label:{width}}{len(s.runs):>5}{c0 * 1000:>8.1f}ms{c1 * 1000:>7.1f}ms{w0 * 1000:>8.1f}ms"
                     f"{w1 * 1000:>7.1f}ms{r0:>8.1f}MB{r1:>7.1f}MB")
    lines.append("(the machine may be shared: compare the mins)")
    return "\n".join(lines)


def installed_farm(cache: Path, source: Path = REPO) -> Path:
    """The ``farm`` console script of ``cache/venv``, holding ``source`` (this working tree) installed
    as a user installs it (a regular install, not an editable one), refreshed now."""
    venv = cache / "venv"
    script = venv / ("Scripts/farm.exe" if os.name == "nt" else "bin/farm")
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # the dependencies as the project declares them now, then the project's current files
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(source)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(source)],
                   check=True)
    return script
