"""Publish targets: what ``_defaults.yml`` ``publish:`` names, and the registry of their kinds.

``publish:`` maps a target name to its settings; ``kind`` picks the implementation::

    publish:
      index:  {kind: index, path: dist/index, base_url: null, variants: true}
      github: {kind: github, repository: owner/name}
      pypi:   {kind: twine, repository_url: https://upload.pypi.org/legacy/,
               simple_url: https://pypi.org/simple/}

A kind is one class, in a small module of its own: frozen settings that parse their own options
(once, when the configuration is loaded) and publish a batch (:class:`PublishTarget`), importing
the code that publishes only then, so that reading the configuration never pays for it.
:data:`KINDS` is the registry, as cibuildwheel's platform modules are: a new target is its
module plus one line there. Without a ``publish:`` mapping the embedded default is one ``index``
target at ``dist/index``. Credentials are never settings: they come from the environment
variables a target names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

from farm.errors import ConfigError, UsageError, did_you_mean
from farm.publish.githubsettings import GithubSettings
from farm.publish.indexsettings import IndexSettings
from farm.publish.twinesettings import TwineSettings

if TYPE_CHECKING:
    from farm.publish.gate import GatedWheel
    from farm.publish.verdict import Placed, PublishRun


class PublishTarget(Protocol):
    """One configured target: its settings, and how it publishes a batch of gated wheels."""

    kind: ClassVar[str]
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # frozen settings: their fields are the keys

    @property
    def name(self) -> str: ...

    @property
    def after(self) -> str | None:
        """Another target this one publishes after (an index that links to its copies)."""

    @classmethod
    def parse(cls, name: str, options: Mapping[str, Any], *, root: Path, where: str) -> Self:
        """The settings of ``options`` (``kind`` taken out); a missing or unknown key is a
        :class:`~farm.errors.ConfigError` naming ``where``."""

    def publish(self, batch: Sequence[GatedWheel], run: PublishRun) -> Placed:
        """Each wheel of ``batch`` on this target, one verdict each: a wheel refused or failed
        here never stops another."""


_REGISTERED: tuple[type[PublishTarget], ...] = (
    IndexSettings,
    GithubSettings,
    TwineSettings,
)
KINDS: Mapping[str, type[PublishTarget]] = {target.kind: target for target in _REGISTERED}

EMBEDDED_DEFAULT: Mapping[str, Mapping[str, Any]] = {
    "index": {"kind": "index", "path": "dist/index", "base_url": None},
}


def parse_targets(publish: Mapping[str, Any] | None, *, root: Path,
                  where: str = "_defaults.yml") -> dict[str, PublishTarget]:
    """Every configured target by name (the embedded default when ``publish`` is empty)."""
    out: dict[str, PublishTarget] = {}
    for name, options in (publish or EMBEDDED_DEFAULT).items():
        here = f"{where}: publish.{name}"
        if not isinstance(options, Mapping):
            raise ConfigError(f"publish.{name} must be a mapping", where=where)
        kind = KINDS.get(str(options.get("kind")))
        if kind is None:
            raise ConfigError(f"unknown publish kind {options.get('kind')!r}", where=here,
                              hint=did_you_mean(str(options.get("kind")), KINDS) or f"use one of: {', '.join(KINDS)}")
        allowed = sorted({"kind", *(f.name for f in dataclasses.fields(kind) if f.name != "name")})
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ConfigError(f"unknown key(s) {', '.join(unknown)} for kind {kind.kind}", where=here,
                              hint=f"allowed: {', '.join(allowed)}")
        out[str(name)] = kind.parse(str(name), {k: v for k, v in options.items() if k != "kind"}, root=root,
                                    where=here)
    for t in out.values():
        other = out.get(t.after) if t.after is not None else None
        if t.after is not None and (other is None or other.kind == t.kind):
            raise ConfigError(f"links: {t.after!r} is not a github or twine target", where=f"{where}: publish.{t.name}",
                              hint=f"targets: {', '.join(out)}")
    return out


def select(targets: Mapping[str, PublishTarget], names: list[str] | None) -> list[PublishTarget]:
    """The targets ``--target`` asks for (all configured ones when none is named)."""
    if not names:
        return list(targets.values())
    missing = [n for n in names if n not in targets]
    if missing:
        raise UsageError(f"unknown target(s): {', '.join(missing)}",
                         hint=f"configured in _defaults.yml publish: {', '.join(targets) or '(none)'}")
    return [targets[n] for n in dict.fromkeys(names)]


def ordered(targets: Sequence[PublishTarget]) -> list[PublishTarget]:
    """Targets in run order: one that publishes after another (an index linking to its copies) last."""
    return sorted(targets, key=lambda t: t.after is not None)
