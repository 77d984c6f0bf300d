"""Publish targets: what ``_defaults.yml`` ``publish:`` names, as typed settings.

``publish:`` maps a target name to its settings; ``kind`` picks the implementation::

    publish:
      index:  {kind: index, path: dist/index, base_url: null, variants: true}
      github: {kind: github, repository: owner/name}
      pypi:   {kind: twine, repository_url: https://upload.pypi.org/legacy/,
               simple_url: https://pypi.org/simple/}

Without a ``publish:`` mapping the embedded default is one ``index`` target at ``dist/index``.
Credentials are never settings: they come from the environment variables named here.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.errors import ConfigError, UsageError
from farm.publish.ghrest import API_URL, UPLOADS_URL
from farm.publish.github import DEFAULT_TAG, check_tag


class TargetKind(str, enum.Enum):
    INDEX = "index"
    GITHUB = "github"
    TWINE = "twine"


@dataclass(frozen=True)
class IndexSettings:
    """A static PEP 503 tree. ``base_url`` is where the tree is served (recorded in the ledger);
    without it the ledger records paths relative to the tree's root. ``links``: another target
    (github, twine) whose copies the pages link to, instead of storing the wheels in the tree.
    ``variants``: also the wheel-variant channel under ``variants/`` (:mod:`farm.publish.variantchannel`)."""

    name: str
    path: Path
    base_url: str | None = None
    links: str | None = None
    variants: bool = False


@dataclass(frozen=True)
class GithubSettings:
    """GitHub Releases through the REST API: a release per ``tag`` (a format over the wheel's
    cell, see :mod:`farm.publish.github`). ``api_url`` / ``uploads_url``: GitHub Enterprise
    Server's, or a test server's."""

    name: str
    repository: str
    tag: str = DEFAULT_TAG
    # Warn when a release will hold this many assets; GitHub refuses the 1,001st.
    warn_assets: int = 900
    api_url: str = API_URL
    uploads_url: str = UPLOADS_URL


@dataclass(frozen=True)
class TwineSettings:
    """Any PyPI-compatible repository. ``simple_url`` is where existing files are looked up; it
    defaults to ``repository_url`` with ``legacy/`` replaced by (or ``simple/`` appended)."""

    name: str
    repository_url: str
    simple_url: str
    username_env: str = "TWINE_USERNAME"
    password_env: str = "TWINE_PASSWORD"


TargetSettings = IndexSettings | GithubSettings | TwineSettings

EMBEDDED_DEFAULT: Mapping[str, Mapping[str, Any]] = {
    "index": {"kind": "index", "path": "dist/index", "base_url": None},
}

_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")

_KEYS: Mapping[TargetKind, frozenset[str]] = {
    TargetKind.INDEX: frozenset({"kind", "path", "base_url", "links", "variants"}),
    TargetKind.GITHUB: frozenset({"kind", "repository", "tag", "warn_assets", "api_url", "uploads_url"}),
    TargetKind.TWINE: frozenset({"kind", "repository_url", "simple_url", "username_env", "password_env"}),
}


def default_simple_url(repository_url: str) -> str:
    base = repository_url.rstrip("/")
    base = base.removesuffix("/legacy")
    return base + "/simple/"


def parse_target(name: str, options: Mapping[str, Any], *, root: Path, where: str = "_defaults.yml") -> TargetSettings:
    """Typed settings for one ``publish:`` entry; unknown keys and missing ones are refused."""
    here = f"{where}: publish.{name}"
    raw_kind = options.get("kind")
    try:
        kind = TargetKind(raw_kind)
    except ValueError:
        raise ConfigError(
            f"unknown publish kind {raw_kind!r}", where=here,
            hint=f"use one of: {', '.join(k.value for k in TargetKind)}",
        ) from None
    unknown = sorted(set(options) - _KEYS[kind])
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)} for kind {kind.value}", where=here,
                          hint=f"allowed: {', '.join(sorted(_KEYS[kind]))}")

    def need(key: str) -> str:
        value = options.get(key)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key} must be a non-empty string", where=here)
        return value

    if kind is TargetKind.INDEX:
        path = Path(need("path"))
        base_url = options.get("base_url")
        if base_url is not None and not isinstance(base_url, str):
            raise ConfigError("base_url must be a string or null", where=here)
        links = options.get("links")
        if links is not None and (not isinstance(links, str) or links == name):
            raise ConfigError("links must name another publish target (github or twine)", where=here)
        variants = options.get("variants", False)
        if not isinstance(variants, bool):
            raise ConfigError("variants must be true or false", where=here)
        if variants and links is not None:
            raise ConfigError("variants needs the wheels stored in the tree, and links lists them elsewhere",
                              where=here, hint="turn the channel on for an index that stores its wheels")
        return IndexSettings(name, path if path.is_absolute() else root / path,
                             base_url.rstrip("/") if base_url else None, links, variants)
    if kind is TargetKind.GITHUB:
        repo = need("repository")
        if not _REPO.match(repo):
            raise ConfigError(f"repository {repo!r} is not owner/name", where=here)
        tag = options.get("tag", DEFAULT_TAG)
        if not isinstance(tag, str):
            raise ConfigError("tag must be a string", where=here, hint=f"e.g. {DEFAULT_TAG!r}")
        try:  # an unknown field fails here, not mid-upload
            check_tag(tag)
        except ConfigError as exc:
            raise ConfigError(exc.message, where=here, hint=exc.hint) from None
        warn = options.get("warn_assets", 900)
        if not isinstance(warn, int) or not 0 < warn <= 1000:
            raise ConfigError("warn_assets must be an integer in 1..1000", where=here)
        urls = {}
        for key, default in (("api_url", API_URL), ("uploads_url", UPLOADS_URL)):
            value = options.get(key, default)
            if not isinstance(value, str) or not value.startswith(("https://", "http://")):
                raise ConfigError(f"{key} must be an http(s) URL", where=here, hint=f"GitHub's is {default}")
            urls[key] = value.rstrip("/")
        return GithubSettings(name, repo, tag, warn, **urls)
    url = need("repository_url")
    simple = options.get("simple_url") or default_simple_url(url)
    return TwineSettings(name, url, simple if simple.endswith("/") else simple + "/",
                         options.get("username_env", "TWINE_USERNAME"),
                         options.get("password_env", "TWINE_PASSWORD"))


def parse_targets(publish: Mapping[str, Any] | None, *, root: Path,
                  where: str = "_defaults.yml") -> dict[str, TargetSettings]:
    """Every configured target by name (the embedded default when ``publish`` is empty)."""
    mapping = publish or EMBEDDED_DEFAULT
    out: dict[str, TargetSettings] = {}
    for name, options in mapping.items():
        if not isinstance(options, Mapping):
            # A config loader may hand over its own PublishTarget(name, kind, options) objects.
            kind = getattr(options, "kind", None)
            opts = getattr(options, "options", None)
            if kind is None or not isinstance(opts, Mapping):
                raise ConfigError(f"publish.{name} must be a mapping", where=where)
            options = {"kind": getattr(kind, "value", kind), **{k: v for k, v in opts.items() if k != "kind"}}  # noqa: PLW2901 (the object form read as the mapping form)
        out[str(name)] = parse_target(str(name), options, root=root, where=where)
    for t in out.values():
        if isinstance(t, IndexSettings) and t.links is not None:
            other = out.get(t.links)
            if other is None or isinstance(other, IndexSettings):
                raise ConfigError(f"links: {t.links!r} is not a github or twine target",
                                  where=f"{where}: publish.{t.name}", hint=f"targets: {', '.join(out)}")
    return out


def select(targets: Mapping[str, TargetSettings], names: list[str] | None) -> list[TargetSettings]:
    """The targets ``--target`` asks for (all configured ones when none is named)."""
    if not names:
        return list(targets.values())
    missing = [n for n in names if n not in targets]
    if missing:
        raise UsageError(f"unknown target(s): {', '.join(missing)}",
                         hint=f"configured in _defaults.yml publish: {', '.join(targets) or '(none)'}")
    return [targets[n] for n in dict.fromkeys(names)]
