"""The ``twine`` publish target's settings, read with the configuration; the code that publishes
(:mod:`farm.publish.twine`) is imported only by :meth:`TwineSettings.publish`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from farm.errors import ConfigError
from farm.model.config import ENV_NAME

if TYPE_CHECKING:
    from farm.publish.gate import GatedWheel
    from farm.publish.verdict import Placed, PublishRun


@dataclass(frozen=True)
class TwineSettings:
    """Any PyPI-compatible repository. ``simple_url`` is where existing files are looked up; it
    defaults to ``repository_url`` with ``legacy/`` replaced by (or ``simple/`` appended)."""

    kind: ClassVar[str] = "twine"
    after = None  # it publishes after no other target
    name: str
    repository_url: str
    simple_url: str
    username_env: str = "TWINE_USERNAME"
    password_env: str = "TWINE_PASSWORD"

    @classmethod
    def parse(cls, name: str, options: Mapping[str, Any], *, root: Path,  # noqa: ARG003 (the protocol's signature)
              where: str) -> TwineSettings:
        url = options.get("repository_url")
        if not isinstance(url, str) or not url:
            raise ConfigError("repository_url must be a non-empty string", where=where)
        simple = options.get("simple_url") or default_simple_url(url)
        if not isinstance(simple, str):
            raise ConfigError("simple_url must be a string", where=where)
        names = []
        for key, default in (("username_env", "TWINE_USERNAME"), ("password_env", "TWINE_PASSWORD")):
            value = options.get(key, default)
            if not isinstance(value, str) or not ENV_NAME.match(value):
                raise ConfigError(f"{key} must name an environment variable", where=where, hint=f"e.g. {default}")
            names.append(value)
        return cls(name, url, simple if simple.endswith("/") else simple + "/", *names)

    def publish(self, batch: Sequence[GatedWheel], run: PublishRun) -> Placed:
        from farm.publish.twine import publish_target  # noqa: PLC0415 (loading the configuration never pays for it)

        return publish_target(self, batch, run)


def default_simple_url(repository_url: str) -> str:
    base = repository_url.rstrip("/")
    base = base.removesuffix("/legacy")
    return base + "/simple/"
