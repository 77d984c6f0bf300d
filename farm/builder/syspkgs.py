"""A recipe's system packages on the native builder's host: checked, never installed.

A recipe's ``build.system_packages`` are dnf names (``[epel-release, sparsehash-devel]``): the
Linux build container installs them before the build. The native builder builds on this host as
it is and installs nothing with root's rights, so before anything is downloaded it checks that the
host has them, with the host's own package database:

- **rpm** hosts (Fedora, RHEL, manylinux): each dnf name, as ``rpm -q`` knows it;
- **Debian** hosts (Debian, Ubuntu: ``dpkg-query``): each dnf name's Debian counterpart from
  :data:`DEBIAN_NAMES`; a repository package (``epel-release``) has none and needs none.

A package the host lacks stops the cell with the command that installs it; a dnf name with no
known Debian counterpart stops it too (farm cannot tell whether the host has it), naming where the
counterpart is added. :func:`blocker_reason` is pure; :func:`host_manager` and
:func:`missing_packages` ask the host.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence

# dnf name -> the Debian package that provides the same files ("": a repository package, which a
# Debian host has no use for). Add a recipe's package here when it names a new one.
DEBIAN_NAMES: Mapping[str, str] = {
    "epel-release": "",  # enables EPEL, where CentOS/RHEL find sparsehash-devel
    "sparsehash-devel": "libsparsehash-dev",  # Google's sparsehash headers (torchsparse)
}

APT = "apt"
DNF = "dnf"
_QUERY_TIMEOUT_S = 60.0


def host_manager(which: Callable[[str], str | None] = shutil.which) -> str | None:
    """The host's package database: ``apt`` (dpkg-query), ``dnf`` (rpm), or None (neither)."""
    if which("dpkg-query"):
        return APT
    if which("rpm"):
        return DNF
    return None


def host_names(dnf_names: Sequence[str], manager: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(names on this host, dnf names with no known counterpart)`` for ``manager`` (pure)."""
    if manager == DNF:
        return tuple(dnf_names), ()
    known = tuple(DEBIAN_NAMES[n] for n in dnf_names if DEBIAN_NAMES.get(n))
    return known, tuple(n for n in dnf_names if n not in DEBIAN_NAMES)


def missing_packages(names: Sequence[str], manager: str) -> tuple[str, ...]:
    """Which of ``names`` the host's package database does not hold installed (asked once each)."""
    missing = []
    for name in names:
        argv = (["dpkg-query", "-W", "-f=${db:Status-Status}", name] if manager == APT
                else ["rpm", "-q", "--quiet", name])
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                  timeout=_QUERY_TIMEOUT_S, check=False)
            installed = proc.returncode == 0 and (manager != APT or proc.stdout.strip() == "installed")
        except (OSError, subprocess.TimeoutExpired):
            installed = False
        if not installed:
            missing.append(name)
    return tuple(missing)


def install_command(names: Sequence[str], manager: str) -> str:
    if manager == APT:
        return f"apt-get update && apt-get install -y {' '.join(names)}"
    return "".join(f"dnf install -y {n} && " for n in names).removesuffix(" && ")  # in order: epel first


def blocker_reason(dnf_names: Sequence[str], manager: str | None,
                   missing: Callable[[Sequence[str], str], Sequence[str]]) -> tuple[str, str] | None:
    """Why this host lacks the recipe's system packages, and the fix; None: it has them all (pure
    but for ``missing``, which asks the host's package database)."""
    if not dnf_names:
        return None
    container = "build in the container (--builder cibuildwheel), which installs the dnf ones"
    if manager is None:
        reason = (f"the recipe needs the system packages {', '.join(dnf_names)} (dnf names), and this host "
                  "has neither dpkg nor rpm to check them (the native builder installs no system package)")
        return reason, f"install their equivalents, or {container}"
    names, unknown = host_names(dnf_names, manager)
    if unknown:
        reason = (f"the recipe needs the dnf package(s) {', '.join(unknown)}, and farm knows no Debian name "
                  "for them, so it cannot check this host (the native builder installs no system package)")
        return reason, f"add the Debian package to DEBIAN_NAMES in farm/builder/syspkgs.py, or {container}"
    lacking = tuple(missing(names, manager))
    if not lacking:
        return None
    origin = "" if manager == DNF else f" (the Debian names of the recipe's {', '.join(dnf_names)})"
    reason = (f"the recipe needs the system package(s) {', '.join(lacking)}{origin}, not installed on this "
              "host (the native builder installs no system package)")
    return reason, f"install them as root: {install_command(lacking, manager)}; or {container}"
