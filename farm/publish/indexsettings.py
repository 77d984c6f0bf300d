"""The ``index`` publish target's settings, read with the configuration; the code that publishes
(:mod:`farm.publish.indextarget`) is imported only by :meth:`IndexSettings.publish`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from farm.errors import ConfigError

if TYPE_CHECKING:
    from farm.publish.gate import GatedWheel
    from farm.publish.verdict import Placed, PublishRun


@dataclass(frozen=True)
class IndexSettings:
    """A static PEP 503 tree. ``base_url`` is where the tree is served (recorded in the ledger);
    without it the ledger records paths relative to the tree's root. ``links``: another target
    (github, twine) whose copies the pages link to, instead of storing the wheels in the tree.
    ``variants``: also the wheel-variant channel under ``variants/`` (:mod:`farm.publish.variantchannel`)."""

    kind: ClassVar[str] = "index"
    name: str
    path: Path
    base_url: str | None = None
    links: str | None = None
    variants: bool = False

    @property
    def after(self) -> str | None:
        return self.links

    @classmethod
    def parse(cls, name: str, options: Mapping[str, Any], *, root: Path, where: str) -> IndexSettings:
        path = options.get("path")
        if not isinstance(path, str) or not path:
            raise ConfigError("path must be a non-empty string", where=where)
        base_url = options.get("base_url")
        if base_url is not None and not isinstance(base_url, str):
            raise ConfigError("base_url must be a string or null", where=where)
        links = options.get("links")
        if links is not None and (not isinstance(links, str) or links == name):
            raise ConfigError("links must name another publish target (github or twine)", where=where)
        variants = options.get("variants", False)
        if not isinstance(variants, bool):
            raise ConfigError("variants must be true or false", where=where)
        if variants and links is not None:
            raise ConfigError("variants needs the wheels stored in the tree, and links lists them elsewhere",
                              where=where, hint="turn the channel on for an index that stores its wheels")
        return cls(name, root / path, base_url.rstrip("/") if base_url else None, links, variants)

    def publish(self, batch: Sequence[GatedWheel], run: PublishRun) -> Placed:
        from farm.publish.indextarget import publish_target  # noqa: PLC0415 (loading the configuration never pays for it)

        return publish_target(self, batch, run)
