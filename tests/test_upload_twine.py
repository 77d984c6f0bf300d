"""The PyPI-compatible target's pure parts: reading simple pages, deciding what to send.
(The real upload to a pypiserver is in test_upload_e2e.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from farm.errors import ToolError
from farm.publish.twine import (
    Listed,
    TwineWheel,
    command,
    listed_files,
    plan,
)
from farm.publish.twinesettings import TwineSettings
from tests.support import loopback

NAME = "demo_ext-0.1.0+cu130-cp311-cp311-linux_x86_64.whl"


def test_plan_skips_same_and_refuses_other_hash() -> None:
    w = TwineWheel(Path("/out") / NAME, "a" * 64)
    assert plan([w], {}).upload == (w.path,)
    same = plan([w], {"demo-ext": {NAME: Listed(NAME, "u", "a" * 64)}})
    assert same.ok
    assert same.upload == ()
    assert same.present == ((NAME, "u"),)
    other = plan([w], {"demo-ext": {NAME: Listed(NAME, "u", "c" * 64)}})
    assert not other.ok
    assert "never replaced" in other.refused[0][1]
    unknown = plan([w], {"demo-ext": {NAME: Listed(NAME, "u", None)}})
    assert not unknown.ok
    assert "declares no sha256" in unknown.refused[0][1]


def test_command_carries_no_credentials() -> None:
    s = TwineSettings("pypi", "https://upload.example/legacy/", "https://example/simple/")
    argv = command(s, [Path("/out") / NAME])
    assert argv[1:] == ["-m", "twine", "upload", "--non-interactive", "--disable-progress-bar",
                        "--repository-url", "https://upload.example/legacy/", f"/out/{NAME}"]
    assert not any(a.startswith(("-u", "-p", "--username", "--password")) for a in argv)


def test_a_page_that_is_not_the_simple_api_is_a_clear_error(tmp_path: Path) -> None:
    """A repository URL that answers JSON of another shape (a misconfigured simple_url) is a
    ToolError naming the page, not a traceback."""
    (tmp_path / "demo-ext").mkdir()
    (tmp_path / "demo-ext" / "index.html").write_text('{"files": [{"name": "no filename key"}]}')

    class JsonPages(loopback.QuietHandler):
        def guess_type(self, path: Any) -> str:
            return "application/vnd.pypi.simple.v1+json"

    with loopback.serve(tmp_path, JsonPages) as base:
        s = TwineSettings("pypi", base + "legacy/", base)
        with pytest.raises(ToolError, match=r"demo-ext/ is not a simple API page \(ValueError: a file entry without a url"):
            listed_files(s, "demo_ext", env={})
