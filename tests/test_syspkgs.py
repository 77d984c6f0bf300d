"""farm.builder.syspkgs: a recipe's system packages checked on the native builder's host, with the
host's real package database (dpkg-query on Debian hosts, rpm on rpm hosts); never installed."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from farm.builder import syspkgs
from farm.builder.syspkgs import APT, DNF, blocker_reason, host_manager, host_names, install_command, missing_packages
from tests.support.buildroot import DEMO_RECIPE, REPO, make_root

ABSENT = "farm-no-such-package-dev"  # a name no distribution ships
MANAGER = host_manager()
PRESENT = {APT: "coreutils", DNF: "coreutils"}  # installed on every host of that kind


def test_the_host_manager_is_read_from_its_tools() -> None:
    def tools(*names: str) -> Callable[[str], str | None]:
        return lambda name: f"/usr/bin/{name}" if name in names else None

    assert host_manager(tools("dpkg-query", "rpm")) == APT
    assert host_manager(tools("rpm")) == DNF
    assert host_manager(tools()) is None


def test_dnf_names_become_debian_names_and_a_repository_package_none() -> None:
    assert host_names(("epel-release", "sparsehash-devel"), APT) == (("libsparsehash-dev",), ())
    assert host_names(("epel-release", "sparsehash-devel"), DNF) == (("epel-release", "sparsehash-devel"), ())
    assert host_names(("epel-release", "boost-devel"), APT) == ((), ("boost-devel",))


def test_the_install_command_keeps_the_recipe_order() -> None:
    assert install_command(("libsparsehash-dev",), APT) == "apt-get update && apt-get install -y libsparsehash-dev"
    assert install_command(("epel-release", "sparsehash-devel"), DNF) == \
        "dnf install -y epel-release && dnf install -y sparsehash-devel"


@pytest.mark.skipif(MANAGER is None, reason="this host has neither dpkg-query nor rpm")
def test_the_real_package_database_answers_installed_and_missing() -> None:
    assert MANAGER is not None
    assert missing_packages((PRESENT[MANAGER], ABSENT), MANAGER) == (ABSENT,)


@pytest.mark.skipif(MANAGER != APT, reason="a Debian host (dpkg-query)")
def test_a_debian_host_is_told_which_debian_package_to_install(monkeypatch) -> None:
    """A recipe's dnf name whose Debian counterpart the host lacks: the reason names the Debian
    package and the recipe's names, the fix the apt-get command; once the counterpart is one the
    host has, nothing blocks."""
    monkeypatch.setattr(syspkgs, "DEBIAN_NAMES", {**syspkgs.DEBIAN_NAMES, "absent-devel": ABSENT,
                                                  "coreutils": "coreutils"})
    found = blocker_reason(("epel-release", "absent-devel"), APT, missing_packages)
    assert found is not None
    reason, fix = found
    assert reason.startswith(f"the recipe needs the system package(s) {ABSENT} (the Debian names of the "
                             "recipe's epel-release, absent-devel), not installed on this host")
    assert fix.startswith(f"install them as root: apt-get update && apt-get install -y {ABSENT}; or build in")
    assert blocker_reason(("epel-release", "coreutils"), APT, missing_packages) is None


def test_a_dnf_name_without_a_debian_counterpart_blocks_and_says_where_to_add_it() -> None:
    found = blocker_reason(("epel-release", "boost-devel"), APT, missing_packages)
    assert found is not None
    assert "the dnf package(s) boost-devel, and farm knows no Debian name for them" in found[0]
    assert "DEBIAN_NAMES in farm/builder/syspkgs.py" in found[1]
    nothing = blocker_reason(("sparsehash-devel",), None, missing_packages)
    assert nothing is not None
    assert "neither dpkg nor rpm" in nothing[0]
    assert blocker_reason((), None, missing_packages) is None


@pytest.mark.skipif(MANAGER is None or shutil.which("c++") is None, reason="needs dpkg-query or rpm, and c++")
def test_farm_build_refuses_a_native_cell_whose_system_package_is_missing(tmp_path, capsys) -> None:
    """The whole command: a recipe needing a package this host lacks is refused by the native
    builder's preflight (exit 3, what to install), before a source, toolkit or environment is fetched."""
    from farm.cli import main

    recipe = DEMO_RECIPE.format(arch="8.0") + f"build:\n  system_packages: [epel-release, {ABSENT}]\n"
    make_root(tmp_path, {"demo_ext": recipe}, {"examples/demo_ext": REPO / "examples" / "demo_ext"})
    cache = tmp_path / "cache"
    code = main(["build", "demo_ext", "--builder", "native", "--cuda", "13.0", "--python", "3.11", "--platform",
                 "linux_x86_64", "--root", str(tmp_path), "--cache-dir", str(cache), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "demo_ext-0.1.0-cu130-notorch-cp311-linux_x86_64 cannot be built on this host: the recipe needs" in err
    assert ABSENT in err
    assert not [p for p in Path(cache).rglob("*") if p.is_file()]  # nothing fetched
