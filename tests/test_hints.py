"""Hints in error messages: versions sorted and matched by value, words by spelling."""

from __future__ import annotations

from farm.errors import did_you_mean, version_key


def test_version_order() -> None:
    assert sorted(["12.10", "12.9", "13.0", "12.8"], key=version_key) == ["12.8", "12.9", "12.10", "13.0"]
    assert sorted(["cp310", "cp39", "cp314"], key=version_key) == ["cp39", "cp310", "cp314"]
    assert sorted(["none", "2.10", "2.9"], key=version_key) == ["2.9", "2.10", "none"]


def test_versions_are_close_by_value() -> None:
    lines = ["12.6", "12.8", "12.9", "13.0"]
    assert did_you_mean("12.7", lines) == "did you mean '12.8'?"  # a tie goes to the newer
    assert did_you_mean("12.10", lines) == "did you mean '12.9'?"
    assert did_you_mean("14.0", lines) == "did you mean '13.0'?"
    assert did_you_mean("cp315", ["cp310", "cp311", "cp314"]) == "did you mean 'cp314'?"
    assert did_you_mean("2.11", ["2.8", "2.9", "2.10", "none"]) == "did you mean '2.10'?"


def test_words_are_close_by_spelling() -> None:
    assert did_you_mean("linux_x86", ["linux_x86_64", "win_amd64"]) == "did you mean 'linux_x86_64'?"
    assert did_you_mean("nne", ["2.8", "none"]) == "did you mean 'none'?"
    assert did_you_mean("zzz", ["linux_x86_64"]) == ""
