"""``publish:`` settings: the repository's _defaults.yml, the embedded default, refusals."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from farm.errors import ConfigError, UsageError
from farm.load.defaults import load_defaults
from farm.publish.gate import GatedWheel
from farm.publish.github import DEFAULT_TAG
from farm.publish.githubsettings import GithubSettings
from farm.publish.indexsettings import IndexSettings
from farm.publish.publish import upload
from farm.publish.targets import KINDS, parse_targets, select
from farm.publish.twinesettings import TwineSettings, default_simple_url
from farm.publish.verdict import Placed, PublishRun, TargetOutcome, Verdict, WheelVerdict
from tests.support.ledgermaker import make_entry
from tests.support.publishfix import REPO
from tests.support.wheelmaker import stamped_wheel


def test_repository_defaults_parse() -> None:
    defaults = load_defaults(REPO / "_defaults.yml")
    targets = defaults.publish  # parsed as the file was read
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
    ({"kind": "twine", "repository_url": "https://x/legacy/", "password_env": 7},
     "password_env must name an environment variable"),
    ({"kind": "twine", "repository_url": "https://x/legacy/", "simple_url": ["a"]}, "simple_url must be a string"),
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


@dataclass(frozen=True)
class DropSettings:
    """A kind of target this farm does not have: each wheel copied into a folder. What a new kind
    is: frozen settings that parse their own options, and a publish of a batch."""

    kind: ClassVar[str] = "drop"
    name: str
    folder: Path

    @property
    def after(self) -> str | None:
        return None

    @classmethod
    def parse(cls, name: str, options: Mapping[str, Any], *, root: Path, where: str) -> DropSettings:
        if not isinstance(options.get("folder"), str):
            raise ConfigError("folder must be a string", where=where)
        return cls(name, root / options["folder"])

    def publish(self, batch: Sequence[GatedWheel], run: PublishRun) -> Placed:
        placed = tuple((w, (self.folder / w.filename).as_uri()) for w in batch)
        if not run.dry_run:
            self.folder.mkdir(parents=True, exist_ok=True)
            for w, _ in placed:
                shutil.copy2(w.path, self.folder / w.filename)
        verdict = Verdict.WOULD_SEND if run.dry_run else Verdict.PUBLISHED
        return Placed(TargetOutcome(self.name, self.kind, tuple((w.filename, url) for w, url in placed),
                                    tuple(w.filename for w, _ in placed)),
                      tuple(WheelVerdict(w.filename, self.name, verdict, url) for w, url in placed),
                      () if run.dry_run else placed)


def test_a_new_kind_is_its_class_and_one_registry_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Registered, the toy kind is read from _defaults.yml with the others, published to wheel by
    wheel and recorded in the ledger as any target is; its options are checked where it says."""
    monkeypatch.setitem(KINDS, "drop", DropSettings)  # the registry line
    root = tmp_path / "root"
    root.mkdir()
    text = (REPO / "_defaults.yml").read_text().replace("publish:\n", "publish:\n  dropped:\n    kind: drop\n"
                                                                     "    folder: dropped\n", 1)
    (root / "_defaults.yml").write_text(text)
    drop = load_defaults(root / "_defaults.yml").publish["dropped"]
    assert drop == DropSettings("dropped", root / "dropped")
    wheel = stamped_wheel(tmp_path / "out", make_entry())
    report = upload(tmp_path / "out", select({"dropped": drop}, None), ledger=root / "ledger.jsonl", reader="native")
    assert report.ok, [v.line() for v in report.verdicts]
    assert [(v.wheel, v.target, v.verdict) for v in report.verdicts] == [(wheel.name, "dropped", Verdict.PUBLISHED)]
    assert (root / "dropped" / wheel.name).read_bytes() == wheel.read_bytes()
    (entry,) = (json.loads(line) for line in (root / "ledger.jsonl").read_text().splitlines())
    assert entry["published"] == [{"target": "dropped", "url": (root / "dropped" / wheel.name).as_uri()}]
    (root / "_defaults.yml").write_text(text.replace("folder: dropped", "folder: 3"))
    with pytest.raises(ConfigError, match="folder must be a string"):
        load_defaults(root / "_defaults.yml")


def test_reading_the_targets_loads_no_publishing_code(tmp_path: Path) -> None:
    """Each kind's settings module imports the code that publishes only when it publishes: a
    command that reads the configuration (farm matrix) never loads an HTTP client or the index
    writer."""
    code = ("import sys; from pathlib import Path; from farm.load.recipes import load_config; load_config(Path(sys.argv[1])); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('farm.publish.'))))")
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["farm.publish.github", "farm.publish.githubsettings", "farm.publish.indexsettings",
                           "farm.publish.targets", "farm.publish.twinesettings"]
