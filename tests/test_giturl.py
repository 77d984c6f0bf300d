"""farm.source.giturl: the URL git really fetches, after its ``url.<base>.insteadOf`` rewriting.

The configured case runs the real git against a global configuration file of the test's own
(``GIT_CONFIG_GLOBAL``, the system file left out), so this host's own rewrites play no part."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from farm.source.giturl import Rewrite, as_fetched, configured_rules, parse_rules, rewrite

RULES = (Rewrite("/mirror/", "https://github.com/"), Rewrite("/special/r", "https://github.com/o/r"))


def test_the_longest_matching_prefix_wins() -> None:
    assert rewrite("https://github.com/o/r.git", RULES) == "/special/r.git"
    assert rewrite("https://github.com/other/x.git", RULES) == "/mirror/other/x.git"


def test_a_url_no_rule_matches_stays() -> None:
    assert rewrite("https://gitlab.com/o/r.git", RULES) == "https://gitlab.com/o/r.git"
    assert rewrite("https://github.com/o/r.git", ()) == "https://github.com/o/r.git"


def test_git_config_output_is_parsed_with_the_base_as_written() -> None:
    text = "url./Work/Mirror/.insteadof\nhttps://github.com/\0url.x.pushinsteadof\nhttps://a/\0core.bare\nfalse\0"
    assert parse_rules(text) == (Rewrite("/Work/Mirror/", "https://github.com/"),)
    assert parse_rules("") == ()


@pytest.fixture
def git_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return config


def test_the_hosts_rewrites_are_read_from_git(git_home: Path, tmp_path: Path) -> None:
    assert configured_rules() == ()
    assert as_fetched("https://github.com/o/r.git") == "https://github.com/o/r.git"
    mirror = tmp_path / "mirror"
    for base, prefix in ((f"{mirror}/", "https://github.com/"), (f"{mirror}/eigen", "https://gitlab.com/libeigen/eigen")):
        subprocess.run(["git", "config", "--global", f"url.{base}.insteadOf", prefix], check=True)
    assert as_fetched("https://github.com/o/r.git") == f"{mirror}/o/r.git"
    assert as_fetched("https://gitlab.com/libeigen/eigen.git") == f"{mirror}/eigen.git"
    assert as_fetched("https://example.org/o/r.git") == "https://example.org/o/r.git"


def test_no_git_means_no_rewrites(git_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH: the fetch will say so itself
    assert configured_rules() == ()
