"""The stamped wheel the upload tests publish: ``examples/demo_ext`` built with nvcc, then
asserted, stamped and given its ledger fragment by the real postbuild.

One function makes it (:func:`tests.support.postbuildfix.build_stamped`), cached per test
session, so every upload test module shares one build.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.support.postbuildfix import Batch, build_stamped

REPO = Path(__file__).resolve().parents[2]
ARCH = "8.0"  # one SASS target keeps the compile short; the gate does not care how many


@pytest.fixture(scope="session")
def demo_batch(tmp_path_factory: pytest.TempPathFactory, cuda_home: Path) -> Batch:
    return build_stamped(tmp_path_factory.getbasetemp() / "demo-ext-build", cuda_home, ARCH)


def write_farm_root(root: Path, defaults: str | None = None) -> Path:
    """A farm repository whose demo_ext recipe asks for what the test build made (:data:`ARCH`):
    the upload gate re-derives each wheel's list from the configuration."""
    (root / "packages").mkdir(parents=True, exist_ok=True)
    (root / "_defaults.yml").write_text(defaults if defaults is not None else (REPO / "_defaults.yml").read_text())
    (root / "examples" / "demo_ext").mkdir(parents=True, exist_ok=True)
    (root / "packages" / "demo_ext.yml").write_text(
        (REPO / "packages" / "demo_ext.yml").read_text() + f"arch:\n  list: '{ARCH}'\n")
    return root


def copy_batch(batch: Batch, dest: Path, *, fragment: bool = True) -> Path:
    """A private copy of the stamped wheel (and its fragment) in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(batch.wheel, dest)
    if fragment:
        shutil.copy2(batch.fragment, dest)
    return dest / batch.wheel.name


# -- servers on 127.0.0.1 ---------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"no answer from {url}")


class Server:
    """A child process serving HTTP on 127.0.0.1, stopped by :meth:`stop` (by its own pid)."""

    def __init__(self, argv: list[str], probe: str, log: Path) -> None:
        self.log = log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_http(probe, self.proc)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def serve_dir(root: Path, log: Path) -> tuple[Server, str]:
    port = free_port()
    server = Server([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                     "--directory", str(root)], f"http://127.0.0.1:{port}/", log)
    return server, f"http://127.0.0.1:{port}"


def pypiserver(packages: Path, log: Path) -> tuple[Server, str]:
    port = free_port()
    exe = Path(sys.executable).with_name("pypi-server")
    server = Server([str(exe), "run", "-i", "127.0.0.1", "-p", str(port), "-a", ".", "-P", ".",
                     "--disable-fallback", str(packages)], f"http://127.0.0.1:{port}/simple/", log)
    return server, f"http://127.0.0.1:{port}"


# -- installing into a fresh environment --------------------------------------------------------
def fresh_venv(path: Path) -> Path:
    """A new venv without pip (pip runs from this interpreter with ``--python``)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def pip_install(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pip (of this interpreter) installing into ``python``'s environment; ``--isolated`` keeps
    the machine's pip configuration (extra indexes, find-links) out, so only the index under
    test can supply the wheel."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "--python", str(python), "install", "--no-cache-dir",
         "--disable-pip-version-check", *args],
        capture_output=True, text=True, check=False,
    )


def uv_install(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    uv = Path(sys.executable).with_name("uv")
    return subprocess.run([str(uv), "pip", "install", "--no-config", "--no-cache", "--python", str(python), *args],
                          capture_output=True, text=True, check=False)


# -- a fleet of stamped wheels, one package per cell --------------------------------------------
def stamped_fleet(work: Path, so: Path, cuda_home: Path, packages: list[str], *, arch: str,
                  run_id: str = "1", recipe_lines: Mapping[str, str] | None = None) -> tuple[Path, dict[str, Path]]:
    """A farm root whose recipes ask ``arch`` of each package, and for each package a wheel
    holding ``so`` stamped by the real postbuild (fragments beside them in ``work/out``), in the
    order given. ``run_id``: the CI run recorded in each ledger fragment; another one makes another
    build of the same cells that is not reproducible (a file of the wheel names the run, as a
    package's own build stamp would): other bytes, the same file names. ``recipe_lines``: YAML
    appended to a package's recipe (``requires_dist: [...]``)."""
    from farm.load.recipes import load_config
    from farm.provenance.postbuild import context_from_config, postbuild_wheel
    from tests.support.postbuildfix import builder_wheel
    from tests.support.postbuildfix import write_farm_root as write_recipes

    root = write_recipes(work / "root", dict.fromkeys(packages, arch))
    for dist, lines in (recipe_lines or {}).items():
        with (root / "packages" / f"{dist}.yml").open("a") as yml:
            yml.write(lines)
    config = load_config(root)
    env = {"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "farm-wheels/farm", "GITHUB_RUN_ID": run_id,
           "GITHUB_RUN_ATTEMPT": "1", "GITHUB_SHA": "0" * 40}
    out = work / f"out-{run_id}"
    wheels = {}
    for dist in packages:
        raw = builder_wheel(work / f"raw-{run_id}", dist, so, extra={f"{dist}/BUILD": run_id.encode()})
        context, recipe = context_from_config(config, raw, cuda_home=cuda_home, builder="native", env=env)
        result = postbuild_wheel(raw, out, context, dist=recipe.dist, fragments_dir=out)
        assert result.passed, result.report.render()
        assert result.stamped, result.report.render()
        wheels[dist] = result.stamped.path
    return root, wheels
