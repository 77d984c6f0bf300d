"""YAML loading that remembers where every key stood, so errors can say file:line.

Mappings load as :class:`YMap` (a dict with ``line`` and ``key_lines``), sequences as
:class:`YList` (a list with ``line`` and ``item_lines``). Duplicate keys are refused: YAML
silently keeps the last one, which hides a maintainer's mistake; keys a merge (``<<``) brings in
may be overridden by the mapping's own keys, as YAML defines it.

Aliases are bounded before anything is built: a few hundred bytes of nested aliases expand to
gigabytes (the "billion laughs"), and every later walk of the data (checks, hints, hashes) would
pay for the expansion. A document with more than :data:`MAX_ALIASES` aliases, or whose expanded
size passes :data:`MAX_EXPANDED_NODES` nodes or :data:`MAX_EXPANDED_CHARS` characters of scalars,
or with an alias inside its own anchor, is refused at the alias's line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from farm.errors import ConfigError

MAX_ALIASES = 1000
MAX_EXPANDED_NODES = 100_000
MAX_EXPANDED_CHARS = 8 << 20
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YMap(dict):  # type: ignore[type-arg]
    """A mapping with the line of itself and of each key (1-based)."""

    line: int = 0
    key_lines: dict[str, int]

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class YList(list):  # type: ignore[type-arg]
    line: int = 0
    item_lines: list[int]

    def line_of(self, index: int) -> int:
        return self.item_lines[index] if index < len(self.item_lines) else self.line


# libyaml's parser when PyYAML has it (several times faster); the constructors are the same.
_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """SafeLoader that builds YMap/YList and rejects duplicate keys."""

    filename = "<yaml>"


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> YMap:
    own = sum(1 for key_node, _ in node.value if key_node.tag != _MERGE_TAG)
    merge_line = next((k.start_mark.line + 1 for k, _ in node.value if k.tag == _MERGE_TAG), 0)
    loader.flatten_mapping(node)  # merged pairs first (first source wins), then the mapping's own
    merged = len(node.value) - own
    result = YMap()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    from_merge: set[str] = set()
    for i, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            key = str(key)
        line = key_node.start_mark.line + 1
        if i < merged:  # a merged key: the line of the `<<` that brought it in
            from_merge.add(key)
            line = merge_line
        elif key in from_merge:  # the mapping's own key overrides a merged one
            from_merge.discard(key)
        elif key in result:
            raise ConfigError(
                f"duplicate key {key!r} (first at line {result.key_lines[key]})",
                where=f"{loader.filename}:{line}",
                hint="keep one of them; YAML would silently use the last",
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = line
    return result


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> YList:
    result = YList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


MAX_YAML_BYTES = 8 << 20  # _defaults.yml is ~20 KB, a recipe ~2 KB


def load_yaml(path: Path, *, display: str | None = None) -> tuple[Any, bytes]:
    """Load ``path``; return the data and the raw bytes (for hashing)."""
    name = display or str(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError("file not found", where=name,
                          hint=f"run farm in the farm repository (or pass --root); looked for {path}") from None
    except OSError as exc:  # a directory, no permission: still the input, not the environment
        raise ConfigError(f"cannot read the file: {exc.strerror or exc}", where=name) from None
    if len(raw) > MAX_YAML_BYTES:  # a device or a runaway file, not a recipe
        raise ConfigError(f"larger than {MAX_YAML_BYTES:,} bytes: not a farm configuration file", where=name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x})", where=f"{name}:{line}",
                          hint="save the file as UTF-8") from None
    if "&" in text:  # no anchor, no alias: skip the pre-pass on plain files
        check_aliases(text, name)
    loader = _Loader(text)
    loader.filename = name
    try:
        return loader.get_single_data(), raw
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"not valid YAML: {exc.problem or exc}", where=f"{name}{at}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", where=name) from None
    except RecursionError:
        raise ConfigError("nested too deeply to load", where=name,
                          hint="a recipe needs a few levels of nesting, not hundreds") from None
    finally:
        loader.dispose()


def check_aliases(text: str, name: str) -> None:
    """Refuse a document whose aliases expand past the bounds, in one pass over its events.

    Time and memory are linear in the text: each anchor's expanded size is summed once, and an
    alias adds its anchor's size to the enclosing collection without expanding anything.
    """
    sizes: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, scalar chars) when expanded
    open_anchors: set[str] = set()
    stack: list[list[Any]] = [[None, 0, 0]]  # [anchor, nodes, chars] per open collection
    aliases = total_nodes = total_chars = 0
    try:
        for event in yaml.parse(text, Loader=_Base):
            if isinstance(event, yaml.CollectionEndEvent):
                anchor, nodes, chars = stack.pop()
                if anchor:
                    open_anchors.discard(anchor)
                    sizes[anchor] = (nodes, chars)
                stack[-1][1] += nodes
                stack[-1][2] += chars
                continue
            if isinstance(event, yaml.CollectionStartEvent):
                if event.anchor:
                    open_anchors.add(event.anchor)
                stack.append([event.anchor, 0, 0])
                nodes, chars = 1, 0
            elif isinstance(event, yaml.ScalarEvent):
                nodes, chars = 1, len(event.value)
                if event.anchor:
                    sizes[event.anchor] = (nodes, chars)
            elif isinstance(event, yaml.AliasEvent):
                line = event.start_mark.line + 1 if event.start_mark else 0
                aliases += 1
                if event.anchor in open_anchors:
                    raise ConfigError(f"alias *{_clip(event.anchor)} inside its own anchor (a recursive value)",
                                      where=f"{name}:{line}", hint="write the value out, or alias a finished anchor")
                if aliases > MAX_ALIASES:
                    raise ConfigError(f"more than {MAX_ALIASES} aliases", where=f"{name}:{line}",
                                      hint="write the values out; recipes need few anchors")
                nodes, chars = sizes.get(event.anchor or "", (1, 0))
            else:
                continue
            stack[-1][1] += nodes
            stack[-1][2] += chars
            total_nodes += nodes
            total_chars += chars
            if total_nodes > MAX_EXPANDED_NODES or total_chars > MAX_EXPANDED_CHARS:
                raise ConfigError(
                    f"aliases expand to more than {MAX_EXPANDED_NODES:,} values or "
                    f"{MAX_EXPANDED_CHARS >> 20} MiB of text",
                    where=f"{name}:{event.start_mark.line + 1 if event.start_mark else 0}",
                    hint="write the values out instead of nesting aliases")
    except yaml.YAMLError:
        return  # the real load reports it, with its line


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
