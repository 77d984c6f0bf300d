"""The URL git really fetches a recipe's repository from.

git rewrites a URL with its configuration's ``url.<base>.insteadOf = <prefix>`` entries (a mirror,
or a local clone standing in for GitHub on a host without it): the longest matching prefix is
replaced by its base. farm's fetch runs git, so git applies them; whatever asks beforehand where
the source comes from (the build's preflight) must ask the same question, or it refuses a cell
because a server git would never contact does not answer.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass

_SUFFIX = ".insteadof"  # git prints section and key names lower-cased, the base as written
GIT_CONFIG_TIMEOUT_S = 10


@dataclass(frozen=True, slots=True)
class Rewrite:
    """One ``url.<base>.insteadOf = <prefix>`` entry."""

    base: str
    prefix: str


def parse_rules(text: str) -> tuple[Rewrite, ...]:
    """The entries in ``git config --null --get-regexp`` output (``key\\nvalue\\0`` records)."""
    rules = []
    for record in text.split("\0"):
        key, _, value = record.partition("\n")
        if key.lower().startswith("url.") and key.lower().endswith(_SUFFIX) and value:
            rules.append(Rewrite(key[len("url."):-len(_SUFFIX)], value))
    return tuple(rules)


def rewrite(url: str, rules: tuple[Rewrite, ...]) -> str:
    """``url`` as git rewrites it: the longest matching prefix wins; no match leaves it alone."""
    matches = [r for r in rules if url.startswith(r.prefix)]
    if not matches:
        return url
    best = max(matches, key=lambda r: len(r.prefix))
    return best.base + url[len(best.prefix):]


def configured_rules() -> tuple[Rewrite, ...]:
    """This host's rewrites (git's system and global configuration, asked outside any repository,
    as the fetch runs git in its cache). None configured, or no git to ask: none (the fetch then
    fails on its own, with git's message)."""
    try:
        proc = subprocess.run(["git", "config", "--null", "--get-regexp", r"^url\..*\.insteadof$"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=tempfile.gettempdir(),
                              timeout=GIT_CONFIG_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return parse_rules(proc.stdout) if proc.returncode == 0 else ()


def as_fetched(url: str) -> str:
    """The URL git will fetch when told to fetch ``url`` on this host."""
    return rewrite(url, configured_rules())
