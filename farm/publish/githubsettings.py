"""The ``github`` publish target's settings, read with the configuration; the code that publishes
(:mod:`farm.publish.releases`) is imported only by :meth:`GithubSettings.publish`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from farm.errors import ConfigError
from farm.publish.github import API_URL, DEFAULT_TAG, UPLOADS_URL, check_tag

if TYPE_CHECKING:
    from farm.publish.gate import GatedWheel
    from farm.publish.verdict import Placed, PublishRun

_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class GithubSettings:
    """GitHub Releases through the REST API: a release per ``tag`` (a format over the wheel's
    cell, see :mod:`farm.publish.github`). ``api_url`` / ``uploads_url``: GitHub Enterprise
    Server's, or a test server's."""

    kind: ClassVar[str] = "github"
    after = None  # it publishes after no other target
    name: str
    repository: str
    tag: str = DEFAULT_TAG
    # Warn when a release will hold this many assets; GitHub refuses the 1,001st.
    warn_assets: int = 900
    api_url: str = API_URL
    uploads_url: str = UPLOADS_URL

    @classmethod
    def parse(cls, name: str, options: Mapping[str, Any], *, root: Path,  # noqa: ARG003 (the protocol's signature)
              where: str) -> GithubSettings:
        repo = options.get("repository")
        if not isinstance(repo, str) or not repo:
            raise ConfigError("repository must be a non-empty string", where=where)
        if not _REPO.match(repo):
            raise ConfigError(f"repository {repo!r} is not owner/name", where=where)
        tag = options.get("tag", DEFAULT_TAG)
        if not isinstance(tag, str):
            raise ConfigError("tag must be a string", where=where, hint=f"e.g. {DEFAULT_TAG!r}")
        try:  # an unknown field fails here, not mid-upload
            check_tag(tag)
        except ConfigError as exc:
            raise ConfigError(exc.message, where=where, hint=exc.hint) from None
        warn = options.get("warn_assets", 900)
        if not isinstance(warn, int) or not 0 < warn <= 1000:
            raise ConfigError("warn_assets must be an integer in 1..1000", where=where)
        urls = {}
        for key, default in (("api_url", API_URL), ("uploads_url", UPLOADS_URL)):
            value = options.get(key, default)
            if not isinstance(value, str) or not value.startswith(("https://", "http://")):
                raise ConfigError(f"{key} must be an http(s) URL", where=where, hint=f"GitHub's is {default}")
            urls[key] = value.rstrip("/")
        return cls(name, repo, tag, warn, **urls)

    def publish(self, batch: Sequence[GatedWheel], run: PublishRun) -> Placed:
        from farm.publish.releases import publish_target  # noqa: PLC0415 (loading the configuration never pays for it)

        return publish_target(self, batch, run)
