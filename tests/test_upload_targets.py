"""``publish:`` settings: the repository's _defaults.yml, the embedded default, refusals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from farm.errors import ConfigError, UsageError
from farm.model.config import load_defaults
from farm.publish.github import DEFAULT_TAG
from farm.publish.targets import (
    GithubSettings,
    IndexSettings,
    TwineSettings,
    default_simple_url,
    parse_targets,
    select,
)
from tests.support.publishfix import REPO


def test_repository_defaults_parse() -> None:
    defaults = load_defaults(REPO / "_defaults.yml")
    targets = parse_targets(defaults.publish, root=REPO)
    assert isinstance(targets["index"], IndexSettings)
    assert targets["index"].path == REPO / "public" / "index"
    assert isinstance(targets["github"], GithubSettings)
    assert targets["github"].tag == DEFAULT_TAG
    pypi = targets["pypi"]
    assert isinstance(pypi, TwineSettings)
    assert pypi.simple_url == default_simple_url(pypi.repository_url)
    assert defaults.default_target in targets


def test_embedded_default(tmp_path: Path) -> None:
    (target,) = parse_targets({}, root=tmp_path).values()
    assert target == IndexSettings("index", tmp_path / "dist" / "index", None)


def test_simple_url_default() -> None:
    assert default_simple_url("https://upload.example.org/legacy/") == "https://upload.example.org/simple/"
    assert default_simple_url("http://127.0.0.1:8080/") == "http://127.0.0.1:8080/simple/"


@pytest.mark.parametrize(("options", "message"), [
    ({"kind": "ftp"}, "unknown publish kind"),
    ({"kind": "index", "path": "x", "colour": "red"}, "unknown key(s) colour"),
    ({"kind": "github", "repository": "not-a-repo"}, "is not owner/name"),
    ({"kind": "github", "repository": "o/r", "tag": "v1"}, "does not contain {package}"),
    ({"kind": "github", "repository": "o/r", "tag": "{package}-{arch}"},
     ("tag '{package}-{arch}' is not a format of package, version, cuda, cu, torch, python, platform, epoch "
     "(KeyError('arch'))")),
    ({"kind": "github", "repository": "o/r", "api_url": "ftp://x"}, "api_url must be an http(s) URL"),
    ({"kind": "github", "repository": "o/r", "warn_assets": 5000}, "warn_assets"),
    ({"kind": "twine"}, "repository_url must be a non-empty string"),
])
def test_bad_settings_refused(options: dict[str, object], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_targets({"t": options}, root=tmp_path)


def test_select(tmp_path: Path) -> None:
    targets = parse_targets({"a": {"kind": "index", "path": "a"}, "b": {"kind": "index", "path": "b"}}, root=tmp_path)
    assert [t.name for t in select(targets, None)] == ["a", "b"]
    assert [t.name for t in select(targets, ["b", "b"])] == ["b"]
    with pytest.raises(UsageError, match="unknown target"):
        select(targets, ["c"])


def test_index_links_to_another_target(tmp_path: Path) -> None:
    ok = parse_targets({"pages": {"kind": "index", "path": "p", "links": "gh"},
                        "gh": {"kind": "github", "repository": "o/r"}}, root=tmp_path)
    assert ok["pages"] == IndexSettings("pages", tmp_path / "p", None, "gh")
    with pytest.raises(ConfigError, match="'nope' is not a github or twine target"):
        parse_targets({"pages": {"kind": "index", "path": "p", "links": "nope"}}, root=tmp_path)
    with pytest.raises(ConfigError, match="'other' is not a github or twine target"):
        parse_targets({"pages": {"kind": "index", "path": "p", "links": "other"},
                       "other": {"kind": "index", "path": "o"}}, root=tmp_path)
